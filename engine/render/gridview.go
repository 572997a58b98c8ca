package render

import (
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/draw"

	"github.com/lingbotmap/lingbotmap/engine/occgrid"
)

// Cell colours of a grid view, the shades map_server's PGM uses.
func OccupiedColor() color.RGBA { return color.RGBA{0, 0, 0, 255} }
func FreeColor() color.RGBA     { return color.RGBA{254, 254, 254, 255} }
func UnknownColor() color.RGBA  { return color.RGBA{205, 205, 205, 255} }

// GridViewOptions sizes a grid view; zero values take TopView's defaults.
type GridViewOptions struct {
	Width, Height int
	Title         string
}

// GridView draws an occupancy grid seen from above (x right, y up) with the
// trajectory (map-frame positions) over it, framed on the whole grid.
func GridView(g *occgrid.Grid, traj [][3]float64, opt GridViewOptions) (*image.RGBA, error) {
	if opt.Width == 0 {
		opt.Width = 1024
	}
	if opt.Height == 0 {
		opt.Height = 768
	}
	if opt.Width < 64 || opt.Height < 64 || opt.Width > 16384 || opt.Height > 16384 {
		return nil, errors.New("render: image size must be between 64 and 16384 pixels a side")
	}
	if g == nil || g.Width < 1 || g.Height < 1 || len(g.Data) != g.Width*g.Height || !(g.Resolution > 0) {
		return nil, errors.New("render: an empty or malformed grid")
	}
	c := newCanvas(opt.Width, opt.Height)
	area := image.Rect(0, 20, opt.Width, opt.Height)
	axes := Axes{H: 0, V: 1}
	b := emptyBounds()
	b.add(g.OriginX, g.OriginY)
	b.add(g.OriginX+float64(g.Width)*g.Resolution, g.OriginY+float64(g.Height)*g.Resolution)
	v := newView(axes, area, b)
	for py := area.Min.Y; py < area.Max.Y; py++ {
		y := v.cy - (float64(py)+0.5-v.pcy)/v.scale
		for px := area.Min.X; px < area.Max.X; px++ {
			x := v.cx + (float64(px)+0.5-v.pcx)/v.scale
			cx, cy, ok := g.Cell(x, y)
			if !ok {
				continue
			}
			col := UnknownColor()
			switch val := g.At(cx, cy); {
			case val >= 65:
				col = OccupiedColor()
			case val >= 0:
				col = FreeColor()
			}
			c.img.SetRGBA(px, py, col)
		}
	}
	drawPath(c, v, traj, func(int) color.RGBA { return TrajectoryColor() }, 2.5)
	drawEnds(c, v, traj)
	c.scaleBar(v)
	title := opt.Title
	if title == "" {
		title = fmt.Sprintf("occupancy grid %d x %d of %g: %d occupied (black), %d free (white), rest unknown (grey)",
			g.Width, g.Height, g.Resolution, g.Occupied, g.Free)
	}
	c.text(6, 14, title, TextColor())
	return c.img, nil
}

// SideBySide puts images next to each other, top-aligned, on the
// background colour.
func SideBySide(imgs ...image.Image) *image.RGBA {
	w, h := 0, 0
	for _, im := range imgs {
		w += im.Bounds().Dx()
		h = max(h, im.Bounds().Dy())
	}
	out := newCanvas(max(w, 1), max(h, 1))
	x := 0
	for _, im := range imgs {
		r := im.Bounds()
		draw.Draw(out.img, image.Rect(x, 0, x+r.Dx(), r.Dy()), im, r.Min, draw.Src)
		x += r.Dx()
	}
	return out.img
}
