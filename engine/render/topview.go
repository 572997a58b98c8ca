package render

import (
	"errors"
	"fmt"
	"image"
	"image/color"
	"math"
	"slices"

	"github.com/lingbotmap/lingbotmap/engine/mapio"
)

// Axes picks the world axes of a top view: H runs left to right, V bottom to
// top (0 = x, 1 = y, 2 = z); Depth is the remaining axis, used to draw the
// points nearest the viewer last. Flip reverses V.
type Axes struct {
	H, V  int
	FlipV bool
}

// CameraTopDown is the view from above for maps in the first camera's OpenCV
// frame (x right, y down, z forward): x to the right, z (forward) up.
func CameraTopDown() Axes { return Axes{H: 0, V: 2} }

// AutoAxes picks the two axes along which the points spread the most, the
// wider one horizontal; it suits reference frames of unknown orientation.
func AutoAxes(pts [][3]float64) Axes {
	var ext [3]float64
	for k := range 3 {
		lo, hi := math.Inf(1), math.Inf(-1)
		for _, p := range pts {
			if finite(p[k]) {
				lo, hi = math.Min(lo, p[k]), math.Max(hi, p[k])
			}
		}
		if hi > lo {
			ext[k] = hi - lo
		}
	}
	order := []int{0, 1, 2}
	slices.SortStableFunc(order, func(a, b int) int {
		switch {
		case ext[a] > ext[b]:
			return -1
		case ext[a] < ext[b]:
			return 1
		}
		return 0
	})
	h, v := order[0], order[1]
	// Keep the pair right-handed as seen from the third axis's positive side.
	if (h+1)%3 != v {
		return Axes{H: h, V: v, FlipV: true}
	}
	return Axes{H: h, V: v}
}

func (a Axes) valid() error {
	if a.H < 0 || a.H > 2 || a.V < 0 || a.V > 2 || a.H == a.V {
		return fmt.Errorf("render: axes must be two different axes among 0, 1, 2, not %d and %d", a.H, a.V)
	}
	return nil
}

func (a Axes) depth() int { return 3 - a.H - a.V }

func axisName(i int) string { return [...]string{"x", "y", "z"}[i] }

// view maps world coordinates onto a pixel rectangle with equal scale on
// both axes.
type view struct {
	axes       Axes
	rect       image.Rectangle
	scale      float64 // pixels per metre
	cx, cy     float64 // world centre (H, V)
	pcx, pcy   float64 // pixel centre
	minH, maxH float64
	minV, maxV float64
}

// bounds grows a box over the H and V coordinates.
type bounds struct{ minH, maxH, minV, maxV float64 }

func emptyBounds() bounds {
	return bounds{math.Inf(1), math.Inf(-1), math.Inf(1), math.Inf(-1)}
}

func (b *bounds) add(h, v float64) {
	if !finite(h) || !finite(v) {
		return
	}
	b.minH, b.maxH = math.Min(b.minH, h), math.Max(b.maxH, h)
	b.minV, b.maxV = math.Min(b.minV, v), math.Max(b.maxV, v)
}

func (b bounds) empty() bool { return !(b.maxH >= b.minH) }

func newView(axes Axes, rect image.Rectangle, b bounds) view {
	if b.empty() {
		b = bounds{-1, 1, -1, 1}
	}
	// A path along one line (or a single point) still gets a visible extent.
	span := math.Max(b.maxH-b.minH, b.maxV-b.minV)
	if !(span > 1e-9) {
		span = 1
	}
	pad := 0.05 * span
	b.minH, b.maxH, b.minV, b.maxV = b.minH-pad, b.maxH+pad, b.minV-pad, b.maxV+pad
	sx := float64(rect.Dx()) / (b.maxH - b.minH)
	sy := float64(rect.Dy()) / (b.maxV - b.minV)
	return view{
		axes:  axes,
		rect:  rect,
		scale: math.Min(sx, sy),
		cx:    (b.minH + b.maxH) / 2, cy: (b.minV + b.maxV) / 2,
		pcx: float64(rect.Min.X+rect.Max.X) / 2, pcy: float64(rect.Min.Y+rect.Max.Y) / 2,
		minH: b.minH, maxH: b.maxH, minV: b.minV, maxV: b.maxV,
	}
}

// pixel is the image position of a world point.
func (v view) pixel(p [3]float64) (float64, float64) {
	h, vv := p[v.axes.H], p[v.axes.V]
	if v.axes.FlipV {
		vv = -vv
	}
	return v.pcx + (h-v.cx)*v.scale, v.pcy - (vv-v.cy)*v.scale
}

func (v view) hv(p [3]float64) (float64, float64) {
	if v.axes.FlipV {
		return p[v.axes.H], -p[v.axes.V]
	}
	return p[v.axes.H], p[v.axes.V]
}

// scaleBar draws a bar of a round length near the bottom-left corner.
func (c *canvas) scaleBar(v view) {
	target := float64(v.rect.Dx()) / 5 / v.scale // metres for a fifth of the width
	if !(target > 0) || math.IsInf(target, 0) {
		return
	}
	p := math.Pow(10, math.Floor(math.Log10(target)))
	m := p
	for _, f := range []float64{1, 2, 5} {
		if f*p <= target {
			m = f * p
		}
	}
	px := m * v.scale
	x0, y0 := float64(v.rect.Min.X+12), float64(v.rect.Max.Y-14)
	c.line(x0, y0, x0+px, y0, 2, TextColor())
	c.line(x0, y0-4, x0, y0+4, 1, TextColor())
	c.line(x0+px, y0-4, x0+px, y0+4, 1, TextColor())
	c.text(int(x0), int(y0)-6, fmt.Sprintf("%g m", m), TextColor())
}

// TopViewOptions set up TopView. Zero values take the defaults given.
type TopViewOptions struct {
	// Width and Height of the image in pixels. They default to 1024 × 768.
	Width, Height int
	// Axes of the view. It defaults to CameraTopDown().
	Axes *Axes
	// Title is written at the top left.
	Title string
	// MaxPoints caps the map points drawn (evenly subsampled). It defaults to 2,000,000.
	MaxPoints int
}

// robustRange is the [2%, 98%] range of xs, so that a few stray map points do
// not shrink the drawing.
func robustRange(xs []float64) (float64, float64) {
	if len(xs) == 0 {
		return math.NaN(), math.NaN()
	}
	slices.Sort(xs)
	lo := xs[int(0.02*float64(len(xs)-1))]
	hi := xs[int(math.Ceil(0.98*float64(len(xs)-1)))]
	return lo, hi
}

// TopView draws map points in their colours, seen from above, and the
// trajectory over them: a line in TrajectoryColor() from a StartColor() disc to an
// EndColor() disc. The view frames the whole trajectory and the bulk of the points.
func TopView(traj [][3]float64, pts []mapio.Point, opt TopViewOptions) (*image.RGBA, error) {
	if opt.Width == 0 {
		opt.Width = 1024
	}
	if opt.Height == 0 {
		opt.Height = 768
	}
	if opt.MaxPoints == 0 {
		opt.MaxPoints = 2_000_000
	}
	axes := CameraTopDown()
	if opt.Axes != nil {
		axes = *opt.Axes
	}
	if err := axes.valid(); err != nil {
		return nil, err
	}
	if opt.Width < 64 || opt.Height < 64 || opt.Width > 16384 || opt.Height > 16384 {
		return nil, errors.New("render: image size must be between 64 and 16384 pixels a side")
	}
	c := newCanvas(opt.Width, opt.Height)
	area := image.Rect(0, 20, opt.Width, opt.Height)

	step := max(1, (len(pts)+opt.MaxPoints-1)/opt.MaxPoints)
	sel := make([]mapio.Point, 0, len(pts)/step+1)
	for i := 0; i < len(pts); i += step {
		p := pts[i]
		if finite(float64(p.X)) && finite(float64(p.Y)) && finite(float64(p.Z)) {
			sel = append(sel, p)
		}
	}
	v := newView(axes, area, frameBounds(axes, traj, sel))
	// Points further from the viewer first; "above" is −y in camera frames
	// and +third axis otherwise.
	d := axes.depth()
	sign := 1.0
	if axes == CameraTopDown() {
		sign = -1
	}
	slices.SortFunc(sel, func(a, b mapio.Point) int {
		da, db := sign*float64(coord(a, d)), sign*float64(coord(b, d))
		switch {
		case da < db:
			return -1
		case da > db:
			return 1
		}
		return 0
	})
	for _, p := range sel {
		x, y := v.pixel([3]float64{float64(p.X), float64(p.Y), float64(p.Z)})
		if x >= float64(area.Min.X) && y >= float64(area.Min.Y) && x < float64(area.Max.X) && y < float64(area.Max.Y) {
			col := colorOf(p)
			c.set(int(x), int(y), col)
		}
	}
	drawPath(c, v, traj, func(int) color.RGBA { return TrajectoryColor() }, 2.5)
	drawEnds(c, v, traj)
	c.scaleBar(v)
	title := opt.Title
	if title == "" {
		title = fmt.Sprintf("top view: %s right, %s up; %d poses, %d points", axisName(axes.H), axisName(axes.V), len(traj), len(pts))
	}
	c.text(6, 14, title, TextColor())
	return c.img, nil
}

func coord(p mapio.Point, k int) float32 {
	switch k {
	case 0:
		return p.X
	case 1:
		return p.Y
	}
	return p.Z
}

// frameBounds covers every trajectory position and the robust range of the points.
func frameBounds(axes Axes, traj [][3]float64, pts []mapio.Point) bounds {
	v := view{axes: axes}
	b := emptyBounds()
	for _, p := range traj {
		b.add(v.hv(p))
	}
	if len(pts) > 0 {
		hs := make([]float64, len(pts))
		vs := make([]float64, len(pts))
		for i, p := range pts {
			hs[i], vs[i] = v.hv([3]float64{float64(p.X), float64(p.Y), float64(p.Z)})
		}
		h0, h1 := robustRange(hs)
		v0, v1 := robustRange(vs)
		b.add(h0, v0)
		b.add(h1, v1)
	}
	return b
}

func colorOf(p mapio.Point) color.RGBA { return color.RGBA{p.R, p.G, p.B, 255} }

// drawPath draws consecutive positions joined by lines, segment i coloured by col(i).
func drawPath(c *canvas, v view, traj [][3]float64, col func(int) color.RGBA, width float64) {
	for i := 1; i < len(traj); i++ {
		x0, y0 := v.pixel(traj[i-1])
		x1, y1 := v.pixel(traj[i])
		c.line(x0, y0, x1, y1, width, col(i))
	}
	if len(traj) == 1 {
		x, y := v.pixel(traj[0])
		c.disc(x, y, width, col(0))
	}
}

func drawEnds(c *canvas, v view, traj [][3]float64) {
	if len(traj) == 0 {
		return
	}
	x, y := v.pixel(traj[0])
	c.disc(x, y, 5, StartColor())
	x, y = v.pixel(traj[len(traj)-1])
	c.disc(x, y, 5, EndColor())
}
