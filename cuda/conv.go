//go:build cuda

package cuda

import (
	"fmt"
	"math"

	"gorgonia.org/cu"

	"github.com/lingbotmap/lingbotmap/engine/backend"
)

// Variants of gpu.convVariant, for tests and benchmarks: TF32 3×3
// convolutions by im2col + cuBLASLt, always by the implicit GEMM (the
// warpgroup kernel on Hopper, even where its grid would leave most of the GPU
// idle), or always by the mma.sync implicit GEMM.
const (
	convIm2col   = "im2col"
	convImplicit = "implicit"
	convMMA      = "mma"
	// convWide: the warpgroup kernel with 256-pixel blocks wherever the
	// warpgroup kernel runs (conv3_wg_tf32_w, Config.ConvWide), on Hopper.
	convWide = "wide"
)

// conv3WG* describe conv3_wg_tf32 (conv_igemm.cu): a block is 128 output
// channels × conv3WGPixels output pixels, and its shared memory is
// CW_STAGES stages of two 16 KB tiles plus 1 KB for aligning them;
// conv3_wg_tf32_w's blocks are twice as wide, its stages three tiles.
const (
	conv3WGPixels    = 128
	conv3WGSmem      = 4*2*128*128 + 1024
	conv3WGWideSmem  = 4*3*128*128 + 1024
	conv3WGWideBlock = 2 * conv3WGPixels
)

// conv3WideCost is the time of a 256-pixel block of conv3_wg_tf32_w in
// 128-pixel blocks of conv3_wg_tf32: twice the products, fewer bytes from
// L2 for them. A model for choosing, not a measurement: BenchmarkConv2DBound
// times both (variants "implicit" and "wide").
const conv3WideCost = 1.75

// wideConv3 says whether the 256-pixel blocks should run a convolution of
// hw output pixels to o channels (one image: conv3WG launches one at a
// time): when their waves over sms multiprocessors, each conv3WideCost as
// long, take less time than the narrow blocks' waves.
func wideConv3(o, hw, sms int) bool {
	waves := func(px int) int {
		blocks := (hw + px - 1) / px * ((o + 127) / 128)
		return (blocks + sms - 1) / max(sms, 1)
	}
	return float64(waves(conv3WGWideBlock))*conv3WideCost < float64(waves(conv3WGPixels))
}

// conv3Tile is a block shape of the implicit-GEMM kernel (conv_igemm.cu):
// bm output channels × bn output pixels.
type conv3Tile struct{ bm, bn int }

// conv3Stages and conv3BK are CV_STAGES and CV_BK in conv_igemm.cu.
const conv3Stages, conv3BK = 3, 32

// smem is the block's dynamic shared memory in bytes.
func (t conv3Tile) smem() int { return conv3Stages * (t.bm*(conv3BK+4) + conv3BK*(t.bn+8)) * 4 }

func (t conv3Tile) blocks(o, pixels, images int) int {
	return (pixels + t.bn - 1) / t.bn * ((o + t.bm - 1) / t.bm) * images
}

// pickConv3Tile chooses the implicit GEMM's block shape for o output
// channels and pixels output pixels per image: as tall as o needs, lowered
// to 64 channels when that fills the GPU's sms multiprocessors better. ok is
// false when even that leaves more than half of them idle (the DPT head's
// small maps at the coarse levels, whose K runs to 9216): cuBLASLt then does
// better with split-K on the im2col columns.
func pickConv3Tile(o, pixels, images, sms int) (t conv3Tile, ok bool) {
	switch {
	case o <= 32:
		t = conv3Tile{32, 256}
	case o <= 64:
		t = conv3Tile{64, 128}
	default:
		t = conv3Tile{128, 128}
		if t.blocks(o, pixels, images) < sms {
			t = conv3Tile{64, 128}
		}
	}
	return t, 2*t.blocks(o, pixels, images) >= sms
}

// defaultConvScratch bounds the transient scratch of one convolution call
// (im2col columns and their bf16 copy, or ConvTranspose2D's products): the
// full model's DPT head would otherwise take up to 896 MiB per call
// (output_conv2.0 at 518×378, BenchmarkConv2DBound).
const defaultConvScratch = 64 << 20

// convChunkCols is the granularity of a Conv2D chunk in output pixels: a
// GEMM narrower than ~128 columns leaves the tensor-core tiles half empty,
// and 128 fp32 columns keep every chunk's output offset 512-byte aligned.
// The smallest chunk is 128 columns even when that passes the bound (at most
// 128·C·kh·kw·6 bytes, ~7 MB for the widest layer, C=1024 at 3×3).
const convChunkCols = 128

// Conv2D: TF32 3×3 convolutions by an implicit GEMM where one suits them
// (conv3Implicit), the rest by im2col + GEMM, in chunks of output pixels so
// that the im2col scratch stays within defaultConvScratch.
func (g *gpu) Conv2D(x, w, b backend.Tensor, stride, pad int) backend.Tensor {
	return g.conv2D(x, w, b, stride, pad, defaultConvScratch)
}

// conv2D computes (unless an implicit GEMM does), per image and per chunk
// [p0, p0+np) of output pixels, col[ck, np] by im2col and out[o, p0:p0+np] =
// w[o, ck]·col[ck, np] straight into the NCHW output (ldc = Ho·Wo); the bias
// follows in one pass. A 1×1 convolution with stride 1 reads x directly.
// limit (bytes, ≤ 0 for the default) bounds the scratch.
func (g *gpu) conv2D(x, w, b backend.Tensor, stride, pad int, limit int64) backend.Tensor {
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
	if limit <= 0 {
		limit = defaultConvScratch
	}
	hw := ho * wo
	return g.output([]int{n, o, ho, wo}, "Conv2D", func(out *Tensor) error {
		if n == 0 || o == 0 {
			return nil
		}
		if hw > math.MaxInt32 || h*wd > math.MaxInt32 {
			return fmt.Errorf("convolution of a %dx%d image to %dx%d is too large for the 32-bit pixel indices of the kernels", h, wd, ho, wo)
		}
		wp, bf, err := g.weightOperand(wt)
		if err != nil {
			return err
		}
		prec := g.gemmPrec(bf, true)
		if prec == gemmTF32 && kh == 3 && kw == 3 && g.convVariant != convIm2col &&
			int64(c)*int64(h*wd) <= math.MaxInt32 && int64(c)*9 <= math.MaxInt32 {
			if done, err := g.conv3Implicit(out, xt, wt, bt, stride, pad, ho, wo); done || err != nil {
				return err
			}
		}
		// Reading x directly needs no im2col; in bf16 only while the bf16
		// copy of a whole image fits the bound.
		direct := kh == 1 && kw == 1 && stride == 1 && pad == 0 && (!bf || int64(c)*int64(hw)*2 <= limit)
		if direct {
			for img := 0; img < n; img++ {
				src := xt.ptr() + cu.DevicePtr(int64(img)*int64(c)*int64(hw)*4)
				dst := out.ptr() + cu.DevicePtr(int64(img)*int64(o)*int64(hw)*4)
				bp, tmp, err := g.operand(src, int64(c)*int64(hw), bf)
				if err != nil {
					return err
				}
				err = g.rowGemm(prec, false, false, o, hw, c, wp, c, bp, hw, dst, hw, 0)
				g.pool.put(tmp)
				if err != nil {
					return err
				}
			}
		} else if err := g.conv2DChunked(xt, wt, wp, bf, out, stride, pad, ho, wo, limit); err != nil {
			return err
		}
		if bt == nil {
			return nil
		}
		return g.biasPlanes(out.ptr(), bt.ptr(), n*o, o, hw)
	})
}

// conv3Implicit runs a TF32 3×3 convolution as an implicit GEMM, bias
// fused, when a kernel suits it: on Hopper the warpgroup kernel, elsewhere
// (or for channel counts that are not a multiple of 4) the mma.sync one.
// done is false when im2col + cuBLASLt should run it instead: where the
// grid would leave most of the GPU idle (the DPT head's coarse levels, whose
// K runs to 9216 and where cuBLASLt splits K).
func (g *gpu) conv3Implicit(out, xt, wt, bt *Tensor, stride, pad, ho, wo int) (done bool, err error) {
	n, c, h, wd := xt.shape[0], xt.shape[1], xt.shape[2], xt.shape[3]
	o, hw := wt.shape[0], ho*wo
	kind, t := g.conv3Kernel(c, o, hw, n)
	switch kind {
	case conv3None:
		return false, nil
	case conv3WGMMA, conv3WGWide:
		return true, g.conv3WG(out, xt, wt, bt, stride, pad, ho, wo, kind == conv3WGWide)
	}
	name := fmt.Sprintf("conv3_igemm_tf32_m%d_n%d", t.bm, t.bn)
	if err := g.allowSharedMemory("conv_igemm", name, t.smem()); err != nil {
		return true, err
	}
	grid := [3]int{(hw + t.bn - 1) / t.bn, (o + t.bm - 1) / t.bm, n}
	return true, g.launch("conv_igemm", name, grid, [3]int{256, 1, 1}, t.smem(),
		out.ptr(), xt.ptr(), wt.ptr(), ptrOf(bt), c, h, wd, o, stride, pad, ho, wo)
}

// The kernels conv3Kernel picks from.
const (
	conv3None   = iota // im2col + cuBLASLt
	conv3WGMMA         // conv3_wg_tf32
	conv3WGWide        // conv3_wg_tf32_w
	conv3MMA           // conv3_igemm_tf32_m*_n* with the tile
)

// conv3Kernel picks the kernel for c input and o output channels, hw output
// pixels per image and n images (see conv3Implicit and gpu.convVariant).
// The warpgroup kernel's blocks are 128 channels tall, so it takes only
// convolutions to more than 64 channels unless forced (at 32, the DPT
// head's output_conv2.0, the mma.sync kernel is faster), and it needs a
// quarter of the GPU's multiprocessors busy to beat im2col + cuBLASLt
// (cuda/NOTES.md: convolutions). With Config.ConvWide its 256-pixel form
// takes those where wideConv3 says so (always with the variant convWide).
func (g *gpu) conv3Kernel(c, o, hw, n int) (kind int, t conv3Tile) {
	v := g.convVariant
	forced := v == convImplicit || v == convWide
	if g.kernels.hopper() && c%4 == 0 && v != convMMA && (o > 64 || forced) {
		blocks := (hw + conv3WGPixels - 1) / conv3WGPixels * ((o + 127) / 128) * n
		if forced || 4*blocks >= g.info.sms {
			if v == convWide || (v == "" && g.cfg.ConvWide && wideConv3(o, hw, g.info.sms)) {
				return conv3WGWide, t
			}
			return conv3WGMMA, t
		}
	}
	t, ok := pickConv3Tile(o, hw, n, g.info.sms)
	if !ok && v != convImplicit && v != convMMA {
		return conv3None, t
	}
	// The 32×256 and 128×128 tiles need more shared memory than sm_86 and
	// sm_89 allow a block; 64×128 fits every GPU from sm_80.
	if lim := g.target.sharedLimit(g.info.maxSharedOptin); t.smem() > lim {
		if t = (conv3Tile{64, 128}); t.smem() > lim {
			return conv3None, t
		}
	}
	return conv3MMA, t
}

// conv3WG is conv3Implicit's Hopper kernel, with 256-pixel blocks when wide.
// It reads the weights tap-major (a copy made on first use and kept with
// them) and each image channels-last (a scratch copy of one image at a
// time, so that phase 1's eight frames do not need eight).
func (g *gpu) conv3WG(out, xt, wt, bt *Tensor, stride, pad, ho, wo int, wide bool) error {
	n, c, h, wd := xt.shape[0], xt.shape[1], xt.shape[2], xt.shape[3]
	o, hw := wt.shape[0], ho*wo
	taps, err := g.convTaps(wt)
	if err != nil {
		return err
	}
	name, smem, px := "conv3_wg_tf32", conv3WGSmem, conv3WGPixels
	if wide {
		name, smem, px = "conv3_wg_tf32_w", conv3WGWideSmem, conv3WGWideBlock
	}
	if err := g.allowSharedMemory("conv_igemm", name, smem); err != nil {
		return err
	}
	img := int64(c) * int64(h*wd)
	nhwc, err := g.scratch(img * 4)
	if err != nil {
		return err
	}
	defer g.pool.put(nhwc)
	grid := [3]int{(hw + px - 1) / px, (o + 127) / 128, 1}
	for i := 0; i < n; i++ {
		if err := g.transpose(nhwc.ptr, xt.ptr()+cu.DevicePtr(int64(i)*img*4), 1, c, h*wd); err != nil {
			return err
		}
		dst := out.ptr() + cu.DevicePtr(int64(i)*int64(o)*int64(hw)*4)
		if err := g.launch("conv_igemm", name, grid, [3]int{256, 1, 1}, smem,
			dst, nhwc.ptr, taps, ptrOf(bt), c, h, wd, o, stride, pad, ho, wo); err != nil {
			return err
		}
	}
	return nil
}

// convTaps returns the tap-major copy [9][o][c] of a 3×3 convolution weight
// [o][c][3][3], making it on first use (owner thread).
func (g *gpu) convTaps(wt *Tensor) (cu.DevicePtr, error) {
	if wt.buf.taps != nil {
		return wt.buf.taps.ptr, nil
	}
	if err := g.derive(wt.buf); err != nil {
		return 0, err
	}
	if err := g.restoreF32(wt); err != nil {
		return 0, err
	}
	oc := wt.shape[0] * wt.shape[1]
	b, err := g.pool.getAs(int64(oc)*9*4, catWeight)
	if err != nil {
		return 0, err
	}
	if err := g.transpose(b.ptr, wt.ptr(), 1, oc, 9); err != nil {
		g.pool.put(b)
		return 0, err
	}
	wt.buf.taps = b
	return b.ptr, nil
}

// conv2DChunked is conv2D's im2col path: one col scratch (and one bf16 copy
// of it when the weight is bf16) sized for a chunk, reused by every chunk of
// every image.
func (g *gpu) conv2DChunked(xt, wt *Tensor, wp cu.DevicePtr, bf bool, out *Tensor, stride, pad, ho, wo int, limit int64) error {
	n, c, h, wd := xt.shape[0], xt.shape[1], xt.shape[2], xt.shape[3]
	o, kh, kw := wt.shape[0], wt.shape[2], wt.shape[3]
	ck, hw := c*kh*kw, ho*wo
	perElem := int64(4)
	if bf {
		perElem += 2
	}
	cols := convChunk(ck, hw, perElem, limit)
	col, err := g.scratch(int64(ck) * int64(cols) * 4)
	if err != nil {
		return err
	}
	defer g.pool.put(col)
	bp := col.ptr
	if bf {
		colBF, err := g.scratch(int64(ck) * int64(cols) * 2)
		if err != nil {
			return err
		}
		defer g.pool.put(colBF)
		bp = colBF.ptr
	}
	prec := g.gemmPrec(bf, true)
	for img := 0; img < n; img++ {
		src := xt.ptr() + cu.DevicePtr(int64(img)*int64(c)*int64(h*wd)*4)
		dst := out.ptr() + cu.DevicePtr(int64(img)*int64(o)*int64(hw)*4)
		for p0 := 0; p0 < hw; p0 += cols {
			np := min(cols, hw-p0)
			elems := int64(ck) * int64(np)
			if err := g.im2col(col.ptr, src, c, h, wd, kh, kw, stride, pad, wo, p0, np); err != nil {
				return err
			}
			if bf {
				if err := g.toBF16(bp, col.ptr, elems); err != nil {
					return err
				}
			}
			if err := g.rowGemm(prec, false, false, o, np, ck, wp, ck, bp, np, dst+cu.DevicePtr(int64(p0)*4), hw, 0); err != nil {
				return err
			}
		}
	}
	return nil
}

// biasPlanes adds bias[p mod c] to every value of plane p of y [planes, hw]
// (owner thread).
func (g *gpu) biasPlanes(y, bias cu.DevicePtr, planes, c, hw int) error {
	if planes > math.MaxInt32 {
		return fmt.Errorf("%d channel planes are too many for the bias kernel's 32-bit plane index", planes)
	}
	const threads = 256
	grid := [3]int{(hw + threads - 1) / threads, min(planes, 65535), 1}
	return g.launch("elementwise", "bias_planes_f32", grid, [3]int{threads, 1, 1}, 0, y, bias, planes, c, hw)
}

// im2col fills col [(ci, ky, kx), j] for output pixels p0+j, j < np, of one
// image at src [c, h, w] (owner thread).
func (g *gpu) im2col(col, src cu.DevicePtr, c, h, w, kh, kw, stride, pad, wo, p0, np int) error {
	const threads = 256
	grid := [3]int{(np + threads - 1) / threads, min(c*kh*kw, 65535), 1}
	return g.launch("conv", "im2col_rows_f32", grid, [3]int{threads, 1, 1}, 0, col, src, c, h, w, kh, kw, stride, pad, wo, p0, np)
}

// convChunk is how many output pixels one im2col chunk holds: as many as
// fit limit at perElem bytes per (row, pixel), rounded down to a multiple of
// convChunkCols, at least convChunkCols, at most hw.
func convChunk(ck, hw int, perElem, limit int64) int {
	perCol := int64(ck) * perElem
	if perCol <= 0 || limit/perCol >= int64(hw) {
		return hw
	}
	cols := int(limit/perCol) / convChunkCols * convChunkCols
	return min(max(cols, convChunkCols), hw)
}

// ConvTranspose2D with kernel = stride and no padding: per image and per
// band of input rows, one GEMM prod[pixels, o·k·k] = xᵀ·w, then a scatter
// into the k×k output blocks (+ bias). The bands keep prod within
// defaultConvScratch.
func (g *gpu) ConvTranspose2D(x, w, b backend.Tensor, stride int) backend.Tensor {
	return g.convTranspose2D(x, w, b, stride, defaultConvScratch)
}

// convTranspose2D is ConvTranspose2D with the scratch bound limit (bytes,
// ≤ 0 for the default).
func (g *gpu) convTranspose2D(x, w, b backend.Tensor, stride int, limit int64) backend.Tensor {
	xt, wt, bt := g.tensor(x), g.tensor(w), g.tensor(b)
	if len(xt.shape) != 4 || len(wt.shape) != 4 || wt.shape[0] != xt.shape[1] || wt.shape[2] != stride || wt.shape[3] != stride || stride < 1 {
		panic(fmt.Sprintf("cuda: ConvTranspose2D x %v w %v stride %d", xt.shape, wt.shape, stride))
	}
	n, c, h, wd := xt.shape[0], xt.shape[1], xt.shape[2], xt.shape[3]
	o, k := wt.shape[1], stride
	if bt != nil && bt.numel() != o {
		panic(fmt.Sprintf("cuda: ConvTranspose2D bias %v for %d channels", bt.shape, o))
	}
	if limit <= 0 {
		limit = defaultConvScratch
	}
	okk, hw := o*k*k, h*wd
	return g.output([]int{n, o, h * k, wd * k}, "ConvTranspose2D", func(out *Tensor) error {
		if n == 0 || hw == 0 || o == 0 {
			return nil
		}
		if int64(hw)*int64(k*k) > math.MaxInt32 {
			return fmt.Errorf("transposed convolution of a %dx%d image by %d is too large for the 32-bit pixel indices of the kernels", h, wd, k)
		}
		wp, bf, err := g.weightOperand(wt)
		if err != nil {
			return err
		}
		rows := convTransposeRows(h, wd, okk, limit)
		prod, err := g.scratch(int64(rows) * int64(wd) * int64(okk) * 4)
		if err != nil {
			return err
		}
		defer g.pool.put(prod)
		elem := int64(4)
		if bf {
			elem = 2
		}
		prec := g.gemmPrec(bf, true)
		for img := 0; img < n; img++ {
			src := xt.ptr() + cu.DevicePtr(int64(img)*int64(c)*int64(hw)*4)
			// The bf16 copy is of the whole image: input-sized, not a blow-up.
			ap, tmp, err := g.operand(src, int64(c)*int64(hw), bf)
			if err != nil {
				return err
			}
			dst := out.ptr() + cu.DevicePtr(int64(img)*int64(o)*int64(hw)*int64(k*k)*4)
			for y0 := 0; y0 < h && err == nil; y0 += rows {
				nr := min(rows, h-y0)
				a := ap + cu.DevicePtr(int64(y0)*int64(wd)*elem)
				err = g.rowGemm(prec, true, false, nr*wd, okk, c, a, hw, wp, okk, prod.ptr, okk, 0)
				if err == nil {
					err = g.launch1D("conv", "convt_scatter_f32", int64(o)*int64(nr*k)*int64(wd*k), dst, prod.ptr, ptrOf(bt), o, h, wd, k, y0, nr)
				}
			}
			g.pool.put(tmp)
			if err != nil {
				return err
			}
		}
		return nil
	})
}

// convTransposeRows is how many input rows one band of ConvTranspose2D
// holds: as many as fit limit, rounded down to a multiple of the smallest
// band whose pixel count is a multiple of 8, so that every band's operand
// starts 16-byte aligned in fp32 and bf16 alike (at most 8 rows, even past
// the bound); at most h.
func convTransposeRows(h, wd, okk int, limit int64) int {
	rowBytes := int64(wd) * int64(okk) * 4
	if rowBytes <= 0 || limit/rowBytes >= int64(h) {
		return h
	}
	step := 8 / gcd(wd, 8)
	rows := int(limit/rowBytes) / step * step
	return min(max(rows, step), h)
}

func gcd(a, b int) int {
	for b != 0 {
		a, b = b, a%b
	}
	return a
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
		if planes > math.MaxInt32 || int64(outH)*int64(outW) > math.MaxInt32 || int64(h)*int64(w) > math.MaxInt32 {
			return fmt.Errorf("resizing %d planes of %dx%d to %dx%d is too large for the kernel's 32-bit indices", planes, h, w, outH, outW)
		}
		// A thread per output pixel finds its taps once; 1024 block rows of
		// planes are plenty to fill the GPU.
		const threads = 256
		grid := [3]int{(outH*outW + threads - 1) / threads, int(min(planes, 1024)), 1}
		return g.launch("conv", "resize_bilinear_rows_f32", grid, [3]int{threads, 1, 1}, 0, out.ptr(), xt.ptr(), int(planes), h, w, outH, outW, sy, sx, align)
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
