package render

import (
	"errors"
	"fmt"
	"image"
	"image/color"
	"math"
)

// EvalPlotOptions set up EvalPlot. Zero values take the defaults given.
type EvalPlotOptions struct {
	// Width and Height of the image. They default to 1024 × 960.
	Width, Height int
	// Axes of the top view. It defaults to AutoAxes over the reference.
	Axes *Axes
	// Title is written at the top (e.g. the ATE summary).
	Title string
}

// EvalPlot draws an evaluation: above, the reference path (ReferenceColor()) and
// the aligned estimate seen from above, each estimated segment coloured by its
// error on the ErrorColor scale with a colour bar; below, the error against
// time. ref, est, errs and times are pair by pair (same length).
func EvalPlot(ref, est [][3]float64, errs, times []float64, opt EvalPlotOptions) (*image.RGBA, error) {
	n := len(ref)
	if n == 0 || len(est) != n || len(errs) != n || len(times) != n {
		return nil, fmt.Errorf("render: evaluation plot needs as many estimated poses, errors and times as reference poses (%d, %d, %d, %d)", n, len(est), len(errs), len(times))
	}
	if opt.Width == 0 {
		opt.Width = 1024
	}
	if opt.Height == 0 {
		opt.Height = 960
	}
	if opt.Width < 320 || opt.Height < 320 || opt.Width > 16384 || opt.Height > 16384 {
		return nil, errors.New("render: evaluation plot size must be between 320 and 16384 pixels a side")
	}
	axes := AutoAxes(ref)
	if opt.Axes != nil {
		axes = *opt.Axes
	}
	if err := axes.valid(); err != nil {
		return nil, err
	}
	W, H := opt.Width, opt.Height
	c := newCanvas(W, H)
	c.text(8, 15, opt.Title, TextColor())

	emin, emax := math.Inf(1), math.Inf(-1)
	for _, e := range errs {
		if finite(e) {
			emin, emax = math.Min(emin, e), math.Max(emax, e)
		}
	}
	if emin > emax {
		emin, emax = 0, 0
	}
	norm := func(e float64) float64 {
		if !(emax > emin) {
			return 0
		}
		return (e - emin) / (emax - emin)
	}

	// Top view.
	split := int(float64(H) * 0.68)
	area := image.Rect(8, 40, W-110, split)
	c.strokeRect(area, GridColor())
	b := emptyBounds()
	vtmp := view{axes: axes}
	for i := range n {
		b.add(vtmp.hv(ref[i]))
		b.add(vtmp.hv(est[i]))
	}
	v := newView(axes, area.Inset(4), b)
	drawPath(c, v, ref, func(int) color.RGBA { return ReferenceColor() }, 1.5)
	drawPath(c, v, est, func(i int) color.RGBA {
		return ErrorColor(norm((errs[i-min(i, 1)] + errs[i]) / 2))
	}, 2.5)
	drawEnds(c, v, ref)
	c.scaleBar(v)
	c.text(area.Min.X+6, area.Min.Y+16, fmt.Sprintf("top view (%s right, %s up)", axisName(axes.H), axisName(axes.V)), TextColor())
	// Legend.
	lx, ly := area.Min.X+6, area.Min.Y+30
	c.line(float64(lx), float64(ly), float64(lx+24), float64(ly), 2, ReferenceColor())
	c.text(lx+30, ly+4, "reference", TextColor())
	c.line(float64(lx), float64(ly+16), float64(lx+12), float64(ly+16), 3, ErrorColor(0))
	c.line(float64(lx+12), float64(ly+16), float64(lx+24), float64(ly+16), 3, ErrorColor(1))
	c.text(lx+30, ly+20, "estimate (aligned), coloured by error", TextColor())

	// Colour bar.
	bar := image.Rect(W-90, area.Min.Y+20, W-70, area.Max.Y-20)
	for y := bar.Min.Y; y < bar.Max.Y; y++ {
		t := 1 - float64(y-bar.Min.Y)/float64(max(1, bar.Dy()-1))
		c.fillRect(image.Rect(bar.Min.X, y, bar.Max.X, y+1), ErrorColor(t))
	}
	c.strokeRect(bar.Inset(-1), TextColor())
	c.text(bar.Min.X-8, bar.Min.Y-6, fmtErr(emax), TextColor())
	c.text(bar.Min.X-8, bar.Max.Y+14, fmtErr(emin), TextColor())
	c.text(bar.Min.X-4, bar.Max.Y+28, "m", TextColor())

	// Error over time.
	plot := image.Rect(70, split+30, W-30, H-40)
	c.strokeRect(plot, GridColor())
	tmin, tmax := math.Inf(1), math.Inf(-1)
	for _, t := range times {
		if finite(t) {
			tmin, tmax = math.Min(tmin, t), math.Max(tmax, t)
		}
	}
	if !(tmax > tmin) {
		tmax = tmin + 1
	}
	ytop := emax
	if !(ytop > 0) {
		ytop = 1
	}
	px := func(t float64) float64 {
		return float64(plot.Min.X) + (t-tmin)/(tmax-tmin)*float64(plot.Dx()-1)
	}
	py := func(e float64) float64 {
		return float64(plot.Max.Y-1) - e/ytop*float64(plot.Dy()-1)
	}
	for k := 1; k < 4; k++ { // horizontal grid at quarters
		y := float64(plot.Max.Y-1) - float64(k)/4*float64(plot.Dy()-1)
		c.line(float64(plot.Min.X), y, float64(plot.Max.X-1), y, 1, GridColor())
	}
	for i := 1; i < n; i++ {
		c.line(px(times[i-1]), py(errs[i-1]), px(times[i]), py(errs[i]), 2, ErrorColor(norm((errs[i-1]+errs[i])/2)))
	}
	if n == 1 {
		c.disc(px(times[0]), py(errs[0]), 2, ErrorColor(0))
	}
	c.text(plot.Min.X, plot.Min.Y-8, "absolute trajectory error [m] over time [s]", TextColor())
	c.text(4, plot.Min.Y+10, fmtErr(ytop), TextColor())
	c.text(4, plot.Max.Y, "0", TextColor())
	c.text(plot.Min.X, plot.Max.Y+16, fmt.Sprintf("%.2f", tmin), TextColor())
	last := fmt.Sprintf("%.2f", tmax)
	c.text(plot.Max.X-textWidth(last), plot.Max.Y+16, last, TextColor())
	return c.img, nil
}

func fmtErr(e float64) string {
	return fmt.Sprintf("%.4g", e)
}
