package geom

import (
	"math"
	"slices"
	"strings"
	"testing"
)

// ConfidentPoints keeps exactly the golden pixels with confidence above the
// frame's median (every golden pixel is above the usual 1.5), and
// each kept point is UnprojectMap's point of its pixel bit for bit, so the
// sparse (map) and dense (viewer) paths are one computation.
func TestConfidentPointsMatchGolden(t *testing.T) {
	out := golden(t, "stream_kf1", "outputs.safetensors")
	pe, _ := out("pose_enc")
	depth, _ := out("depth")
	conf, _ := out("depth_conf")
	n := goldenH * goldenW
	rgb := make([]uint8, 3*n)
	for i := range rgb {
		rgb[i] = uint8(i * 7)
	}
	total := 0
	for f, enc := range poses(pe) {
		fr := DepthFrame{
			Width: goldenW, Height: goldenH,
			Depth: depth[f*n : (f+1)*n], Conf: conf[f*n : (f+1)*n], RGB: rgb,
			Intrinsics: IntrinsicsFromPoseEnc(enc, goldenW, goldenH), CamToWorld: PoseEncToCamToWorld(enc),
		}
		dense, err := UnprojectMap(fr.Depth, goldenW, goldenH, fr.Intrinsics, fr.CamToWorld)
		if err != nil {
			t.Fatal(err)
		}
		sorted := slices.Clone(fr.Conf)
		slices.Sort(sorted)
		thr := float64(sorted[n/2])
		pts, err := ConfidentPoints(nil, fr, PointFilter{ConfThreshold: thr, Stride: 1})
		if err != nil {
			t.Fatal(err)
		}
		k := 0
		for i := range n {
			if !(float64(fr.Conf[i]) > thr) {
				continue
			}
			if k >= len(pts) {
				t.Fatalf("frame %d: %d points, more confident pixels remain", f, len(pts))
			}
			want := Point{X: dense[3*i], Y: dense[3*i+1], Z: dense[3*i+2], R: rgb[3*i], G: rgb[3*i+1], B: rgb[3*i+2]}
			if pts[k] != want {
				t.Fatalf("frame %d pixel %d: %+v, dense path %+v", f, i, pts[k], want)
			}
			k++
		}
		if k != len(pts) || k == 0 || k == n {
			t.Fatalf("frame %d: %d points for %d confident pixels", f, len(pts), k)
		}
		total += k
		// Stride 2 keeps the confident pixels of even rows and columns only.
		half, _ := ConfidentPoints(nil, fr, PointFilter{ConfThreshold: thr, Stride: 2})
		want := 0
		for v := 0; v < goldenH; v += 2 {
			for u := 0; u < goldenW; u += 2 {
				if float64(fr.Conf[v*goldenW+u]) > thr {
					want++
				}
			}
		}
		if len(half) != want {
			t.Fatalf("frame %d stride 2: %d points, want %d", f, len(half), want)
		}
	}
	t.Logf("%d confident points in %d frames", total, len(pe)/9)
}

func TestConfidentPointsEdges(t *testing.T) {
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	id := Rigid(rotation(Quat{0, 0, 0, 1}), [3]float64{10, 0, 0})
	k := Intrinsics{2, 2, 1, 1}
	fr := DepthFrame{
		Width: 3, Height: 2,
		Depth:      []float32{1, nan, -1, 0, inf, 4},
		Intrinsics: k, CamToWorld: id,
	}
	// No confidence: every valid depth is kept (two pixels), in grey.
	pts, err := ConfidentPoints(nil, fr, PointFilter{ConfThreshold: 99, Stride: 1})
	if err != nil {
		t.Fatal(err)
	}
	want := []Point{
		{X: 10 + (0-1)/2.0*1, Y: (0 - 1) / 2.0 * 1, Z: 1, R: Grey, G: Grey, B: Grey},
		{X: 10 + (2-1)/2.0*4, Y: (1 - 1) / 2.0 * 4, Z: 4, R: Grey, G: Grey, B: Grey},
	}
	if len(pts) != 2 || pts[0] != want[0] || pts[1] != want[1] {
		t.Fatalf("points %+v, want %+v", pts, want)
	}
	// The threshold is strict.
	fr.Conf = []float32{2, 9, 9, 9, 9, 2.0001}
	if pts, _ := ConfidentPoints(pts[:0], fr, PointFilter{ConfThreshold: 2, Stride: 1}); len(pts) != 1 || pts[0].Z != 4 {
		t.Fatalf("threshold 2 kept %+v", pts)
	}
	// The dense map has NaN where there is no surface.
	dense, err := UnprojectMap(fr.Depth, 3, 2, k, id)
	if err != nil {
		t.Fatal(err)
	}
	for i, d := range fr.Depth {
		if got := math.IsNaN(float64(dense[3*i])); got != !(d > 0 && !math.IsInf(float64(d), 0)) {
			t.Errorf("pixel %d depth %g: dense point %v", i, d, dense[3*i:3*i+3])
		}
	}
	for name, c := range map[string]struct {
		mod  func(*DepthFrame)
		filt PointFilter
		want string
	}{
		"short depth":   {func(f *DepthFrame) { f.Depth = f.Depth[:5] }, PointFilter{Stride: 1}, "5 depth"},
		"short conf":    {func(f *DepthFrame) { f.Conf = f.Conf[:1] }, PointFilter{Stride: 1}, "1 confidence"},
		"short rgb":     {func(f *DepthFrame) { f.RGB = make([]uint8, 3) }, PointFilter{Stride: 1}, "3 colour"},
		"zero focal":    {func(f *DepthFrame) { f.Intrinsics[0] = 0 }, PointFilter{Stride: 1}, "cannot unproject"},
		"NaN centre":    {func(f *DepthFrame) { f.Intrinsics[3] = math.NaN() }, PointFilter{Stride: 1}, "cannot unproject"},
		"zero stride":   {func(*DepthFrame) {}, PointFilter{}, "stride"},
		"NaN threshold": {func(*DepthFrame) {}, PointFilter{Stride: 1, ConfThreshold: math.NaN()}, "threshold"},
	} {
		f := fr
		c.mod(&f)
		if _, err := ConfidentPoints(nil, f, c.filt); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error with %q", name, err, c.want)
		}
	}
	if _, err := UnprojectMap(fr.Depth, 3, 2, Intrinsics{0, 1, 0, 0}, id); err == nil {
		t.Error("UnprojectMap accepted a zero focal length")
	}
}
