package geom

import (
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
)

func TestWindowsSchedule(t *testing.T) {
	cases := []struct {
		name                            string
		total, scale, size, overlap, kf int
		want                            [][2]int
	}{
		{"single window", 10, 3, 9, 3, 2, [][2]int{{0, 10}}},
		{"kf 1 step 2", 10, 3, 5, 3, 1, [][2]int{{0, 5}, {2, 7}, {4, 9}, {6, 10}}},
		{"short tail kept at the end", 10, 3, 5, 1, 1, [][2]int{{0, 5}, {4, 9}, {8, 10}}},
		{"overlap wider than the window", 10, 2, 3, 5, 1, [][2]int{{7, 10}}},
		{"demo defaults", 200, 8, 64, 16, 1, [][2]int{{0, 64}, {48, 112}, {96, 160}, {144, 200}}},
		{"kf 3 widens windows", 40, 4, 8, 4, 3, [][2]int{{0, 16}, {12, 28}, {24, 40}}},
		{"empty", 0, 3, 9, 3, 2, nil},
	}
	for _, c := range cases {
		if got := Windows(c.total, c.scale, c.size, c.overlap, c.kf); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: Windows(%d, %d, %d, %d, %d) = %v, want %v", c.name, c.total, c.scale, c.size, c.overlap, c.kf, got, c.want)
		}
	}
	for _, c := range []struct{ total, scale, kf, size, kfs, want int }{
		{16, 3, 2, 3, -1, 3},  // overlap_size given
		{16, 3, 2, -1, -1, 3}, // default: the scale frames
		{16, 3, 2, 3, 4, 8},   // overlap_keyframes·kf wins
		{16, 3, 2, 3, 1, 3},   // …but never below the scale frames
		{5, 8, 1, 16, -1, 4},  // at most total−1
		{1, 8, 1, 16, -1, 0},
	} {
		if got := EffectiveOverlap(c.total, c.scale, c.kf, c.size, c.kfs); got != c.want {
			t.Errorf("EffectiveOverlap(%d, %d, %d, %d, %d) = %d, want %d", c.total, c.scale, c.kf, c.size, c.kfs, got, c.want)
		}
	}
}

// TestWindowsMatchGolden rebuilds the windowed golden run's frame types and its
// cache restarts from the schedule.
func TestWindowsMatchGolden(t *testing.T) {
	m := loadManifest(t, "windowed_kf2")
	s := m.Settings
	if s.OverlapSize == nil || s.OverlapKeyframes != nil {
		t.Fatalf("unexpected golden overlap settings %+v", s)
	}
	ov := EffectiveOverlap(s.Frames, s.NumScaleFrames, s.KeyframeInterval, *s.OverlapSize, -1)
	wins := Windows(s.Frames, s.NumScaleFrames, s.WindowSize, ov, s.KeyframeInterval)
	t.Logf("overlap %d, windows %v", ov, wins)

	var types []int
	var cleans []int
	calls := 0
	for k, win := range wins {
		n := win[1] - win[0]
		ws := min(s.NumScaleFrames, n)
		cleans = append(cleans, calls)
		calls += 1 + n - ws // one call for the scale frames, then one per frame
		local := make([]int, n)
		for i := ws; i < n; i++ {
			local[i] = 2
			if (i-ws)%s.KeyframeInterval == 0 {
				local[i] = 1
			}
		}
		types = append(types, local[:Contribution(k, len(wins), n, ov)]...)
	}
	if !reflect.DeepEqual(types, m.FrameType) {
		t.Errorf("stitched frame types %v, reference %v", types, m.FrameType)
	}
	var want []int
	for _, e := range m.Events {
		if e.Event == "clean_kv_cache" {
			want = append(want, *e.BeforeCall)
		}
	}
	if !reflect.DeepEqual(cleans, want) {
		t.Errorf("cache restarts before calls %v, reference %v", cleans, want)
	}
}

func randomPose(r *rand.Rand) [9]float32 {
	var p [9]float32
	for i := range 7 {
		p[i] = float32(r.NormFloat64())
	}
	p[7], p[8] = 1.2, 1.1
	return p
}

func randomDepth(r *rand.Rand, n int) []float32 {
	d := make([]float32, n)
	for i := range d {
		d[i] = float32(0.5 + 3*r.Float64())
	}
	return d
}

func simClose(t *testing.T, what string, got, want Similarity, tol float64) {
	t.Helper()
	bad := math.Abs(got.Scale-want.Scale) > tol*want.Scale
	for i := range 3 {
		bad = bad || math.Abs(got.T[i]-want.T[i]) > tol*math.Max(1, math.Abs(want.T[i]))
		for j := range 3 {
			bad = bad || math.Abs(got.R[i][j]-want.R[i][j]) > tol
		}
	}
	if bad {
		t.Errorf("%s: got %+v\nwant %+v", what, got, want)
	}
}

// TestPairwiseAlignmentRecoversSimilarity builds a previous window whose overlap
// frames are a known similarity of the current window's, and whose other frames
// are noise, so that only the right anchor and pairing recover it.
func TestPairwiseAlignmentRecoversSimilarity(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	const px = 30
	truth := Similarity{Scale: 2.5, R: randomRotation(r), T: [3]float64{0.3, -1, 4}}

	cur := WindowFrames{Keyframe: []bool{true, false, true, true, true}}
	for range 5 {
		cur.PoseEnc = append(cur.PoseEnc, randomPose(r))
		cur.Depth = append(cur.Depth, randomDepth(r, px))
	}
	// prev has 6 frames; its last 3 overlap cur's first 3. Offsets 0 and 2 are
	// keyframes in both (offset 1 is not a keyframe in cur), so 2 is the anchor.
	prev := WindowFrames{Keyframe: []bool{true, true, true, true, true, true}}
	for range 6 {
		prev.PoseEnc = append(prev.PoseEnc, randomPose(r))
		prev.Depth = append(prev.Depth, randomDepth(r, px))
	}
	for _, o := range []int{0, 2} {
		prev.PoseEnc[3+o] = truth.ApplyPose(cur.PoseEnc[o])
		for i, d := range cur.Depth[o] {
			prev.Depth[3+o][i] = float32(float64(d) * truth.Scale)
		}
	}
	got, err := PairwiseAlignment(prev, cur, 3)
	if err != nil {
		t.Fatal(err)
	}
	simClose(t, "paired keyframes", got, truth, 2e-6)

	// Without keyframe flags the first overlap frame is the anchor and the only
	// depth pair; make only that frame consistent.
	prev.Keyframe, cur.Keyframe = nil, nil
	prev.PoseEnc[5], prev.Depth[5] = randomPose(r), randomDepth(r, px)
	got, err = PairwiseAlignment(prev, cur, 3)
	if err != nil {
		t.Fatal(err)
	}
	simClose(t, "fallback anchor", got, truth, 2e-6)

	// The recovered transform maps the current anchor pose onto the previous one.
	w := WindowFrames{PoseEnc: [][9]float32{cur.PoseEnc[0]}, Depth: [][]float32{append([]float32(nil), cur.Depth[0]...)}}
	if err := Warp(&w, got); err != nil {
		t.Fatal(err)
	}
	a, b := PoseEncToCamToWorld(w.PoseEnc[0]), PoseEncToCamToWorld(prev.PoseEnc[3])
	for i := range 3 {
		for j := range 4 {
			if math.Abs(a[i][j]-b[i][j]) > 1e-5 {
				t.Fatalf("warped anchor pose %v, previous window's %v", a, b)
			}
		}
	}
	if id := got.Inverse(); true {
		back := id.Apply(got.Apply([3]float64{1, 2, 3}))
		if math.Abs(back[0]-1)+math.Abs(back[1]-2)+math.Abs(back[2]-3) > 1e-12 {
			t.Fatalf("Inverse does not undo the similarity: %v", back)
		}
	}
}

// TestPairwiseAlignmentScale: the median of an even count is the lower middle
// value (torch.median), unusable pixels are skipped, the scale is clamped.
func TestPairwiseAlignmentScale(t *testing.T) {
	pose := [9]float32{0, 0, 0, 0, 0, 0, 1, 1, 1}
	nan := float32(math.NaN())
	scale := func(prev, cur []float32) float64 {
		t.Helper()
		s, err := PairwiseAlignment(
			WindowFrames{PoseEnc: [][9]float32{pose}, Depth: [][]float32{prev}},
			WindowFrames{PoseEnc: [][9]float32{pose}, Depth: [][]float32{cur}}, 1)
		if err != nil {
			t.Fatal(err)
		}
		return s.Scale
	}
	if s := scale([]float32{4, 1, 3, 2}, []float32{1, 1, 1, 1}); s != 2 {
		t.Errorf("median of ratios 4 1 3 2 = %g, want the lower middle 2", s)
	}
	if s := scale([]float32{5, 1, 9, 3, 7, nan}, []float32{1, 0, 1, 1, 1, 1}); s != 5 {
		t.Errorf("median skipping a zero and a NaN = %g, want 5", s)
	}
	if s := scale([]float32{1e5}, []float32{1}); s != 1e3 {
		t.Errorf("scale 1e5 clamped to %g, want 1000", s)
	}
	if s := scale([]float32{1}, []float32{0}); s != 1 {
		t.Errorf("no usable pixel: scale %g, want 1", s)
	}
	if _, err := PairwiseAlignment(WindowFrames{}, WindowFrames{PoseEnc: [][9]float32{pose}}, 2); err == nil {
		t.Error("an empty previous window was accepted")
	}
	if s, err := PairwiseAlignment(WindowFrames{}, WindowFrames{}, 0); err != nil || !reflect.DeepEqual(s, Identity()) {
		t.Errorf("no overlap: %+v, %v; want the identity", s, err)
	}
}

func goldenWindowFrames(t *testing.T, c string, lo, hi int) WindowFrames {
	out := golden(t, c, "outputs.safetensors")
	pe, _ := out("pose_enc")
	depth, _ := out("depth")
	pts, _ := out("world_points")
	ft, _ := out("frame_type")
	n := goldenH * goldenW
	var w WindowFrames
	for f := lo; f < hi; f++ {
		w.PoseEnc = append(w.PoseEnc, poses(pe)[f])
		w.Depth = append(w.Depth, append([]float32(nil), depth[f*n:(f+1)*n]...))
		w.Points = append(w.Points, append([]float32(nil), pts[3*f*n:3*(f+1)*n]...))
		w.Keyframe = append(w.Keyframe, ft[f] != 2)
	}
	return w
}

func maxRel(a, b []float32) float64 {
	var m float64
	for i := range a {
		m = math.Max(m, relErr(float64(a[i]), float64(b[i]), 1))
	}
	return m
}

// TestAlignmentMatchesGolden checks the windowed golden run (windows [0,15) and
// [12,16)). Its window 0 is exactly the kf-2 streaming run's frames 0–14 (same
// inputs, same fresh cache), so warping those by the identity must give the
// stitched frames 0–11 (quaternions normalised). Window 1's raw output is the
// stitched frames 12–15 mapped back by the recorded chunk transform; aligning it
// to window 0 must give that transform again, which holds only with the right
// anchor (frame 13, the one overlap frame that is a keyframe in both windows)
// and the lower-middle median.
func TestAlignmentMatchesGolden(t *testing.T) {
	stitched := goldenWindowFrames(t, "windowed_kf2", 0, 16)
	win0 := goldenWindowFrames(t, "stream_kf2", 0, 15)
	out := golden(t, "windowed_kf2", "outputs.safetensors")
	cs, _ := out("chunk_scales")
	ct, _ := out("chunk_transforms")
	if cs[0] != 1 {
		t.Fatalf("golden chunk_scales[0] = %g", cs[0])
	}
	truth := Similarity{Scale: float64(cs[1])}
	for i := range 3 {
		for j := range 3 {
			truth.R[i][j] = float64(ct[16+4*i+j])
		}
		truth.T[i] = float64(ct[16+4*i+3])
	}

	if err := Warp(&win0, Identity()); err != nil {
		t.Fatal(err)
	}
	var worstPose, worstDepth, worstPts float64
	for f := range 12 {
		worstPose = math.Max(worstPose, maxRel(win0.PoseEnc[f][:], stitched.PoseEnc[f][:]))
		worstDepth = math.Max(worstDepth, maxRel(win0.Depth[f], stitched.Depth[f]))
		worstPts = math.Max(worstPts, maxRel(win0.Points[f], stitched.Points[f]))
	}
	t.Logf("window 0 warped by the identity vs stitched frames 0–11: pose %.2g, depth %.2g, points %.2g", worstPose, worstDepth, worstPts)
	if worstPose > 1e-6 || worstDepth > 0 || worstPts > 0 {
		t.Errorf("identity warp of window 0 differs from the stitched output")
	}

	raw1 := WindowFrames{
		PoseEnc:  stitched.PoseEnc[12:],
		Depth:    stitched.Depth[12:],
		Points:   stitched.Points[12:],
		Keyframe: stitched.Keyframe[12:],
	}
	if err := Warp(&raw1, truth.Inverse()); err != nil {
		t.Fatal(err)
	}
	got, err := PairwiseAlignment(win0, raw1, 3)
	if err != nil {
		t.Fatal(err)
	}
	dev := math.Abs(got.Scale - truth.Scale)
	for i := range 3 {
		dev = math.Max(dev, math.Abs(got.T[i]-truth.T[i]))
		for j := range 3 {
			dev = math.Max(dev, math.Abs(got.R[i][j]-truth.R[i][j]))
		}
	}
	t.Logf("window 1: scale %.7g (reference %.7g), largest deviation of s, R, t %.2g", got.Scale, truth.Scale, dev)
	simClose(t, "window 1 alignment", got, truth, 1e-5)
	if m := got.Matrix(); m[3][3] != 1 || m[0][3] != got.T[0] {
		t.Errorf("Matrix() = %v", m)
	}
}

func TestSelectKthMatchesSort(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	special := []float32{float32(math.Inf(1)), float32(math.Inf(-1)), 0, float32(math.Copysign(0, -1)), math.SmallestNonzeroFloat32, -math.MaxFloat32}
	for trial := range 340 {
		n := 1 + r.IntN(200)
		if trial >= 300 {
			// long enough for the radix pass: ratios near 1 crowd one bucket
			n = radixMin + r.IntN(3*radixMin)
		}
		xs := make([]float32, n)
		for i := range xs {
			switch {
			case trial%3 == 0:
				xs[i] = float32(r.IntN(5)) // many ties
			case trial%5 == 0 && r.IntN(20) == 0:
				xs[i] = special[r.IntN(len(special))]
			case trial >= 300 && trial%2 == 0:
				xs[i] = float32(1 + 0.01*r.NormFloat64())
			default:
				xs[i] = float32(r.NormFloat64())
			}
		}
		if trial%7 == 0 {
			slices.Sort(xs) // already sorted input
		}
		sorted := slices.Clone(xs)
		slices.Sort(sorted)
		k := r.IntN(n)
		if got := selectKth(slices.Clone(xs), k); got != sorted[k] {
			t.Fatalf("trial %d: selectKth(k=%d) = %g, want %g", trial, k, got, sorted[k])
		}
	}
}
