package msgs

import (
	"bytes"
	"fmt"
	"image"
	"image/draw"
	"image/jpeg"
	"image/png"
	"strings"

	"github.com/bluenviron/goroslib/v2/pkg/msgs/sensor_msgs"
)

var (
	jpegMagic = []byte{0xFF, 0xD8, 0xFF}
	pngMagic  = []byte("\x89PNG\r\n\x1a\n")
)

// DecodeCompressed decodes a sensor_msgs/CompressedImage holding JPEG or PNG
// bytes. It accepts the format strings written by image_transport and
// cv_bridge: "jpeg", "jpg", "png", "rgb8; jpeg compressed bgr8",
// "bgr8; compressed png" and the like, and an empty format. The codec is
// chosen from the bytes themselves, because publishers are not always precise
// about the format string; the string must still name JPEG or PNG if it names
// anything. compressedDepth (a private header before a PNG) is refused.
func DecodeCompressed(m *sensor_msgs.CompressedImage) (*image.RGBA, error) {
	if m == nil {
		return nil, decodeErr(KindFormat, "compressed image message is nil")
	}
	f := strings.ToLower(m.Format)
	switch {
	case strings.Contains(f, "compresseddepth"):
		return nil, decodeErr(KindFormat, "compressed format %q (compressedDepth) is not supported; publish colour images", m.Format)
	case f != "" && !strings.Contains(f, "jpeg") && !strings.Contains(f, "jpg") && !strings.Contains(f, "png"):
		return nil, decodeErr(KindFormat, "compressed format %q names neither jpeg nor png", m.Format)
	}

	var decode func([]byte) (image.Image, error)
	var config func([]byte) (image.Config, error)
	switch {
	case bytes.HasPrefix(m.Data, jpegMagic):
		decode = func(b []byte) (image.Image, error) { return jpeg.Decode(bytes.NewReader(b)) }
		config = func(b []byte) (image.Config, error) { return jpeg.DecodeConfig(bytes.NewReader(b)) }
	case bytes.HasPrefix(m.Data, pngMagic):
		decode = func(b []byte) (image.Image, error) { return png.Decode(bytes.NewReader(b)) }
		config = func(b []byte) (image.Config, error) { return png.DecodeConfig(bytes.NewReader(b)) }
	default:
		n := min(len(m.Data), 8)
		return nil, decodeErr(KindCorrupt, "data (%d bytes, starting % x) is neither a JPEG nor a PNG", len(m.Data), m.Data[:n])
	}

	// Read the size first so a forged header cannot make the decoder allocate
	// an enormous image.
	cfg, err := config(m.Data)
	if err != nil {
		return nil, &DecodeError{Kind: KindCorrupt, Err: fmt.Errorf("reading the image header: %w", err)}
	}
	if cfg.Width <= 0 || cfg.Height <= 0 || uint64(cfg.Width)*uint64(cfg.Height) > MaxPixels {
		return nil, decodeErr(KindSize, "compressed image is %dx%d; want positive sizes and at most %d pixels", cfg.Width, cfg.Height, MaxPixels)
	}
	src, err := decode(m.Data)
	if err != nil {
		return nil, &DecodeError{Kind: KindCorrupt, Err: fmt.Errorf("decoding the image: %w", err)}
	}
	if rgba, ok := src.(*image.RGBA); ok && rgba.Rect.Min == (image.Point{}) {
		return rgba, nil
	}
	b := src.Bounds()
	dst := image.NewRGBA(image.Rect(0, 0, b.Dx(), b.Dy()))
	draw.Draw(dst, dst.Rect, src, b.Min, draw.Src)
	return dst, nil
}
