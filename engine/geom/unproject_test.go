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

// TestKeepIsConfidentPoints: Keep selects ConfidentPoints' pixels in its
// order, and KeptPoints.Points colours them as ConfidentPoints does (grey
// without colours); a pixel index outside the colours is an error.
func TestKeepIsConfidentPoints(t *testing.T) {
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	const w, h = 7, 5
	fr := DepthFrame{
		Width: w, Height: h,
		Depth: make([]float32, w*h), Conf: make([]float32, w*h), RGB: make([]uint8, 3*w*h),
		Intrinsics: Intrinsics{3, 2.5, 3.2, 2.1},
		CamToWorld: Rigid(rotation(Quat{0.1, -0.2, 0.05, 0.97}), [3]float64{1, -2, 0.5}),
	}
	special := []float32{nan, inf, 0, -1, 1e38}
	for i := range fr.Depth {
		fr.Depth[i] = 0.5 + float32(i%11)*0.37
		if i%6 == 1 {
			fr.Depth[i] = special[(i/6)%len(special)]
		}
		fr.Conf[i] = 1 + float32(i%4)*0.5 // 1, 1.5, 2, 2.5: some exactly at the threshold
		fr.RGB[3*i], fr.RGB[3*i+1], fr.RGB[3*i+2] = uint8(i), uint8(2*i), uint8(3*i)
	}
	for _, filt := range []PointFilter{{ConfThreshold: 1.5, Stride: 1}, {ConfThreshold: 1.5, Stride: 3}, {ConfThreshold: 0, Stride: 2}} {
		for _, rgb := range [][]uint8{fr.RGB, nil} {
			f := fr
			f.RGB = rgb
			want, err := ConfidentPoints(nil, f, filt)
			if err != nil {
				t.Fatal(err)
			}
			k, err := Keep(f, filt)
			if err != nil {
				t.Fatal(err)
			}
			got, err := k.Points(nil, rgb)
			if err != nil {
				t.Fatal(err)
			}
			if k.Filter != filt || len(want) == 0 || !slices.Equal(got, want) {
				t.Fatalf("filter %+v, colours %v: kept %+v, want %+v", filt, rgb != nil, got, want)
			}
			for j, i := range k.Pixel {
				if u, v := int(i)%w, int(i)/w; u%filt.Stride != 0 || v%filt.Stride != 0 || (j > 0 && i <= k.Pixel[j-1]) {
					t.Fatalf("filter %+v: pixel %d (%d, %d) off the stride grid or out of order", filt, i, u, v)
				}
			}
		}
	}
	k := &KeptPoints{XYZ: []float32{1, 2, 3}, Pixel: []int32{w * h}}
	if _, err := k.Points(nil, fr.RGB); err == nil || !strings.Contains(err.Error(), "outside") {
		t.Fatalf("pixel outside the frame: %v", err)
	}
	k = &KeptPoints{XYZ: []float32{1, 2}, Pixel: []int32{0}}
	if _, err := k.Points(nil, nil); err == nil {
		t.Fatal("2 coordinates for a point accepted")
	}
	if _, err := Keep(DepthFrame{Width: 2, Height: 1, Depth: []float32{1}}, PointFilter{Stride: 1}); err == nil {
		t.Fatal("Keep took a short depth map")
	}
}
