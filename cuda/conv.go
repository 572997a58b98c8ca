//go:build cuda

package cuda

import (
	"fmt"

	"gorgonia.org/cu"

	"github.com/lingbotmap/lingbotmap/engine/backend"
)

// Conv2D by im2col + one GEMM per image: out[o, hw] = w[o, ck]·col[ck, hw],
// which is already NCHW. A 1×1 convolution with stride 1 skips im2col.
func (g *gpu) Conv2D(x, w, b backend.Tensor, stride, pad int) backend.Tensor {
	xt, wt, bt := g.tensor(x), g.tensor(w), g.tensor(b)
	if len(xt.shape) != 4 || len(wt.shape) != 4 || wt.shape[1] != xt.shape[1] || stride < 1 || pad < 0 {
		panic(fmt.Sprintf("cuda: Conv2D x %v w %v stride %d pad %d", xt.shape, wt.shape, stride, pad))
	}
	n, c, h, wd := xt.shape[0], xt.shape[1], xt.shape[2], xt.shape[3]
	o, kh, kw := wt.shape[0], wt.shape[2], wt.shape[3]
	ho := (h+2*pad-kh)/stride + 1
	wo := (wd+2*pad-kw)/stride + 1
	if ho <= 0 || wo <= 0 {
		panic(fmt.Sprintf("cuda: Conv2D output %dx%d for x %v w %v", ho, wo, xt.shape, wt.shape))
	}
	if bt != nil && bt.numel() != o {
		panic(fmt.Sprintf("cuda: Conv2D bias %v for %d channels", bt.shape, o))
	}
	ck, hw := c*kh*kw, ho*wo
	direct := kh == 1 && kw == 1 && stride == 1 && pad == 0
	return g.output([]int{n, o, ho, wo}, "Conv2D", func(out *Tensor) error {
		wp, bf, err := g.weightOperand(wt)
		if err != nil {
			return err
		}
		var col *buffer
		if !direct {
			if col, err = g.scratch(int64(ck) * int64(hw) * 4); err != nil {
				return err
			}
			defer g.pool.put(col)
		}
		for img := 0; img < n; img++ {
			src := xt.ptr() + cu.DevicePtr(int64(img)*int64(c*h*wd)*4)
			cp := src
			if !direct {
				if err := g.launch1D("conv", "im2col_f32", int64(ck)*int64(hw), col.ptr, src, c, h, wd, kh, kw, stride, pad, ho, wo); err != nil {
					return err
				}
				cp = col.ptr
			}
			bp, tmp, err := g.operand(cp, int64(ck)*int64(hw), bf)
			if err != nil {
				return err
			}
			dst := out.ptr() + cu.DevicePtr(int64(img)*int64(o*hw)*4)
			err = g.rowGemm(g.gemmPrec(bf, true), false, false, o, hw, ck, wp, ck, bp, hw, dst, hw, 0)
			g.pool.put(tmp)
			if err != nil {
				return err
			}
		}
		if bt == nil {
			return nil
		}
		total := int64(n) * int64(o) * int64(hw)
		return g.launch1D("elementwise", "bias_nchw_f32", total, out.ptr(), bt.ptr(), total, o, hw)
	})
}

// ConvTranspose2D with kernel = stride and no padding: per image one GEMM
// prod[hw, o·k·k] = xᵀ·w, then a scatter into the k×k output blocks (+ bias).
func (g *gpu) ConvTranspose2D(x, w, b backend.Tensor, stride int) backend.Tensor {
	xt, wt, bt := g.tensor(x), g.tensor(w), g.tensor(b)
	if len(xt.shape) != 4 || len(wt.shape) != 4 || wt.shape[0] != xt.shape[1] || wt.shape[2] != stride || wt.shape[3] != stride || stride < 1 {
		panic(fmt.Sprintf("cuda: ConvTranspose2D x %v w %v stride %d", xt.shape, wt.shape, stride))
	}
	n, c, h, wd := xt.shape[0], xt.shape[1], xt.shape[2], xt.shape[3]
	o, k := wt.shape[1], stride
	if bt != nil && bt.numel() != o {
		panic(fmt.Sprintf("cuda: ConvTranspose2D bias %v for %d channels", bt.shape, o))
	}
	okk, hw := o*k*k, h*wd
	return g.output([]int{n, o, h * k, wd * k}, "ConvTranspose2D", func(out *Tensor) error {
		if n == 0 || hw == 0 {
			return nil
		}
		wp, bf, err := g.weightOperand(wt)
		if err != nil {
			return err
		}
		prod, err := g.scratch(int64(hw) * int64(okk) * 4)
		if err != nil {
			return err
		}
		defer g.pool.put(prod)
		for img := 0; img < n; img++ {
			src := xt.ptr() + cu.DevicePtr(int64(img)*int64(c*hw)*4)
			ap, tmp, err := g.operand(src, int64(c)*int64(hw), bf)
			if err != nil {
				return err
			}
			err = g.rowGemm(g.gemmPrec(bf, true), true, false, hw, okk, c, ap, hw, wp, okk, prod.ptr, okk, 0)
			g.pool.put(tmp)
			if err != nil {
				return err
			}
			dst := out.ptr() + cu.DevicePtr(int64(img)*int64(o*hw*k*k)*4)
			if err := g.launch1D("conv", "convt_scatter_f32", int64(o)*int64(hw*k*k), dst, prod.ptr, ptrOf(bt), o, h, wd, k); err != nil {
				return err
			}
		}
		return nil
	})
}

// ResizeBilinear follows PyTorch's bilinear interpolation (antialias off).
func (g *gpu) ResizeBilinear(x backend.Tensor, outH, outW int, alignCorners bool) backend.Tensor {
	xt := g.tensor(x)
	if len(xt.shape) != 4 || outH <= 0 || outW <= 0 {
		panic(fmt.Sprintf("cuda: ResizeBilinear %v to %dx%d", xt.shape, outH, outW))
	}
	n, c, h, w := xt.shape[0], xt.shape[1], xt.shape[2], xt.shape[3]
	sy, sx := resizeScale(h, outH, alignCorners), resizeScale(w, outW, alignCorners)
	align := 0
	if alignCorners {
		align = 1
	}
	planes := int64(n) * int64(c)
	return g.output([]int{n, c, outH, outW}, "ResizeBilinear", func(out *Tensor) error {
		if planes == 0 || h == 0 || w == 0 {
			return nil
		}
		return g.launch1D("conv", "resize_bilinear_f32", planes*int64(outH*outW), out.ptr(), xt.ptr(), planes, h, w, outH, outW, sy, sx, align)
	})
}

// resizeScale is PyTorch's source step per output pixel, in float32.
func resizeScale(in, out int, alignCorners bool) float32 {
	if alignCorners {
		if out > 1 {
			return float32(in-1) / float32(out-1)
		}
		return 0
	}
	return float32(in) / float32(out)
}
