package msgs

import (
	"bytes"
	"errors"
	"image"
	"image/color"
	"image/jpeg"
	"image/png"
	"os"
	"testing"

	"github.com/bluenviron/goroslib/v2/pkg/msgs/sensor_msgs"
	"github.com/lingbotmap/lingbotmap/internal/shared"
)

func patternNRGBA(w, h int) *image.NRGBA {
	img := image.NewNRGBA(image.Rect(0, 0, w, h))
	for y := range h {
		for x := range w {
			r, g, b, _ := testPixel(x, y)
			img.SetNRGBA(x, y, color.NRGBA{r, g, b, 255})
		}
	}
	return img
}

func encodePNG(t *testing.T, img image.Image) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestDecodeCompressedPNGExact(t *testing.T) {
	src := patternNRGBA(9, 6)
	data := encodePNG(t, src)
	for _, format := range []string{"png", "PNG", "rgb8; compressed png", "bgr8; compressed png", ""} {
		img, err := DecodeCompressed(&sensor_msgs.CompressedImage{Format: format, Data: data})
		if err != nil {
			t.Fatalf("format %q: %v", format, err)
		}
		if img.Rect != src.Rect {
			t.Fatalf("format %q: bounds %v, want %v", format, img.Rect, src.Rect)
		}
		if !bytes.Equal(img.Pix, src.Pix) {
			t.Fatalf("format %q: pixels differ from the encoded image", format)
		}
	}

	// Grayscale and 16-bit PNGs come back as RGB with equal channels / high bytes.
	gray := image.NewGray16(image.Rect(0, 0, 3, 2))
	for i := range 6 {
		gray.SetGray16(i%3, i/3, color.Gray16{Y: uint16(i*40)<<8 | 0x77})
	}
	img, err := DecodeCompressed(&sensor_msgs.CompressedImage{Format: "mono16; png compressed", Data: encodePNG(t, gray)})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 6 {
		o := img.PixOffset(i%3, i/3)
		want := uint8(i * 40)
		if got := img.Pix[o : o+4]; got[0] != want || got[1] != want || got[2] != want || got[3] != 255 {
			t.Errorf("gray pixel %d = %v, want %d", i, got, want)
		}
	}
}

func TestDecodeCompressedJPEG(t *testing.T) {
	// A flat colour survives JPEG nearly unchanged, so small tolerances apply.
	src := image.NewNRGBA(image.Rect(0, 0, 32, 16))
	for i := 0; i < len(src.Pix); i += 4 {
		copy(src.Pix[i:], []byte{200, 40, 90, 255})
	}
	var buf bytes.Buffer
	if err := jpeg.Encode(&buf, src, &jpeg.Options{Quality: 100}); err != nil {
		t.Fatal(err)
	}
	for _, format := range []string{"jpeg", "jpg", "rgb8; jpeg compressed bgr8", "bgr8; jpeg compressed bgr8"} {
		img, err := DecodeCompressed(&sensor_msgs.CompressedImage{Format: format, Data: buf.Bytes()})
		if err != nil {
			t.Fatalf("format %q: %v", format, err)
		}
		if img.Rect != src.Rect {
			t.Fatalf("bounds %v", img.Rect)
		}
		for i := 0; i < len(img.Pix); i += 4 {
			for c, want := range []int{200, 40, 90, 255} {
				if d := int(img.Pix[i+c]) - want; d < -3 || d > 3 {
					t.Fatalf("format %q: byte %d = %d, want %d±3", format, i+c, img.Pix[i+c], want)
				}
			}
		}
	}
}

// A real camera frame decodes to exactly what the standard library decoder gives.
func TestDecodeCompressedRealFrame(t *testing.T) {
	path, err := shared.Path("data", "courthouse", "000003.png")
	if err != nil {
		t.Fatalf("locating the shared test data: %v", err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("reading the shared test frame: %v", err)
	}
	want, err := png.Decode(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	img, err := DecodeCompressed(&sensor_msgs.CompressedImage{Format: "png", Data: data})
	if err != nil {
		t.Fatal(err)
	}
	if img.Rect.Dx() != 518 || img.Rect.Dy() != 294 {
		t.Fatalf("size %v, want 518x294", img.Rect)
	}
	for _, p := range []image.Point{{0, 0}, {517, 293}, {100, 200}, {259, 147}} {
		r, g, b, a := want.At(p.X, p.Y).RGBA()
		o := img.PixOffset(p.X, p.Y)
		got := img.Pix[o : o+4]
		if got[0] != uint8(r>>8) || got[1] != uint8(g>>8) || got[2] != uint8(b>>8) || got[3] != uint8(a>>8) {
			t.Errorf("pixel %v = %v, want %v", p, got, []uint32{r >> 8, g >> 8, b >> 8, a >> 8})
		}
	}
}

func TestDecodeCompressedErrors(t *testing.T) {
	valid := encodePNG(t, patternNRGBA(8, 8))
	var jb bytes.Buffer
	if err := jpeg.Encode(&jb, patternNRGBA(64, 64), nil); err != nil {
		t.Fatal(err)
	}
	corruptPNG := append([]byte{}, valid...)
	corruptPNG[len(corruptPNG)/2] ^= 0xFF // breaks the IDAT CRC
	cases := []struct {
		name, format string
		data         []byte
		kind         string
	}{
		{"tiff format", "tiff", valid, KindFormat},
		{"compressedDepth", "16UC1; compressedDepth png", valid, KindFormat},
		{"empty data", "jpeg", nil, KindCorrupt},
		{"random bytes", "jpeg", []byte("not an image at all"), KindCorrupt},
		{"truncated jpeg", "jpeg", jb.Bytes()[:len(jb.Bytes())/3], KindCorrupt},
		{"jpeg header only", "jpeg", jb.Bytes()[:4], KindCorrupt},
		{"corrupt png", "png", corruptPNG, KindCorrupt},
		{"truncated png", "png", valid[:40], KindCorrupt},
	}
	for _, c := range cases {
		_, err := DecodeCompressed(&sensor_msgs.CompressedImage{Format: c.format, Data: c.data})
		var de *DecodeError
		if !errors.As(err, &de) {
			t.Fatalf("%s: got %v, want a *DecodeError", c.name, err)
		}
		if de.Kind != c.kind {
			t.Errorf("%s: kind %q (%v), want %q", c.name, de.Kind, err, c.kind)
		}
	}
}
