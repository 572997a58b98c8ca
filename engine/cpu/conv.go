package cpu

import (
	"fmt"
	"math"

	"github.com/lingbotmap/lingbotmap/engine/backend"
)

// Conv2D by im2col + GEMM: x [N, C, H, W], w [O, C, kh, kw].
func (b *Backend) Conv2D(x, w, bias backend.Tensor, stride, pad int) backend.Tensor {
	xt, wt := ct(x), ct(w)
	if len(xt.shape) != 4 || len(wt.shape) != 4 || wt.shape[1] != xt.shape[1] || stride < 1 || pad < 0 {
		panic(fmt.Sprintf("cpu: Conv2D x %v w %v stride %d pad %d", xt.shape, wt.shape, stride, pad))
	}
	n, c, h, wd := xt.shape[0], xt.shape[1], xt.shape[2], xt.shape[3]
	o, kh, kw := wt.shape[0], wt.shape[2], wt.shape[3]
	ho := (h+2*pad-kh)/stride + 1
	wo := (wd+2*pad-kw)/stride + 1
	if ho <= 0 || wo <= 0 {
		panic(fmt.Sprintf("cpu: Conv2D output %dx%d for x %v w %v", ho, wo, xt.shape, wt.shape))
	}
	ck := c * kh * kw
	hw := ho * wo
	out := b.alloc(n, o, ho, wo)
	col := b.pool.get(ck * hw)
	defer b.pool.put(col)
	for img := 0; img < n; img++ {
		src := xt.data[img*c*h*wd:]
		// col[(ci,ky,kx), (oy,ox)]
		b.parallelFor(ck, func(lo, hi int) {
			for r := lo; r < hi; r++ {
				ci, ky, kx := r/(kh*kw), (r/kw)%kh, r%kw
				dst := col[r*hw : (r+1)*hw]
				for oy := 0; oy < ho; oy++ {
					iy := oy*stride - pad + ky
					row := dst[oy*wo : (oy+1)*wo]
					if iy < 0 || iy >= h {
						clear(row)
						continue
					}
					srow := src[(ci*h+iy)*wd : (ci*h+iy+1)*wd]
					if stride == 1 {
						// one contiguous run of the input row, zeros where it hangs over an edge
						off := kx - pad // ix = ox + off
						lo, hi := min(max(0, -off), wo), min(wo, wd-off)
						clear(row[:lo])
						if hi > lo {
							copy(row[lo:hi], srow[lo+off:hi+off])
						}
						clear(row[max(hi, lo):])
						continue
					}
					for ox := range row {
						ix := ox*stride - pad + kx
						if ix < 0 || ix >= wd {
							row[ox] = 0
						} else {
							row[ox] = srow[ix]
						}
					}
				}
			}
		})
		dst := out.data[img*o*hw : (img+1)*o*hw]
		beta := float32(0)
		if bias != nil {
			bd := ct(bias).data
			for oc := 0; oc < o; oc++ {
				v := bd[oc]
				seg := dst[oc*hw : (oc+1)*hw]
				for i := range seg {
					seg[i] = v
				}
			}
			beta = 1
		}
		sgemm(false, false, o, hw, ck, 1, wt.data, ck, col, hw, beta, dst, hw)
	}
	return out
}

// ConvTranspose2D with kernel = stride and no padding: every input pixel
// spreads into its own k×k output block, so it is one GEMM and a scatter.
func (b *Backend) ConvTranspose2D(x, w, bias backend.Tensor, stride int) backend.Tensor {
	xt, wt := ct(x), ct(w)
	if len(xt.shape) != 4 || len(wt.shape) != 4 || wt.shape[0] != xt.shape[1] || wt.shape[2] != stride || wt.shape[3] != stride {
		panic(fmt.Sprintf("cpu: ConvTranspose2D x %v w %v stride %d", xt.shape, wt.shape, stride))
	}
	n, c, h, wd := xt.shape[0], xt.shape[1], xt.shape[2], xt.shape[3]
	o, k := wt.shape[1], stride
	okk := o * k * k
	hw := h * wd
	out := b.alloc(n, o, h*k, wd*k)
	prod := b.pool.get(hw * okk)
	defer b.pool.put(prod)
	var bd []float32
	if bias != nil {
		bd = ct(bias).data
	}
	for img := 0; img < n; img++ {
		// prod[(y,x), (oc,a,bb)] = Σ_c x[c,(y,x)] · w[c,(oc,a,bb)]
		sgemm(true, false, hw, okk, c, 1, xt.data[img*c*hw:], hw, wt.data, okk, 0, prod, okk)
		dst := out.data[img*o*hw*k*k:]
		b.parallelFor(o, func(lo, hi int) {
			for oc := lo; oc < hi; oc++ {
				bv := float32(0)
				if bd != nil {
					bv = bd[oc]
				}
				for y := 0; y < h; y++ {
					for xx := 0; xx < wd; xx++ {
						p := prod[(y*wd+xx)*okk+oc*k*k:]
						for a := 0; a < k; a++ {
							row := dst[(oc*h*k+y*k+a)*wd*k+xx*k:]
							for bb := 0; bb < k; bb++ {
								row[bb] = p[a*k+bb] + bv
							}
						}
					}
				}
			}
		})
	}
	return out
}

// ResizeBilinear follows PyTorch's bilinear interpolation (antialias off).
func (b *Backend) ResizeBilinear(x backend.Tensor, outH, outW int, alignCorners bool) backend.Tensor {
	xt := ct(x)
	if len(xt.shape) != 4 || outH <= 0 || outW <= 0 {
		panic(fmt.Sprintf("cpu: ResizeBilinear %v to %dx%d", xt.shape, outH, outW))
	}
	n, c, h, w := xt.shape[0], xt.shape[1], xt.shape[2], xt.shape[3]
	y0, y1, fy := bilinearTaps(h, outH, alignCorners)
	x0, x1, fx := bilinearTaps(w, outW, alignCorners)
	out := b.alloc(n, c, outH, outW)
	b.parallelFor(n*c, func(lo, hi int) {
		for p := lo; p < hi; p++ {
			src := xt.data[p*h*w : (p+1)*h*w]
			dst := out.data[p*outH*outW : (p+1)*outH*outW]
			for oy := 0; oy < outH; oy++ {
				r0, r1, ly := src[y0[oy]*w:], src[y1[oy]*w:], fy[oy]
				for ox := 0; ox < outW; ox++ {
					lx := fx[ox]
					top := r0[x0[ox]]*(1-lx) + r0[x1[ox]]*lx
					bot := r1[x0[ox]]*(1-lx) + r1[x1[ox]]*lx
					dst[oy*outW+ox] = top*(1-ly) + bot*ly
				}
			}
		}
	})
	return out
}

// bilinearTaps gives, per output index, the two source indices and the weight
// of the second, as PyTorch's area_pixel_compute_source_index does (float32).
func bilinearTaps(in, out int, alignCorners bool) (i0, i1 []int, frac []float32) {
	i0, i1, frac = make([]int, out), make([]int, out), make([]float32, out)
	var scale float32
	if alignCorners {
		if out > 1 {
			scale = float32(in-1) / float32(out-1)
		}
	} else {
		scale = float32(in) / float32(out)
	}
	for o := 0; o < out; o++ {
		var src float32
		if alignCorners {
			src = scale * float32(o)
		} else {
			src = scale*(float32(o)+0.5) - 0.5
			if src < 0 {
				src = 0
			}
		}
		f := int(math.Floor(float64(src)))
		f = min(f, in-1)
		i0[o] = f
		i1[o] = min(f+1, in-1)
		frac[o] = src - float32(f)
	}
	return i0, i1, frac
}
