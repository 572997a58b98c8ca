package source

import (
	"bytes"
	"context"
	"encoding/binary"
	"image"
	"image/color"
	"image/jpeg"
	"os"
	"path/filepath"
	"testing"
)

// exifSegment is an APP1 segment holding a little- or big-endian TIFF IFD0
// with one orientation entry.
func exifSegment(o int, bo binary.ByteOrder) []byte {
	tiff := make([]byte, 8+2+12+4)
	if bo == binary.LittleEndian {
		copy(tiff, "II")
	} else {
		copy(tiff, "MM")
	}
	bo.PutUint16(tiff[2:], 42)
	bo.PutUint32(tiff[4:], 8)
	bo.PutUint16(tiff[8:], 1)
	bo.PutUint16(tiff[10:], 0x0112)
	bo.PutUint16(tiff[12:], 3)
	bo.PutUint32(tiff[14:], 1)
	bo.PutUint16(tiff[18:], uint16(o))
	payload := append([]byte("Exif\x00\x00"), tiff...)
	seg := []byte{0xFF, 0xE1, 0, 0}
	binary.BigEndian.PutUint16(seg[2:], uint16(len(payload)+2))
	return append(seg, payload...)
}

// quadrantJPEG is 32×16 with red, green / blue, white quadrants and an EXIF
// orientation o (none when o is 0).
func quadrantJPEG(t *testing.T, o int, bo binary.ByteOrder) []byte {
	t.Helper()
	img := image.NewRGBA(image.Rect(0, 0, 32, 16))
	for y := range 16 {
		for x := range 32 {
			c := [2][2]color.RGBA{{{255, 0, 0, 255}, {0, 255, 0, 255}}, {{0, 0, 255, 255}, {255, 255, 255, 255}}}[y/8][x/16]
			img.SetRGBA(x, y, c)
		}
	}
	var buf bytes.Buffer
	if err := jpeg.Encode(&buf, img, &jpeg.Options{Quality: 95}); err != nil {
		t.Fatal(err)
	}
	b := buf.Bytes()
	if o == 0 {
		return b
	}
	return append(append(append([]byte{}, b[:2]...), exifSegment(o, bo)...), b[2:]...)
}

func near(c color.Color, want color.RGBA) bool {
	r, g, b, _ := c.RGBA()
	d := func(a uint32, w uint8) bool { x := int(a>>8) - int(w); return x < 40 && x > -40 }
	return d(r, want.R) && d(g, want.G) && d(b, want.B)
}

// The folder source turns JPEGs upright as PIL's exif_transpose does.
func TestFolderEXIFOrientation(t *testing.T) {
	R, G, B, W := color.RGBA{255, 0, 0, 255}, color.RGBA{0, 255, 0, 255}, color.RGBA{0, 0, 255, 255}, color.RGBA{255, 255, 255, 255}
	// Corners (top-left, top-right, bottom-left, bottom-right) after turning.
	want := map[int][4]color.RGBA{
		0: {R, G, B, W}, 1: {R, G, B, W},
		2: {G, R, W, B}, // mirrored left-right
		3: {W, B, G, R}, // rotated 180°
		4: {B, W, R, G}, // flipped top-bottom
		5: {R, B, G, W}, // transposed
		6: {B, R, W, G}, // rotated 90° clockwise
		7: {W, G, B, R}, // transverse
		8: {G, W, R, B}, // rotated 90° anticlockwise
	}
	for o := 0; o <= 8; o++ {
		for _, bo := range []binary.ByteOrder{binary.LittleEndian, binary.BigEndian} {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "a.jpg"), quadrantJPEG(t, o, bo), 0o644); err != nil {
				t.Fatal(err)
			}
			src, err := OpenFolder(dir, DefaultOptions())
			if err != nil {
				t.Fatal(err)
			}
			f, err := src.Next(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			w, h := 32, 16
			if o >= 5 {
				w, h = 16, 32
			}
			if f.Width != w || f.Height != h || f.Image.Bounds().Dx() != w {
				t.Fatalf("orientation %d: %d×%d, want %d×%d", o, f.Width, f.Height, w, h)
			}
			corners := [4]image.Point{{2, 2}, {w - 3, 2}, {2, h - 3}, {w - 3, h - 3}}
			for k, p := range corners {
				if !near(f.Image.At(p.X, p.Y), want[o][k]) {
					t.Errorf("orientation %d (%v): corner %d is %v, want %v", o, bo, k, f.Image.At(p.X, p.Y), want[o][k])
				}
			}
		}
	}
}
