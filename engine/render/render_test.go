package render

import (
	"bytes"
	"image"
	"image/color"
	"image/png"
	"math"
	"strings"
	"testing"

	"github.com/lingbotmap/lingbotmap/engine/mapio"
	"github.com/lingbotmap/lingbotmap/engine/occgrid"
)

// decode round-trips an image through PNG, as a viewer would read the file.
func decode(t *testing.T, img image.Image) image.Image {
	t.Helper()
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		t.Fatal(err)
	}
	out, err := png.Decode(&buf)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// where counts the pixels of colour c and returns their mean position.
func where(img image.Image, c color.RGBA, r image.Rectangle) (n int, mx, my float64) {
	r = r.Intersect(img.Bounds())
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			if color.RGBAModel.Convert(img.At(x, y)).(color.RGBA) == c {
				n++
				mx += float64(x)
				my += float64(y)
			}
		}
	}
	if n > 0 {
		mx /= float64(n)
		my /= float64(n)
	}
	return n, mx, my
}

func TestTopView(t *testing.T) {
	// A path in the camera frame: forward (z) 4 m, then right (x) 3 m, with
	// the camera at head height (y = −1.5, OpenCV y is down).
	var traj [][3]float64
	for i := 0; i <= 40; i++ {
		traj = append(traj, [3]float64{0, -1.5, 0.1 * float64(i)})
	}
	for i := 1; i <= 30; i++ {
		traj = append(traj, [3]float64{0.1 * float64(i), -1.5, 4})
	}
	// A grey floor, one stray point far away, and garbage.
	grey := color.RGBA{128, 128, 128, 255}
	var pts []mapio.Point
	for x := -1.0; x <= 4; x += 0.05 {
		for z := -1.0; z <= 5; z += 0.05 {
			pts = append(pts, mapio.Point{X: float32(x), Y: 0, Z: float32(z), R: 128, G: 128, B: 128})
		}
	}
	pts = append(pts, mapio.Point{X: 1e6, Y: 0, Z: 1e6}, mapio.Point{X: float32(math.NaN())})

	img, err := TopView(traj, pts, TopViewOptions{Width: 640, Height: 480})
	if err != nil {
		t.Fatal(err)
	}
	got := decode(t, img)
	if b := got.Bounds(); b.Dx() != 640 || b.Dy() != 480 {
		t.Fatalf("size %v, want 640×480", b)
	}
	nTraj, _, _ := where(got, TrajectoryColor(), got.Bounds())
	nGrey, _, _ := where(got, grey, got.Bounds())
	nStart, sx, sy := where(got, StartColor(), got.Bounds())
	nEnd, ex, ey := where(got, EndColor(), got.Bounds())
	if nTraj < 300 || nGrey < 10000 || nStart == 0 || nEnd == 0 {
		t.Fatalf("pixels: trajectory %d, map %d, start %d, end %d", nTraj, nGrey, nStart, nEnd)
	}
	// Seen from above with x right and z up, the end (3, 4) is right of and
	// above the start (0, 0), and 4 m up is 4/3 of 3 m right.
	if !(ex > sx+50 && ey < sy-50) {
		t.Errorf("start at (%.0f, %.0f), end at (%.0f, %.0f): want the end up and to the right", sx, sy, ex, ey)
	}
	if r := (sy - ey) / (ex - sx); math.Abs(r-4.0/3) > 0.1 {
		t.Errorf("aspect of the path %.3f, want 4/3 (equal scale on both axes)", r)
	}
	// The stray point did not shrink the floor into a corner: the floor spans
	// most of the picture.
	_, gx, gy := where(got, grey, got.Bounds())
	if math.Abs(gx-320) > 80 || math.Abs(gy-250) > 80 {
		t.Errorf("map centred at (%.0f, %.0f)", gx, gy)
	}

	// Degenerate input draws without failing.
	for _, tr := range [][][3]float64{nil, {{1, 2, 3}}, {{0, 0, 0}, {0, 0, 0}}, {{math.NaN(), 0, 0}, {1, math.Inf(1), 0}}} {
		if _, err := TopView(tr, nil, TopViewOptions{Width: 100, Height: 100}); err != nil {
			t.Errorf("trajectory %v: %v", tr, err)
		}
	}
	if _, err := TopView(traj, nil, TopViewOptions{Width: 10, Height: 10}); err == nil {
		t.Error("a 10×10 image was accepted")
	}
	if _, err := TopView(traj, nil, TopViewOptions{Axes: &Axes{H: 1, V: 1}}); err == nil {
		t.Error("equal axes were accepted")
	}
}

func TestAutoAxes(t *testing.T) {
	pts := [][3]float64{{0, 0, 0}, {1, 10, 0.1}, {2, 20, 0}}
	if a := AutoAxes(pts); a.H != 1 || a.V != 0 {
		t.Errorf("AutoAxes = %+v, want y horizontal, x vertical", a)
	}
}

func TestEvalPlot(t *testing.T) {
	// The reference runs along x; the estimate follows it exactly for the
	// first half (error 0) and 0.5 m beside it for the second (error 0.5).
	var ref, est [][3]float64
	var errs, times []float64
	for i := 0; i <= 100; i++ {
		x := 0.1 * float64(i)
		ref = append(ref, [3]float64{x, math.Sin(x), 0})
		e := 0.0
		if i > 50 {
			e = 0.5
		}
		est = append(est, [3]float64{x, math.Sin(x) + e, 0})
		errs = append(errs, e)
		times = append(times, 100+float64(i)/30)
	}
	img, err := EvalPlot(ref, est, errs, times, EvalPlotOptions{Width: 800, Height: 700, Title: "ATE test"})
	if err != nil {
		t.Fatal(err)
	}
	got := decode(t, img)
	if b := got.Bounds(); b.Dx() != 800 || b.Dy() != 700 {
		t.Fatalf("size %v", b)
	}
	split := int(700 * 0.68)
	top := image.Rect(0, 100, 800-110, split) // below the legend, left of the colour bar
	left := image.Rect(0, 100, 345, split)
	right := image.Rect(445, 100, 800-110, split)
	low, high := ErrorColor(0), ErrorColor(1)
	if n, _, _ := where(got, ReferenceColor(), top); n < 200 {
		t.Errorf("%d reference pixels", n)
	}
	if n, _, _ := where(got, low, left); n < 100 {
		t.Errorf("%d low-error pixels on the left half of the path", n)
	}
	if n, _, _ := where(got, high, right); n < 100 {
		t.Errorf("%d high-error pixels on the right half of the path", n)
	}
	if n, _, _ := where(got, high, left); n != 0 {
		t.Errorf("%d high-error pixels where the error is 0", n)
	}
	// The time plot shows the step: high-error colour in its right half only.
	bottom := image.Rect(0, split+30, 800, 700-40)
	if n, mx, _ := where(got, high, bottom); n < 50 || mx < 400 {
		t.Errorf("error over time: %d high pixels centred at x=%.0f", n, mx)
	}

	if _, err := EvalPlot(ref, est[:5], errs, times, EvalPlotOptions{}); err == nil || !strings.Contains(err.Error(), "as many") {
		t.Errorf("mismatched lengths: %v", err)
	}
	if _, err := EvalPlot(ref[:1], est[:1], errs[:1], times[:1], EvalPlotOptions{}); err != nil {
		t.Errorf("one pose: %v", err)
	}
}

func TestWriteGray16(t *testing.T) {
	vals := []float32{1.234, 0, -1, float32(math.NaN()), 70, float32(math.Inf(1)), 0.0004, 65.535}
	var buf bytes.Buffer
	clipped, err := WriteGray16(&buf, vals, 4, 2, DepthScale)
	if err != nil {
		t.Fatal(err)
	}
	if clipped != 1 {
		t.Errorf("clipped %d, want 1", clipped)
	}
	img, err := png.Decode(&buf)
	if err != nil {
		t.Fatal(err)
	}
	g, ok := img.(*image.Gray16)
	if !ok {
		t.Fatalf("decoded %T, want a 16-bit greyscale image", img)
	}
	want := []uint16{1234, 0, 0, 0, 65535, 0, 0, 65535}
	for i, w := range want {
		if v := g.Gray16At(i%4, i/4).Y; v != w {
			t.Errorf("pixel %d = %d, want %d", i, v, w)
		}
	}
	if _, err := WriteGray16(&buf, vals, 3, 2, DepthScale); err == nil {
		t.Error("wrong size accepted")
	}
	if _, err := WriteGray16(&buf, vals, 4, 2, 0); err == nil {
		t.Error("zero scale accepted")
	}
}

// A grid view paints each cell in its map_server shade at the right place
// (x right, y up) and refuses a malformed grid.
func TestGridView(t *testing.T) {
	g := &occgrid.Grid{Width: 4, Height: 2, Resolution: 1, OriginX: 0, OriginY: 0,
		Data: []int8{occgrid.Occupied, occgrid.Free, occgrid.Unknown, occgrid.Unknown, occgrid.Free, occgrid.Free, occgrid.Free, occgrid.Occupied}}
	img, err := GridView(g, nil, GridViewOptions{Width: 400, Height: 220})
	if err != nil {
		t.Fatal(err)
	}
	// the view frames the grid with a 5 % pad: find each cell centre's pixel
	v := newView(Axes{H: 0, V: 1}, image.Rect(0, 20, 400, 220), bounds{0, 4, 0, 2})
	for cy := range 2 {
		for cx := range 4 {
			px, py := v.pixel([3]float64{float64(cx) + 0.5, float64(cy) + 0.5, 0})
			want := UnknownColor()
			switch g.At(cx, cy) {
			case occgrid.Occupied:
				want = OccupiedColor()
			case occgrid.Free:
				want = FreeColor()
			}
			if got := img.RGBAAt(int(px), int(py)); got != want {
				t.Errorf("cell (%d, %d) at pixel (%.0f, %.0f) is %v, want %v", cx, cy, px, py, got, want)
			}
		}
	}
	if _, err := GridView(&occgrid.Grid{Width: 2, Height: 2, Resolution: 1, Data: []int8{0}}, nil, GridViewOptions{}); err == nil {
		t.Error("a grid with too few cells was drawn")
	}
	both := SideBySide(img, img)
	if both.Bounds().Dx() != 800 || both.Bounds().Dy() != 220 || both.RGBAAt(400+10, 5) != img.RGBAAt(10, 5) {
		t.Errorf("side by side: %v", both.Bounds())
	}
}
