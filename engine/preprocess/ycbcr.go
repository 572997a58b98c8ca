package preprocess

import "image"

// Pillow decodes JPEGs with libjpeg(-turbo), whose defaults differ from Go's
// image.YCbCr.At in two ways that matter: chroma is upsampled with a triangle
// filter ("fancy upsampling", jdsample.c) instead of being replicated, and
// YCbCr → RGB uses libjpeg's 16-bit fixed-point tables (jdcolor.c). Doing both
// here on the planes Go's decoder produced brings a 4:2:0 JPEG from errors of
// up to ~30 levels to the ±few levels left by the two decoders' IDCTs.

const (
	yccScaleBits = 16
	yccHalf      = 1 << (yccScaleBits - 1)
)

func yccFix(x float64) int32 { return int32(x*(1<<yccScaleBits) + 0.5) }

// yccToRGB is libjpeg's ycc_rgb_convert for one pixel.
func yccToRGB(y, cb, cr uint8) (uint8, uint8, uint8) {
	xb, xr := int32(cb)-128, int32(cr)-128
	rOff := (yccFix(1.40200)*xr + yccHalf) >> yccScaleBits
	bOff := (yccFix(1.77200)*xb + yccHalf) >> yccScaleBits
	gOff := (-yccFix(0.34414)*xb + yccHalf - yccFix(0.71414)*xr) >> yccScaleBits
	yy := int32(y)
	return clamp255(yy + rOff), clamp255(yy + gOff), clamp255(yy + bOff)
}

func clamp255(v int32) uint8 {
	if v < 0 {
		return 0
	}
	if v > 255 {
		return 255
	}
	return uint8(v)
}

// ycbcrLibjpeg converts m into o (3 bytes per pixel) as libjpeg would have
// produced it from the same planes. It reports false for layouts it does not
// handle (subsampling other than 4:4:4, 4:2:2, 4:2:0, 4:4:0, or an image not
// anchored at the chroma grid's origin); the caller then falls back.
func ycbcrLibjpeg(m *image.YCbCr, o []uint8) bool {
	var hs, vs int
	switch m.SubsampleRatio {
	case image.YCbCrSubsampleRatio444:
		hs, vs = 1, 1
	case image.YCbCrSubsampleRatio422:
		hs, vs = 2, 1
	case image.YCbCrSubsampleRatio420:
		hs, vs = 2, 2
	case image.YCbCrSubsampleRatio440:
		hs, vs = 1, 2
	default:
		return false
	}
	if m.Rect.Min != (image.Point{}) {
		return false
	}
	w, h := m.Rect.Dx(), m.Rect.Dy()
	cw, ch := (w+hs-1)/hs, (h+vs-1)/vs
	if len(m.Y) < (h-1)*m.YStride+w || len(m.Cb) < (ch-1)*m.CStride+cw || len(m.Cr) < (ch-1)*m.CStride+cw {
		return false
	}
	cbRow := make([]uint8, cw*hs+2)
	crRow := make([]uint8, cw*hs+2)
	sums := make([]int32, cw+1)
	for y := range h {
		upsampleRow(cbRow, m.Cb, m.CStride, cw, ch, hs, vs, y, sums)
		upsampleRow(crRow, m.Cr, m.CStride, cw, ch, hs, vs, y, sums)
		yRow := m.Y[y*m.YStride : y*m.YStride+w]
		out := o[3*y*w : 3*(y+1)*w]
		for x, yv := range yRow {
			out[3*x], out[3*x+1], out[3*x+2] = yccToRGB(yv, cbRow[x], crRow[x])
		}
	}
	return true
}

// upsampleRow fills dst with the chroma of output row y (libjpeg's
// h2v1/h2v2/h1v2 fancy upsampling; rows beyond the image edge replicate it).
func upsampleRow(dst, plane []uint8, stride, cw, ch, hs, vs, y int, sums []int32) {
	row := func(r int) []uint8 {
		r = min(max(r, 0), ch-1)
		// One sample past cw when the buffer has it: libjpeg reads the decoded
		// padding there for components one sample wide.
		end := min(r*stride+cw+1, len(plane))
		return plane[r*stride : end]
	}
	if vs == 1 {
		in := row(y)
		if hs == 1 {
			copy(dst, in[:cw])
			return
		}
		h2v1(dst, in, cw)
		return
	}
	r, v := y/2, y%2
	near, far := row(r), row(r+1)
	if v == 0 {
		far = row(r - 1)
	}
	n := min(len(near), len(far))
	for c := range n {
		sums[c] = int32(near[c])*3 + int32(far[c])
	}
	if hs == 1 {
		bias := int32(1) + int32(v) // 1 for the upper output row, 2 for the lower
		for c := range cw {
			dst[c] = uint8((sums[c] + bias) >> 2)
		}
		return
	}
	sum := func(c int) int32 { return sums[min(c, n-1)] }
	this := sum(0)
	next := sum(1)
	dst[0] = uint8((this*4 + 8) >> 4)
	dst[1] = uint8((this*3 + next + 7) >> 4)
	last := this
	this = next
	for c := 1; c < cw-1; c++ {
		next = sum(c + 1)
		dst[2*c] = uint8((this*3 + last + 8) >> 4)
		dst[2*c+1] = uint8((this*3 + next + 7) >> 4)
		last, this = this, next
	}
	if cw > 1 {
		dst[2*cw-2] = uint8((this*3 + last + 8) >> 4)
		dst[2*cw-1] = uint8((this*4 + 7) >> 4)
	}
}

// h2v1 is libjpeg's h2v1_fancy_upsample of one row of cw samples.
func h2v1(dst, in []uint8, cw int) {
	at := func(c int) int32 { return int32(in[min(c, len(in)-1)]) }
	v := at(0)
	dst[0] = uint8(v)
	dst[1] = uint8((v*3 + at(1) + 2) >> 2)
	for c := 1; c < cw-1; c++ {
		v = at(c) * 3
		dst[2*c] = uint8((v + at(c-1) + 1) >> 2)
		dst[2*c+1] = uint8((v + at(c+1) + 2) >> 2)
	}
	if cw > 1 {
		v = at(cw - 1)
		dst[2*cw-2] = uint8((v*3 + at(cw-2) + 1) >> 2)
		dst[2*cw-1] = uint8(v)
	}
}
