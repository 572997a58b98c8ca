// Package preprocess turns camera images into model input exactly as the
// reference does (lingbot_map/utils/load_fn.py, mode "crop"; reference-model.md
// §2): EXIF orientation, RGBA composited onto white, conversion to RGB, resize
// to the model width with Pillow's BICUBIC (height rounded to a multiple of the
// patch size), a centre crop of portrait images to a square, then /255 to
// float32 CHW. The resampler reproduces Pillow's fixed-point arithmetic, so the
// 8-bit result is the same as the reference's.
package preprocess

import (
	"errors"
	"fmt"
	"image"
	"image/color"
	"math"
)

// MaxPixels bounds the images this package accepts (about 8K×8K), so a corrupt
// or hostile header cannot make it allocate without limit.
const MaxPixels = 1 << 26

// RGB is an 8-bit RGB image, rows top to bottom, 3 bytes per pixel (HWC).
type RGB struct {
	Pix  []uint8
	W, H int
}

func (m RGB) check() error {
	if m.W < 1 || m.H < 1 {
		return fmt.Errorf("preprocess: empty image (%d×%d)", m.W, m.H)
	}
	if int64(m.W)*int64(m.H) > MaxPixels {
		return fmt.Errorf("preprocess: image of %d×%d exceeds %d pixels", m.W, m.H, MaxPixels)
	}
	if len(m.Pix) != 3*m.W*m.H {
		return fmt.Errorf("preprocess: %d×%d RGB image needs %d bytes, has %d", m.W, m.H, 3*m.W*m.H, len(m.Pix))
	}
	return nil
}

// ColorModel, Bounds and At make RGB an image.Image.
func (m RGB) ColorModel() color.Model { return color.RGBAModel }

// Bounds is the image rectangle at the origin.
func (m RGB) Bounds() image.Rectangle { return image.Rect(0, 0, m.W, m.H) }

// At returns the pixel at (x, y), or transparent black outside the image.
func (m RGB) At(x, y int) color.Color {
	if x < 0 || y < 0 || x >= m.W || y >= m.H || len(m.Pix) < 3*m.W*m.H {
		return color.RGBA{}
	}
	p := m.Pix[3*(y*m.W+x):]
	return color.RGBA{p[0], p[1], p[2], 255}
}

// overWhite is Pillow's Image.alpha_composite of a straight-alpha pixel over
// opaque white followed by convert("RGB") (libImaging/AlphaComposite.c, with
// its 7-bit fixed point and shift-based division by 255).
func overWhite(r, g, b, a uint8) (uint8, uint8, uint8) {
	if a == 0 {
		return 255, 255, 255
	}
	const pb = 7
	sa := uint32(a)
	blend := 255 * (255 - sa) // destination alpha is 255
	outa255 := sa*255 + blend
	coef1 := sa * 255 * 255 * (1 << pb) / outa255
	coef2 := 255*(1<<pb) - coef1
	mix := func(s uint8) uint8 {
		x := uint32(s)*coef1 + 255*coef2 + 0x80<<pb
		return uint8((((x >> 8) + x) >> 8) >> pb)
	}
	return mix(r), mix(g), mix(b)
}

// FromImage converts any image to RGB the way the reference's Pillow calls do:
// images with an alpha channel are composited onto white; palette images
// lose their transparency (Pillow's "P" → "RGB" ignores it); 16-bit colour
// samples keep their high byte while 16-bit grey clips at 255; YCbCr (JPEG) planes are upsampled and converted as
// libjpeg does (see ycbcr.go).
func FromImage(img image.Image) (RGB, error) {
	if img == nil {
		return RGB{}, errors.New("preprocess: no image")
	}
	b := img.Bounds()
	w, h := b.Dx(), b.Dy()
	if w < 1 || h < 1 {
		return RGB{}, fmt.Errorf("preprocess: empty image (%d×%d)", w, h)
	}
	if int64(w)*int64(h) > MaxPixels {
		return RGB{}, fmt.Errorf("preprocess: image of %d×%d exceeds %d pixels", w, h, MaxPixels)
	}
	out := RGB{W: w, H: h, Pix: make([]uint8, 3*w*h)}
	o := out.Pix
	switch m := img.(type) {
	case RGB:
		if err := m.check(); err != nil {
			return RGB{}, err
		}
		copy(o, m.Pix)
	case *RGB:
		if err := m.check(); err != nil {
			return RGB{}, err
		}
		copy(o, m.Pix)
	case *image.NRGBA:
		for y := range h {
			row := m.Pix[(y+b.Min.Y-m.Rect.Min.Y)*m.Stride+(b.Min.X-m.Rect.Min.X)*4:]
			for x := range w {
				p := row[4*x : 4*x+4]
				i := 3 * (y*w + x)
				o[i], o[i+1], o[i+2] = overWhite(p[0], p[1], p[2], p[3])
			}
		}
	case *image.RGBA:
		for y := range h {
			row := m.Pix[(y+b.Min.Y-m.Rect.Min.Y)*m.Stride+(b.Min.X-m.Rect.Min.X)*4:]
			for x := range w {
				p := row[4*x : 4*x+4]
				i := 3 * (y*w + x)
				if p[3] == 255 {
					o[i], o[i+1], o[i+2] = p[0], p[1], p[2]
					continue
				}
				c := color.NRGBAModel.Convert(color.RGBA{p[0], p[1], p[2], p[3]}).(color.NRGBA)
				o[i], o[i+1], o[i+2] = overWhite(c.R, c.G, c.B, c.A)
			}
		}
	case *image.Gray:
		for y := range h {
			row := m.Pix[(y+b.Min.Y-m.Rect.Min.Y)*m.Stride+(b.Min.X-m.Rect.Min.X):]
			for x := range w {
				i := 3 * (y*w + x)
				o[i], o[i+1], o[i+2] = row[x], row[x], row[x]
			}
		}
	case *image.Gray16:
		// Pillow opens 16-bit grey PNGs as 32-bit integer "I" images, and
		// "I" → "RGB" clips to 255 rather than scaling.
		for y := range h {
			for x := range w {
				v := min(m.Gray16At(x+b.Min.X, y+b.Min.Y).Y, 255)
				i := 3 * (y*w + x)
				o[i], o[i+1], o[i+2] = uint8(v), uint8(v), uint8(v)
			}
		}
	case *image.Paletted:
		pal := make([][3]uint8, len(m.Palette))
		for i, c := range m.Palette {
			// Go's PNG decoder gives tRNS entries as straight-alpha NRGBA, so the
			// colour of a fully transparent entry survives, as in Pillow.
			n, ok := c.(color.NRGBA)
			if !ok {
				n = color.NRGBAModel.Convert(c).(color.NRGBA)
			}
			pal[i] = [3]uint8{n.R, n.G, n.B}
		}
		for y := range h {
			for x := range w {
				i := 3 * (y*w + x)
				if ci := int(m.ColorIndexAt(x+b.Min.X, y+b.Min.Y)); ci < len(pal) {
					o[i], o[i+1], o[i+2] = pal[ci][0], pal[ci][1], pal[ci][2]
				}
			}
		}
	case *image.YCbCr:
		if ycbcrLibjpeg(m, o) {
			break
		}
		// Other layouts: chroma replicated (libjpeg's int_upsample does the same
		// for 4:1:1), colour converted as libjpeg does.
		for y := range h {
			for x := range w {
				c := m.YCbCrAt(x+b.Min.X, y+b.Min.Y)
				i := 3 * (y*w + x)
				o[i], o[i+1], o[i+2] = yccToRGB(c.Y, c.Cb, c.Cr)
			}
		}
	default:
		for y := range h {
			for x := range w {
				c := color.NRGBA64Model.Convert(img.At(x+b.Min.X, y+b.Min.Y)).(color.NRGBA64)
				i := 3 * (y*w + x)
				o[i], o[i+1], o[i+2] = overWhite(uint8(c.R>>8), uint8(c.G>>8), uint8(c.B>>8), uint8(c.A>>8))
			}
		}
	}
	return out, nil
}

// ResizeRGB resizes src to w×h with Pillow's BICUBIC filter. For a stream of
// frames, a Resizer reuses its tables and buffers instead.
func ResizeRGB(src RGB, w, h int) (RGB, error) {
	var r Resizer
	return r.Resize(src, w, h, nil)
}

// TargetSize is the reference's model resolution for a w×h image: width
// `width`, height round_half_even(h·width/w/patch)·patch before any crop.
func TargetSize(w, h, width, patch int) (int, int, error) {
	if w < 1 || h < 1 {
		return 0, 0, fmt.Errorf("preprocess: empty image (%d×%d)", w, h)
	}
	if width < 1 || patch < 1 {
		return 0, 0, fmt.Errorf("preprocess: model width %d and patch size %d must be positive", width, patch)
	}
	// Same float64 operations and order as Python's round(h * (width / w) / patch).
	n := math.RoundToEven(float64(h) * (float64(width) / float64(w)) / float64(patch))
	if n < 1 {
		return 0, 0, fmt.Errorf("preprocess: a %d×%d image is too wide: at width %d its height is under half a %d-pixel patch", w, h, width, patch)
	}
	if n*float64(patch)*float64(width) > MaxPixels {
		return 0, 0, fmt.Errorf("preprocess: a %d×%d image is too tall for width %d", w, h, width)
	}
	return width, int(n) * patch, nil
}

// Preprocessor runs Preprocess on a stream of frames, reusing the resampler's
// tables and buffers between frames of the same size. It is not safe for
// concurrent use.
type Preprocessor struct {
	// Width is the model input width (518 for the released model).
	Width int
	// Patch is the patch size the height is rounded to (14).
	Patch int
	// Workers is the number of goroutines the resize uses (0: GOMAXPROCS).
	Workers int

	rs      Resizer
	resized []uint8
	// crop is the rows of resized the last Run kept
	crop []uint8
}

// Run preprocesses one image into dst's storage (grown if too small):
// float32 CHW in [0, 1], w×h with w = Width and h ≤ Width.
func (p *Preprocessor) Run(img image.Image, dst []float32) (chw []float32, w, h int, err error) {
	src, ok := img.(RGB)
	if !ok {
		if src, err = FromImage(img); err != nil {
			return nil, 0, 0, err
		}
	}
	return p.RunRGB(src, dst)
}

// RunRGB is Run for an image that is already RGB (e.g. a decoded camera message).
func (p *Preprocessor) RunRGB(src RGB, dst []float32) (chw []float32, w, h int, err error) {
	if err := src.check(); err != nil {
		return nil, 0, 0, err
	}
	w, rh, err := TargetSize(src.W, src.H, p.Width, p.Patch)
	if err != nil {
		return nil, 0, 0, err
	}
	p.rs.Workers = p.Workers
	r, err := p.rs.Resize(src, w, rh, p.resized)
	if err != nil {
		return nil, 0, 0, err
	}
	p.resized = r.Pix
	// Portrait: keep the centre w rows, as the reference crops the tensor.
	h, y0 := rh, 0
	if rh > w {
		h, y0 = w, (rh-w)/2
	}
	n := w * h
	if cap(dst) < 3*n {
		dst = make([]float32, 3*n)
	}
	chw = dst[:3*n]
	pix := r.Pix[3*y0*w : 3*(y0+h)*w]
	p.crop = pix
	for i := range n {
		// float32 division by 255, as torchvision's ToTensor.
		chw[i] = float32(pix[3*i]) / 255
		chw[n+i] = float32(pix[3*i+1]) / 255
		chw[2*n+i] = float32(pix[3*i+2]) / 255
	}
	return chw, w, h, nil
}

// Colours are the last Run's pixels as 8-bit HWC RGB, equal to ToRGB8 of
// its output (every byte survives /255 and ·255 with rounding) without the
// round trip; a new slice, the caller's.
func (p *Preprocessor) Colours() []uint8 { return append([]uint8(nil), p.crop...) }

// Preprocess converts one image to the model input of the given width (518
// for the released model) and patch size (14): float32 CHW in [0, 1], w×h.
func Preprocess(img image.Image, width, patch int) (chw []float32, w, h int, err error) {
	p := Preprocessor{Width: width, Patch: patch}
	return p.Run(img, nil)
}

// ToRGB8 converts a float32 CHW image in [0, 1] (as Preprocess returns it) to
// 8-bit HWC RGB, for colouring points. A trailing partial plane is ignored.
func ToRGB8(chw []float32) []uint8 {
	n := len(chw) / 3
	out := make([]uint8, 3*n)
	for i := range n {
		for c := range 3 {
			out[3*i+c] = unit8(chw[c*n+i])
		}
	}
	return out
}

func unit8(v float32) uint8 {
	switch {
	case !(v > 0): // also NaN
		return 0
	case v >= 1:
		return 255
	}
	return uint8(math.Round(float64(v) * 255))
}
