//go:build cuda

package cuda

import (
	"fmt"

	"github.com/lingbotmap/lingbotmap/engine/backend"
)

// RoPE rotates x [..., N, H, D] with tables cos, sin [N, D/2].
func (g *gpu) RoPE(x, cos, sin backend.Tensor, pairing backend.RoPEPairing) backend.Tensor {
	xt, ct, st := g.tensor(x), g.tensor(cos), g.tensor(sin)
	if len(xt.shape) < 3 || len(ct.shape) != 2 {
		panic(fmt.Sprintf("cuda: RoPE x %v cos %v", xt.shape, ct.shape))
	}
	r := len(xt.shape)
	n, h, d := xt.shape[r-3], xt.shape[r-2], xt.shape[r-1]
	if d%4 != 0 || ct.shape[0] != n || ct.shape[1] != d/2 || st.numel() != ct.numel() {
		panic(fmt.Sprintf("cuda: RoPE x %v with tables %v %v", xt.shape, ct.shape, st.shape))
	}
	if pairing != backend.RoPEHalves2D && pairing != backend.RoPEInterleaved {
		panic(fmt.Sprintf("cuda: unknown RoPE pairing %d", pairing))
	}
	rows := int64(xt.numel() / (h * d))
	return g.output(xt.shape, "RoPE", func(out *Tensor) error {
		return g.launch1D("rope", "rope_f32", rows*int64(h*d/2), out.ptr(), xt.ptr(), ct.ptr(), st.ptr(), rows, n, h, d, int(pairing))
	})
}
