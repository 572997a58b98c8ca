//go:build cuda

package cuda

import (
	"fmt"
	"math"

	"gorgonia.org/cu"

	"github.com/lingbotmap/lingbotmap/engine/backend"
)

var _ backend.NormLinearer = (*gpu)(nil)

// LayerNorm over the last dimension; w and b may be nil.
func (g *gpu) LayerNorm(x, w, b backend.Tensor, eps float32) backend.Tensor {
	xt, wt, bt := g.tensor(x), g.tensor(w), g.tensor(b)
	rows, c := rowsCols(xt.shape)
	checkNormAffine(xt, wt, bt, c)
	return g.output(xt.shape, "LayerNorm", func(out *Tensor) error {
		if rows == 0 {
			return nil
		}
		if warpNorm(rows, c) && aligned(8, out.ptr(), xt.ptr()) {
			// One warp a row, eight rows a block. In BF16 mode the kernel
			// also writes the bf16 copy a following bf16 GEMM reads, which
			// costs less than the cast that GEMM would otherwise make.
			var bf cu.DevicePtr
			if g.cfg.Precision.bf16Trunk() {
				var err error
				if bf, err = g.attachBF16(out); err != nil {
					return err
				}
			}
			return g.layerNormWarp(out.ptr(), bf, xt, wt, bt, rows, c, eps)
		}
		threads := 256
		if c <= 128 {
			threads = 64
		}
		return g.launch("layernorm", "layernorm_f32", [3]int{rows, 1, 1}, [3]int{threads, 1, 1}, 0,
			out.ptr(), xt.ptr(), ptrOf(wt), ptrOf(bt), c, eps)
	})
}

// warpNorm says the one-warp-a-row kernels take rows of width c.
func warpNorm(rows, c int) bool {
	return (c == 64 || c == 128 || c == 1024) && rows < math.MaxInt32/32
}

func checkNormAffine(xt, wt, bt *Tensor, c int) {
	if (wt != nil && wt.numel() != c) || (bt != nil && bt.numel() != c) {
		panic(fmt.Sprintf("cuda: LayerNorm x %v with affine %v / %v", xt.shape, shapeOf(wt), shapeOf(bt)))
	}
}

// layerNormWarp launches layernorm_w{c}: y (fp32) and ybf (bf16), either
// of which may be 0 (owner thread).
func (g *gpu) layerNormWarp(y, ybf cu.DevicePtr, xt, wt, bt *Tensor, rows, c int, eps float32) error {
	return g.launch("layernorm", fmt.Sprintf("layernorm_w%d", c), [3]int{(rows + 7) / 8, 1, 1}, [3]int{256, 1, 1}, 0,
		y, ybf, xt.ptr(), ptrOf(wt), ptrOf(bt), rows, eps)
}

// NormLinear is Linear(LayerNorm(x)) (backend.NormLinearer). With
// cuda.fuse_norm, in BF16 mode and for a trunk weight, the LayerNorm writes
// only the bf16 values the GEMM reads: the fp32 copy that LayerNorm keeps
// for other readers has none here. The GEMM reads the same bf16 values
// either way, so the result is the same to the bit.
func (g *gpu) NormLinear(x, nw, nb backend.Tensor, eps float32, w, b backend.Tensor, act backend.Activation) backend.Tensor {
	xt, wt := g.tensor(x), g.gemmTensor(w)
	rows, c := rowsCols(xt.shape)
	if !g.cfg.FuseNorm || !g.bf16Weight(wt) || !warpNorm(rows, c) || !aligned(8, xt.ptr()) {
		h := g.LayerNorm(x, nw, nb, eps)
		y := g.Linear(h, w, b, act)
		g.Free(h)
		return y
	}
	nwt, nbt := g.tensor(nw), g.tensor(nb)
	checkNormAffine(xt, nwt, nbt, c)
	h := g.outputBF16(xt.shape, "NormLinear", func(bf *buffer) error {
		if rows == 0 {
			return nil
		}
		return g.layerNormWarp(0, bf.ptr, xt, nwt, nbt, rows, c, eps)
	})
	y := g.Linear(h, w, b, act)
	g.Free(h)
	return y
}
