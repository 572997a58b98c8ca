package preprocess

import (
	"bytes"
	"image"
	"image/color"
	"image/png"
	"testing"
)

// A 16-bit grey PNG decodes to Gray16; values above 255 are clipped by
// FromImage, and PrecisionLoss counts exactly those pixels.
func TestPrecisionLossGray16PNG(t *testing.T) {
	g := image.NewGray16(image.Rect(0, 0, 5, 3))
	for i := range 15 {
		g.SetGray16(i%5, i/5, color.Gray16{Y: uint16(i * 40)}) // 0…560: 8 values above 255
	}
	var buf bytes.Buffer
	if err := png.Encode(&buf, g); err != nil {
		t.Fatal(err)
	}
	img, err := Decode(&buf)
	if err != nil {
		t.Fatal(err)
	}
	loss, ok := PrecisionLoss(img)
	want := "16-bit grey image reduced to 8 bits: 8 of its 15 pixels are above 255 and were clipped to 255 (white), as the reference's conversion does"
	if !ok || loss != want {
		t.Errorf("PrecisionLoss = %q, %v\nwant %q", loss, ok, want)
	}
	rgb, err := FromImage(img)
	if err != nil {
		t.Fatal(err)
	}
	clipped := 0
	for i := 0; i < len(rgb.Pix); i += 3 {
		if rgb.Pix[i] == 255 {
			clipped++
		}
	}
	if clipped != 8 {
		t.Errorf("FromImage clipped %d pixels, PrecisionLoss said 8", clipped)
	}
	// A sub-image: only its own pixels count.
	if loss, ok := PrecisionLoss(g.SubImage(image.Rect(0, 0, 5, 1))); ok {
		t.Errorf("first row (0…160) reported: %q", loss)
	}

	// 16-bit grey whose values all fit loses nothing.
	small := image.NewGray16(image.Rect(0, 0, 4, 4))
	small.SetGray16(1, 1, color.Gray16{Y: 255})
	if loss, ok := PrecisionLoss(small); ok {
		t.Errorf("values ≤ 255 reported: %q", loss)
	}
}

func TestPrecisionLossColour(t *testing.T) {
	for _, img := range []interface {
		image.Image
		Set(x, y int, c color.Color)
	}{image.NewRGBA64(image.Rect(0, 0, 3, 2)), image.NewNRGBA64(image.Rect(0, 0, 3, 2))} {
		img.Set(0, 0, color.RGBA64{R: 0x1200, G: 0x3400, B: 0x5600, A: 0xffff}) // high bytes only
		if loss, ok := PrecisionLoss(img); ok {
			t.Errorf("%T: high bytes only reported: %q", img, loss)
		}
		img.Set(2, 1, color.RGBA64{R: 0x1201, G: 0, B: 0, A: 0xffff})
		img.Set(1, 0, color.RGBA64{R: 0, G: 0, B: 0x0080, A: 0xffff})
		loss, ok := PrecisionLoss(img)
		if want := "16-bit colour image reduced to 8 bits per sample: 2 of its 6 pixels lost their low bits"; !ok || loss != want {
			t.Errorf("%T: %q, want %q", img, loss, want)
		}
	}
	for _, img := range []image.Image{image.NewRGBA(image.Rect(0, 0, 2, 2)), image.NewGray(image.Rect(0, 0, 2, 2))} {
		if loss, ok := PrecisionLoss(img); ok {
			t.Errorf("%T: %q", img, loss)
		}
	}
}
