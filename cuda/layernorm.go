//go:build cuda

package cuda

import (
	"fmt"
	"math"

	"gorgonia.org/cu"

	"github.com/lingbotmap/lingbotmap/engine/backend"
)

var (
	_ backend.NormLinearer = (*gpu)(nil)
	_ backend.NormQKVer    = (*gpu)(nil)
)

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

// layerNormWarp launches layernorm_w{c} (or, with cuda.layernorm_v4 at
// width 1024 in bf16 and fp8, layernorm_v4_w1024): y (fp32) and ybf (bf16),
// either of which may be 0 (owner thread). fp32 keeps the one-warp kernel:
// it is the exact path, and v4 sums the statistics in another order.
func (g *gpu) layerNormWarp(y, ybf cu.DevicePtr, xt, wt, bt *Tensor, rows, c int, eps float32) error {
	if c == 1024 && g.cfg.LayerNormV4 && g.cfg.Precision.bf16Trunk() && aligned(16, y, xt.ptr(), ptrOf(wt), ptrOf(bt)) && aligned(8, ybf) {
		// cuda.layernorm_v4: two warps a row, 16-byte loads.
		return g.launch("layernorm", "layernorm_v4_w1024", [3]int{rows, 1, 1}, [3]int{64, 1, 1}, 0,
			y, ybf, xt.ptr(), ptrOf(wt), ptrOf(bt), eps)
	}
	return g.launch("layernorm", fmt.Sprintf("layernorm_w%d", c), [3]int{(rows + 7) / 8, 1, 1}, [3]int{256, 1, 1}, 0,
		y, ybf, xt.ptr(), ptrOf(wt), ptrOf(bt), rows, eps)
}

// NormLinear is Linear(LayerNorm(x)) (backend.NormLinearer). With
// cuda.fuse_norm, in BF16 mode and for a trunk weight, the LayerNorm writes
// only the bf16 values the GEMM reads: the fp32 copy that LayerNorm keeps
// for other readers has none here. The GEMM reads the same bf16 values
// either way, so the result is the same to the bit.
func (g *gpu) NormLinear(x, nw, nb backend.Tensor, eps float32, w, b backend.Tensor, act backend.Activation) backend.Tensor {
	wt := g.gemmTensor(w)
	if wt.buf.headBF {
		return g.normGEMV(x, nw, nb, eps, w, b, act)
	}
	h := g.normFor(x, nw, nb, eps, wt)
	y := g.Linear(h, w, b, act)
	g.Free(h)
	return y
}

// normFor is LayerNorm(x) for the GEMM of weight wt alone to read: only
// its bf16 operand (bf16 only, no fp32 values) where cuda.fuse_norm is on,
// the GEMM runs in bf16 and the one-warp kernel takes the width;
// LayerNorm's output otherwise. The caller frees it.
func (g *gpu) normFor(x, nw, nb backend.Tensor, eps float32, wt *Tensor) backend.Tensor {
	xt := g.tensor(x)
	rows, c := rowsCols(xt.shape)
	if !g.cfg.FuseNorm || !g.bf16Weight(wt) || !warpNorm(rows, c) || !aligned(8, xt.ptr()) {
		return g.LayerNorm(x, nw, nb, eps)
	}
	nwt, nbt := g.tensor(nw), g.tensor(nb)
	checkNormAffine(xt, nwt, nbt, c)
	return g.outputBF16(xt.shape, "NormLinear", func(bf *buffer) error {
		if rows == 0 {
			return nil
		}
		return g.layerNormWarp(0, bf.ptr, xt, nwt, nbt, rows, c, eps)
	})
}

// NormQKV is SplitQKV(NormLinear(x, …)) (backend.NormQKVer). With
// cuda.qkv_bf16, for a trunk weight in BF16 mode and heads of 64, the
// projection exists in bf16 only, its bias added before the rounding (as
// the reference's autocast rounds it), and the split reads that: half the
// GEMM's output and the split's input, one more rounding than the default
// path, which keeps the projection in fp32.
func (g *gpu) NormQKV(x, nw, nb backend.Tensor, eps float32, w, b backend.Tensor, p backend.QKVParams) (q, k, v backend.Tensor) {
	wt, bt := g.gemmTensor(w), g.tensor(b)
	if !g.cfg.QKVBF16 || p.HeadDim != 64 || !g.bf16Weight(wt) || (bt != nil && !bt.buf.trunk) {
		qkv := g.NormLinear(x, nw, nb, eps, w, b, backend.ActNone)
		q, k, v = g.SplitQKV(qkv, p)
		g.Free(qkv)
		return q, k, v
	}
	h := g.normFor(x, nw, nb, eps, wt)
	ht := g.gemmTensor(h)
	rows, kd, m, shape := linearShape("NormQKV", ht, wt, bt)
	qkv := g.outputBF16(shape, "Linear", func(bf *buffer) error {
		ok, err := g.linearBF16Out(bf.ptr, ht, wt, bt, rows, kd, m)
		if err != nil || ok {
			return err
		}
		// No bf16-output algorithm: fp32, then the same one rounding.
		n := int64(rows) * int64(m)
		acc, err := g.scratch(n * 4)
		if err != nil {
			return err
		}
		defer g.pool.put(acc)
		if err := g.linearInto(acc.ptr, ht, wt, bt, rows, kd, m); err != nil {
			return err
		}
		return g.toBF16(bf.ptr, acc.ptr, n)
	})
	g.Free(h)
	q, k, v = g.SplitQKV(qkv, p)
	g.Free(qkv)
	return q, k, v
}
