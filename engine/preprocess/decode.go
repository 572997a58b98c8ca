package preprocess

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"image"
	"image/jpeg"
	"image/png"
	"io"
)

// maxFileBytes bounds what Decode reads (a very large camera frame is a few
// tens of MB as PNG).
const maxFileBytes = 1 << 28

var (
	pngMagic  = []byte("\x89PNG\r\n\x1a\n")
	jpegMagic = []byte{0xff, 0xd8}
)

// Decode reads a PNG or JPEG image and applies its EXIF orientation (JPEG
// APP1 or PNG eXIf) like Pillow's ImageOps.exif_transpose, which the reference
// does first. Only RGBA PNGs keep their transparency: the reference composites
// Pillow "RGBA" images onto white and ignores the transparency of grey+alpha,
// colour-keyed and palette PNGs, so those come back opaque (a palette image
// keeps its palette, whose alpha FromImage ignores).
func Decode(r io.Reader) (image.Image, error) {
	data, err := io.ReadAll(io.LimitReader(r, maxFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("preprocess: reading image: %w", err)
	}
	if len(data) > maxFileBytes {
		return nil, fmt.Errorf("preprocess: image file larger than %d bytes", maxFileBytes)
	}
	var (
		img    image.Image
		orient int
		keepA  = true
	)
	switch {
	case bytes.HasPrefix(data, pngMagic):
		if err := checkSize(png.DecodeConfig(bytes.NewReader(data))); err != nil {
			return nil, fmt.Errorf("preprocess: PNG: %w", err)
		}
		if img, err = png.Decode(bytes.NewReader(data)); err != nil {
			return nil, fmt.Errorf("preprocess: decoding PNG: %w", err)
		}
		// IHDR colour type is byte 25 of the file (8 magic + 8 chunk header + 9).
		keepA = len(data) > 25 && data[25] == 6
		orient = pngOrientation(data)
	case bytes.HasPrefix(data, jpegMagic):
		if err := checkSize(jpeg.DecodeConfig(bytes.NewReader(data))); err != nil {
			return nil, fmt.Errorf("preprocess: JPEG: %w", err)
		}
		if img, err = jpeg.Decode(bytes.NewReader(data)); err != nil {
			return nil, fmt.Errorf("preprocess: decoding JPEG: %w", err)
		}
		orient = jpegOrientation(data)
	default:
		return nil, errors.New("preprocess: unsupported image format (want PNG or JPEG)")
	}
	if !keepA {
		img = dropAlpha(img)
	}
	if orient >= 2 && orient <= 8 {
		if img, err = orientImage(img, orient); err != nil {
			return nil, fmt.Errorf("preprocess: applying EXIF orientation %d: %w", orient, err)
		}
	}
	return img, nil
}

// PrecisionLoss says what FromImage drops of a decoded image when it makes
// 8-bit RGB, and how much of the image that touches: a 16-bit grey image
// (Pillow's "I" mode) is clipped at 255, as the reference does, and 16-bit
// colour keeps the high byte of each sample. ok is false when nothing is
// lost: 8-bit images, and 16-bit ones whose values all survive. This
// package does not log; callers say it once per input.
func PrecisionLoss(img image.Image) (loss string, ok bool) {
	b := img.Bounds()
	n := b.Dx() * b.Dy()
	affected := 0
	switch m := img.(type) {
	case *image.Gray16:
		for y := b.Min.Y; y < b.Max.Y; y++ {
			row := m.Pix[m.PixOffset(b.Min.X, y):m.PixOffset(b.Max.X, y)]
			for x := 0; x+1 < len(row); x += 2 {
				if row[x] != 0 { // big-endian: a high byte above 0 means > 255
					affected++
				}
			}
		}
		if affected == 0 {
			return "", false
		}
		return fmt.Sprintf("16-bit grey image reduced to 8 bits: %d of its %d pixels are above 255 and were clipped to 255 (white), as the reference's conversion does", affected, n), true
	case *image.RGBA64:
		affected = lowBitsLost(m.Pix, m.Stride, m.PixOffset(b.Min.X, b.Min.Y), b.Dx(), b.Dy())
	case *image.NRGBA64:
		affected = lowBitsLost(m.Pix, m.Stride, m.PixOffset(b.Min.X, b.Min.Y), b.Dx(), b.Dy())
	default:
		return "", false
	}
	if affected == 0 {
		return "", false
	}
	return fmt.Sprintf("16-bit colour image reduced to 8 bits per sample: %d of its %d pixels lost their low bits", affected, n), true
}

// lowBitsLost counts the pixels of a 16-bit RGBA image (big-endian
// samples, 8 bytes a pixel) whose red, green or blue low byte is not zero.
func lowBitsLost(pix []uint8, stride, start, w, h int) int {
	n := 0
	for y := range h {
		row := pix[start+y*stride : start+y*stride+8*w]
		for x := 0; x < len(row); x += 8 {
			if row[x+1]|row[x+3]|row[x+5] != 0 {
				n++
			}
		}
	}
	return n
}

func checkSize(cfg image.Config, err error) error {
	if err != nil {
		return err
	}
	if cfg.Width < 1 || cfg.Height < 1 {
		return fmt.Errorf("empty image (%d×%d)", cfg.Width, cfg.Height)
	}
	if int64(cfg.Width)*int64(cfg.Height) > MaxPixels {
		return fmt.Errorf("image of %d×%d exceeds %d pixels", cfg.Width, cfg.Height, MaxPixels)
	}
	return nil
}

// dropAlpha makes the decoded forms that Go gives an alpha channel opaque.
// Palette images are handled by FromImage (their colours are used without alpha).
func dropAlpha(img image.Image) image.Image {
	switch m := img.(type) {
	case *image.NRGBA:
		for i := 3; i < len(m.Pix); i += 4 {
			m.Pix[i] = 0xff
		}
	case *image.NRGBA64:
		for i := 6; i+1 < len(m.Pix); i += 8 {
			m.Pix[i], m.Pix[i+1] = 0xff, 0xff
		}
	}
	return img
}

// orientImage applies EXIF orientation o (2…8) as exif_transpose does:
// 2 mirror, 3 rotate 180°, 4 flip, 5 transpose, 6 rotate 90° clockwise,
// 7 transverse, 8 rotate 90° counter-clockwise. Images with an alpha channel
// stay *image.NRGBA; others become RGB (compositing and dropping alpha are
// per pixel, so doing them before the transpose changes nothing).
func orientImage(img image.Image, o int) (image.Image, error) {
	if m, ok := img.(*image.NRGBA); ok {
		w, h := m.Rect.Dx(), m.Rect.Dy()
		pix := make([]uint8, 4*w*h)
		for y := range h {
			copy(pix[4*y*w:4*(y+1)*w], m.Pix[y*m.Stride:])
		}
		out, ow, oh := orientPix(pix, w, h, 4, o)
		return &image.NRGBA{Pix: out, Stride: 4 * ow, Rect: image.Rect(0, 0, ow, oh)}, nil
	}
	rgb, err := FromImage(img)
	if err != nil {
		return nil, err
	}
	out, ow, oh := orientPix(rgb.Pix, rgb.W, rgb.H, 3, o)
	return RGB{Pix: out, W: ow, H: oh}, nil
}

// Orient applies an EXIF orientation (1–8; 1 and out-of-range values change
// nothing) to an image, as Decode does for the orientation stored in the file.
// 6 turns the image 90° clockwise.
func Orient(img image.Image, o int) (image.Image, error) {
	if o < 2 || o > 8 {
		return img, nil
	}
	return orientImage(img, o)
}

// orientPix transposes/flips a packed w×h image of bpp bytes per pixel.
func orientPix(pix []uint8, w, h, bpp, o int) ([]uint8, int, int) {
	ow, oh := w, h
	if o >= 5 {
		ow, oh = h, w
	}
	out := make([]uint8, len(pix))
	for y := range oh {
		for x := range ow {
			var sx, sy int
			switch o {
			case 2:
				sx, sy = w-1-x, y
			case 3:
				sx, sy = w-1-x, h-1-y
			case 4:
				sx, sy = x, h-1-y
			case 5:
				sx, sy = y, x
			case 6:
				sx, sy = y, h-1-x
			case 7:
				sx, sy = w-1-y, h-1-x
			default: // 8
				sx, sy = w-1-y, x
			}
			d, s := bpp*(y*ow+x), bpp*(sy*w+sx)
			copy(out[d:d+bpp], pix[s:s+bpp])
		}
	}
	return out, ow, oh
}

// jpegOrientation finds the EXIF orientation in a JPEG's APP1 segment (1 when absent).
func jpegOrientation(data []byte) int {
	i := 2
	for i+4 <= len(data) {
		if data[i] != 0xff {
			return 1
		}
		marker := data[i+1]
		if marker == 0xff { // fill byte
			i++
			continue
		}
		if marker == 0xda || marker == 0xd9 { // start of scan / end of image: no more metadata
			return 1
		}
		n := int(binary.BigEndian.Uint16(data[i+2:]))
		if n < 2 || i+2+n > len(data) {
			return 1
		}
		seg := data[i+4 : i+2+n]
		if marker == 0xe1 && bytes.HasPrefix(seg, []byte("Exif\x00\x00")) {
			return tiffOrientation(seg[6:])
		}
		i += 2 + n
	}
	return 1
}

// pngOrientation finds the orientation in a PNG eXIf chunk (1 when absent).
func pngOrientation(data []byte) int {
	i := len(pngMagic)
	for i+8 <= len(data) {
		n := int(binary.BigEndian.Uint32(data[i:]))
		typ := string(data[i+4 : i+8])
		if n < 0 || n > len(data)-i-12 {
			return 1
		}
		if typ == "eXIf" {
			return tiffOrientation(data[i+8 : i+8+n])
		}
		if typ == "IEND" { // an eXIf after the image data counts too, as in Pillow
			return 1
		}
		i += 12 + n
	}
	return 1
}

// tiffOrientation reads tag 0x0112 of IFD0 of a TIFF-structured EXIF block.
func tiffOrientation(t []byte) int {
	if len(t) < 8 {
		return 1
	}
	var bo binary.ByteOrder
	switch string(t[:2]) {
	case "II":
		bo = binary.LittleEndian
	case "MM":
		bo = binary.BigEndian
	default:
		return 1
	}
	if bo.Uint16(t[2:]) != 42 {
		return 1
	}
	off := int64(bo.Uint32(t[4:]))
	if off < 8 || off+2 > int64(len(t)) {
		return 1
	}
	count := int64(bo.Uint16(t[off:]))
	for e := range count {
		p := off + 2 + 12*e
		if p+12 > int64(len(t)) {
			return 1
		}
		if bo.Uint16(t[p:]) != 0x0112 {
			continue
		}
		typ := bo.Uint16(t[p+2:])
		var v int
		switch typ {
		case 3: // SHORT
			v = int(bo.Uint16(t[p+8:]))
		case 4: // LONG
			v = int(bo.Uint32(t[p+8:]))
		default:
			return 1
		}
		if v < 1 || v > 8 {
			return 1
		}
		return v
	}
	return 1
}
