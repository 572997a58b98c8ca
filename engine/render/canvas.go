// Package render draws the offline tools' pictures with the standard library:
// a top view of a trajectory over its map, the evaluation plot (both
// trajectories after alignment, coloured by error, and the error over time)
// and 16-bit PNG depth images with their colour previews.
package render

import (
	"image"
	"image/color"
	"image/draw"
	"math"

	"golang.org/x/image/font"
	"golang.org/x/image/font/basicfont"
	"golang.org/x/image/math/fixed"
)

// Colours of the drawings, as functions so that tests and legends agree with
// them without a mutable package variable.
func Background() color.RGBA      { return color.RGBA{255, 255, 255, 255} }
func TrajectoryColor() color.RGBA { return color.RGBA{220, 20, 60, 255} }   // the estimated path in a top view
func ReferenceColor() color.RGBA  { return color.RGBA{40, 40, 40, 255} }    // the reference path in an evaluation plot
func StartColor() color.RGBA      { return color.RGBA{0, 160, 0, 255} }     // first pose
func EndColor() color.RGBA        { return color.RGBA{30, 60, 220, 255} }   // last pose
func TextColor() color.RGBA       { return color.RGBA{0, 0, 0, 255} }       // labels
func GridColor() color.RGBA       { return color.RGBA{215, 215, 215, 255} } // frames and scale bars

// canvas is an RGBA image with the few primitives the plots need; every
// primitive clips to the image, so no input can draw out of bounds.
type canvas struct {
	img *image.RGBA
}

func newCanvas(w, h int) *canvas {
	c := &canvas{img: image.NewRGBA(image.Rect(0, 0, w, h))}
	draw.Draw(c.img, c.img.Bounds(), &image.Uniform{Background()}, image.Point{}, draw.Src)
	return c
}

func (c *canvas) set(x, y int, col color.RGBA) {
	if image.Pt(x, y).In(c.img.Rect) {
		c.img.SetRGBA(x, y, col)
	}
}

func (c *canvas) fillRect(r image.Rectangle, col color.RGBA) {
	draw.Draw(c.img, r.Intersect(c.img.Rect), &image.Uniform{col}, image.Point{}, draw.Src)
}

func (c *canvas) strokeRect(r image.Rectangle, col color.RGBA) {
	for x := r.Min.X; x < r.Max.X; x++ {
		c.set(x, r.Min.Y, col)
		c.set(x, r.Max.Y-1, col)
	}
	for y := r.Min.Y; y < r.Max.Y; y++ {
		c.set(r.Min.X, y, col)
		c.set(r.Max.X-1, y, col)
	}
}

// disc fills a circle of radius r around (x, y).
func (c *canvas) disc(x, y, r float64, col color.RGBA) {
	if !finite(x) || !finite(y) {
		return
	}
	x0, x1 := int(math.Floor(x-r)), int(math.Ceil(x+r))
	y0, y1 := int(math.Floor(y-r)), int(math.Ceil(y+r))
	b := c.img.Rect
	x0, y0 = max(x0, b.Min.X), max(y0, b.Min.Y)
	x1, y1 = min(x1, b.Max.X-1), min(y1, b.Max.Y-1)
	for py := y0; py <= y1; py++ {
		for px := x0; px <= x1; px++ {
			dx, dy := float64(px)+0.5-x, float64(py)+0.5-y
			if dx*dx+dy*dy <= r*r {
				c.img.SetRGBA(px, py, col)
			}
		}
	}
}

// line draws a segment of the given width by stamping discs along it.
func (c *canvas) line(x0, y0, x1, y1, width float64, col color.RGBA) {
	if !finite(x0) || !finite(y0) || !finite(x1) || !finite(y1) {
		return
	}
	// Clip the segment to a margin around the image so that a far-away point
	// cannot make the loop long.
	b := c.img.Rect
	ok, ax, ay, bx, by := clipSegment(x0, y0, x1, y1,
		float64(b.Min.X)-width, float64(b.Min.Y)-width, float64(b.Max.X)+width, float64(b.Max.Y)+width)
	if !ok {
		return
	}
	r := math.Max(width/2, 0.5)
	n := int(math.Ceil(math.Hypot(bx-ax, by-ay)/(r*0.5))) + 1
	for i := 0; i <= n; i++ {
		t := float64(i) / float64(n)
		c.disc(ax+(bx-ax)*t, ay+(by-ay)*t, r, col)
	}
}

// clipSegment is Liang–Barsky clipping of a segment to a rectangle.
func clipSegment(x0, y0, x1, y1, xmin, ymin, xmax, ymax float64) (bool, float64, float64, float64, float64) {
	t0, t1 := 0.0, 1.0
	dx, dy := x1-x0, y1-y0
	for _, e := range [4][2]float64{{-dx, x0 - xmin}, {dx, xmax - x0}, {-dy, y0 - ymin}, {dy, ymax - y0}} {
		p, q := e[0], e[1]
		if p == 0 {
			if q < 0 {
				return false, 0, 0, 0, 0
			}
			continue
		}
		r := q / p
		if p < 0 {
			t0 = math.Max(t0, r)
		} else {
			t1 = math.Min(t1, r)
		}
		if t0 > t1 {
			return false, 0, 0, 0, 0
		}
	}
	return true, x0 + t0*dx, y0 + t0*dy, x0 + t1*dx, y0 + t1*dy
}

// text writes s with its baseline at y, starting at x (basicfont, 7×13 px).
func (c *canvas) text(x, y int, s string, col color.RGBA) {
	d := font.Drawer{Dst: c.img, Src: &image.Uniform{col}, Face: basicfont.Face7x13, Dot: fixed.P(x, y)}
	d.DrawString(s)
}

// textWidth is the width of s in pixels.
func textWidth(s string) int {
	return font.MeasureString(basicfont.Face7x13, s).Round()
}

func finite(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }

// ErrorColor maps t in [0, 1] to a blue → cyan → green → yellow → red scale
// (low to high error). Values outside are clamped.
func ErrorColor(t float64) color.RGBA {
	if !(t > 0) {
		t = 0
	}
	t = math.Min(t, 1)
	stops := [...][3]float64{{40, 60, 220}, {0, 190, 220}, {40, 200, 60}, {240, 210, 0}, {220, 20, 20}}
	f := t * float64(len(stops)-1)
	i := min(int(f), len(stops)-2)
	u := f - float64(i)
	var out [3]uint8
	for k := range 3 {
		out[k] = uint8(math.Round(stops[i][k]*(1-u) + stops[i+1][k]*u))
	}
	return color.RGBA{out[0], out[1], out[2], 255}
}
