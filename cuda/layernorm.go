//go:build cuda

package cuda

import (
	"fmt"
	"math"

	"gorgonia.org/cu"

	"github.com/lingbotmap/lingbotmap/engine/backend"
)

// LayerNorm over the last dimension; w and b may be nil.
func (g *gpu) LayerNorm(x, w, b backend.Tensor, eps float32) backend.Tensor {
	xt, wt, bt := g.tensor(x), g.tensor(w), g.tensor(b)
	rows, c := rowsCols(xt.shape)
	if (wt != nil && wt.numel() != c) || (bt != nil && bt.numel() != c) {
		panic(fmt.Sprintf("cuda: LayerNorm x %v with affine %v / %v", xt.shape, shapeOf(wt), shapeOf(bt)))
	}
	return g.output(xt.shape, "LayerNorm", func(out *Tensor) error {
		if rows == 0 {
			return nil
		}
		if (c == 64 || c == 128 || c == 1024) && rows < math.MaxInt32/32 && aligned(8, out.ptr(), xt.ptr()) {
			// One warp a row, eight rows a block. In BF16 mode the kernel
			// also writes the bf16 copy a following bf16 GEMM reads (a
			// block's norm1/norm2 feed only qkv/fc1), which costs less than
			// the cast that GEMM would otherwise make.
			var bf cu.DevicePtr
			if g.cfg.Precision.bf16Trunk() {
				var err error
				if bf, err = g.attachBF16(out); err != nil {
					return err
				}
			}
			return g.launch("layernorm", fmt.Sprintf("layernorm_w%d", c), [3]int{(rows + 7) / 8, 1, 1}, [3]int{256, 1, 1}, 0,
				out.ptr(), bf, xt.ptr(), ptrOf(wt), ptrOf(bt), rows, eps)
		}
		threads := 256
		if c <= 128 {
			threads = 64
		}
		return g.launch("layernorm", "layernorm_f32", [3]int{rows, 1, 1}, [3]int{threads, 1, 1}, 0,
			out.ptr(), xt.ptr(), ptrOf(wt), ptrOf(bt), c, eps)
	})
}
