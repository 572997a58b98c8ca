package cpu

import (
	"fmt"

	"github.com/lingbotmap/lingbotmap/engine/backend"
)

// SplitQKV splits qkv [..., N, 3·H·D] into q, k, v [..., N, H, D], with the
// optional per-head LayerNorm and RoPE of q and k. It does in one pass what
// SliceCols, LayerNorm and RoPE do, with the same float32 arithmetic in the
// same order, so the results are those of the composed ops.
func (b *Backend) SplitQKV(qkv backend.Tensor, p backend.QKVParams) (q, k, v backend.Tensor) {
	xt := ct(qkv)
	nd := len(xt.shape)
	h, d := p.Heads, p.HeadDim
	if nd < 2 || h <= 0 || d <= 0 || xt.shape[nd-1] != 3*h*d {
		panic(fmt.Sprintf("cpu: SplitQKV of %v into %d heads of %d", xt.shape, h, d))
	}
	n := xt.shape[nd-2]
	e := h * d
	rows := len(xt.data) / (3 * e)

	type affine struct{ w, b []float32 }
	var norms [2]affine // q, k
	if p.Norm {
		for i, t := range [4]backend.Tensor{p.QW, p.QB, p.KW, p.KB} {
			if t == nil {
				continue
			}
			data := ct(t).data
			if len(data) != d {
				panic(fmt.Sprintf("cpu: SplitQKV norm parameter %d has shape %v, want [%d]", i, ct(t).shape, d))
			}
			if i%2 == 0 {
				norms[i/2].w = data
			} else {
				norms[i/2].b = data
			}
		}
	}

	// pair m rotates dims (plo[m], phi[m]), as in RoPE
	var cosd, sind []float32
	var plo, phi []int
	half := d / 2
	if (p.Cos == nil) != (p.Sin == nil) {
		panic("cpu: SplitQKV needs both RoPE tables or neither")
	}
	if p.Cos != nil {
		cosd, sind = ct(p.Cos).data, ct(p.Sin).data
		if d%2 != 0 || len(cosd) != n*half || len(sind) != n*half {
			panic(fmt.Sprintf("cpu: SplitQKV of %v (head %d) with RoPE tables %v, %v", xt.shape, d, ct(p.Cos).shape, ct(p.Sin).shape))
		}
		if p.Pairing == backend.RoPEHalves2D && d%4 != 0 {
			panic(fmt.Sprintf("cpu: SplitQKV halves-2D RoPE needs a head size divisible by 4, not %d", d))
		}
		plo, phi = ropePairs(d, p.Pairing)
	}

	shape := append(append([]int(nil), xt.shape[:nd-1]...), h, d)
	outs := [3]*Tensor{b.alloc(shape...), b.alloc(shape...), b.alloc(shape...)}
	b.parallelFor(rows, func(r0, r1 int) {
		for r := r0; r < r1; r++ {
			src := xt.data[r*3*e : (r+1)*3*e]
			copy(outs[2].data[r*e:(r+1)*e], src[2*e:])
			tok := r % n
			for part := 0; part < 2; part++ {
				for hd := 0; hd < h; hd++ {
					x := src[part*e+hd*d : part*e+(hd+1)*d]
					y := outs[part].data[r*e+hd*d : r*e+(hd+1)*d]
					if p.Norm {
						layerNormRow(y, x, norms[part].w, norms[part].b, p.Eps)
					} else {
						copy(y, x)
					}
					if cosd != nil {
						c := cosd[tok*half : (tok+1)*half]
						s := sind[tok*half : (tok+1)*half]
						for m := 0; m < half; m++ {
							a, o := y[plo[m]], y[phi[m]]
							y[plo[m]] = a*c[m] - o*s[m]
							y[phi[m]] = o*c[m] + a*s[m]
						}
					}
				}
			}
		}
	})
	return outs[0], outs[1], outs[2]
}
