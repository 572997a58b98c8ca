package render

import (
	"fmt"
	"image"
	"image/color"
	"math"
	"slices"
)

// DepthRange is the depth span a colour preview spreads its colours over, in
// model depth units.
type DepthRange struct {
	Near, Far float64
}

// depthRamp runs from near (bright yellow) through green and blue to far
// (dark purple), evenly spaced: brightness falls with distance, so the
// preview reads even in greyscale.
func depthRamp() [5]color.RGBA {
	return [5]color.RGBA{
		{250, 230, 40, 255},
		{90, 200, 100, 255},
		{35, 140, 140, 255},
		{60, 80, 140, 255},
		{70, 10, 85, 255},
	}
}

// DepthColor is the preview colour of t ∈ [0, 1] (0 = near, 1 = far;
// clamped).
func DepthColor(t float64) color.RGBA {
	ramp := depthRamp()
	if !(t > 0) {
		return ramp[0]
	}
	if t >= 1 {
		return ramp[len(ramp)-1]
	}
	x := t * float64(len(ramp)-1)
	i := int(x)
	f := x - float64(i)
	a, b := ramp[i], ramp[i+1]
	mix := func(p, q uint8) uint8 { return uint8(math.Round(float64(p) + f*(float64(q)-float64(p)))) }
	return color.RGBA{mix(a.R, b.R), mix(a.G, b.G), mix(a.B, b.B), 255}
}

// depthLegendHeight is the strip under a preview: the colour ramp and the
// range's labels.
const depthLegendHeight = 24

// DepthPreview draws a depth map (width×height, row-major, model units) for
// people: 16-bit depth PNGs look black in image viewers, because depths of a
// few metres in millimetres use a few thousandths of the 0–65535 range. The
// colours span the frame's 2nd to 98th percentile of valid depths (so a few
// far pixels do not wash it out), near yellow to far purple; pixels without
// a finite positive depth are black. A strip below shows the ramp with the
// range, which is also returned.
func DepthPreview(depth []float32, width, height int) (*image.RGBA, DepthRange, error) {
	if width <= 0 || height <= 0 || len(depth) != width*height {
		return nil, DepthRange{}, fmt.Errorf("depth preview: %d values do not make a %d×%d image", len(depth), width, height)
	}
	valid := make([]float32, 0, len(depth))
	for _, d := range depth {
		if d > 0 && !math.IsInf(float64(d), 0) {
			valid = append(valid, d)
		}
	}
	var r DepthRange
	if len(valid) > 0 {
		slices.Sort(valid)
		r.Near = float64(valid[(len(valid)-1)*2/100])
		r.Far = float64(valid[(len(valid)-1)*98/100])
	}
	c := newCanvas(width, height+depthLegendHeight)
	span := r.Far - r.Near
	for v := range height {
		for u := range width {
			d := float64(depth[v*width+u])
			col := color.RGBA{0, 0, 0, 255}
			if d > 0 && !math.IsInf(d, 0) {
				t := 0.0
				if span > 0 {
					t = (d - r.Near) / span
				}
				col = DepthColor(t)
			}
			c.img.SetRGBA(u, v, col)
		}
	}
	for u := range width {
		col := DepthColor(float64(u) / float64(max(width-1, 1)))
		for v := height + 2; v < height+8; v++ {
			c.img.SetRGBA(u, v, col)
		}
	}
	near, far := fmt.Sprintf("near %.3g", r.Near), fmt.Sprintf("far %.3g", r.Far)
	c.text(2, height+21, near, TextColor())
	c.text(width-textWidth(far)-2, height+21, far, TextColor())
	return c.img, r, nil
}
