package render

import (
	"bytes"
	"image/color"
	"image/png"
	"math"
	"testing"
)

func TestDepthPreview(t *testing.T) {
	// 100×50: depth grows left to right from 0.5 to 3; a column of NaN and
	// one of zeros (no depth).
	const w, h = 100, 50
	depth := make([]float32, w*h)
	for v := range h {
		for u := range w {
			depth[v*w+u] = float32(0.5 + 2.5*float64(u)/(w-1))
		}
		depth[v*w+10] = float32(math.NaN())
		depth[v*w+20] = 0
	}
	img, r, err := DepthPreview(depth, w, h)
	if err != nil {
		t.Fatal(err)
	}
	if b := img.Bounds(); b.Dx() != w || b.Dy() != h+depthLegendHeight {
		t.Fatalf("preview %v", b)
	}
	// The 2nd and 98th percentiles of the 98 valid columns.
	if math.Abs(r.Near-0.525) > 0.03 || math.Abs(r.Far-2.95) > 0.03 {
		t.Errorf("range %+v", r)
	}
	black := color.RGBA{0, 0, 0, 255}
	for _, c := range []struct {
		u    int
		want color.RGBA
	}{{0, DepthColor(0)}, {w - 1, DepthColor(1)}, {10, black}, {20, black}} {
		if got := img.RGBAAt(c.u, h/2); got != c.want {
			t.Errorf("column %d: %v, want %v", c.u, got, c.want)
		}
	}
	// Colours darken monotonically with depth, so near and far differ plainly.
	lum := func(c color.RGBA) float64 { return 0.3*float64(c.R) + 0.59*float64(c.G) + 0.11*float64(c.B) }
	prev := math.Inf(1)
	for i := range 11 {
		l := lum(DepthColor(float64(i) / 10))
		if l >= prev {
			t.Errorf("luminance rises at t=%.1f", float64(i)/10)
		}
		prev = l
	}
	// The legend has text and the ramp.
	if img.RGBAAt(0, h+4) != DepthColor(0) || img.RGBAAt(w-1, h+4) != DepthColor(1) {
		t.Error("legend ramp missing")
	}
	text := 0
	for v := h + 8; v < h+depthLegendHeight; v++ {
		for u := range w {
			if img.RGBAAt(u, v) == TextColor() {
				text++
			}
		}
	}
	if text < 20 {
		t.Errorf("legend has %d text pixels", text)
	}
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		t.Fatal(err)
	}

	// No valid depth at all: black, range zero; a constant depth: one colour.
	_, r, err = DepthPreview(make([]float32, 6), 3, 2)
	if err != nil || r != (DepthRange{}) {
		t.Errorf("empty: %+v %v", r, err)
	}
	flat, r, _ := DepthPreview([]float32{2, 2, 2, 2}, 2, 2)
	if r != (DepthRange{2, 2}) || flat.RGBAAt(1, 1) != DepthColor(0) {
		t.Errorf("flat: %+v %v", r, flat.RGBAAt(1, 1))
	}
	if _, _, err := DepthPreview(make([]float32, 5), 3, 2); err == nil {
		t.Error("wrong size accepted")
	}
}
