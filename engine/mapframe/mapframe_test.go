package mapframe

import (
	"encoding/json"
	"errors"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/lingbotmap/lingbotmap/engine/geom"
)

func maxDiff(a, b geom.Mat4) float64 {
	var d float64
	for i := range 4 {
		for j := range 4 {
			d = max(d, math.Abs(a[i][j]-b[i][j]))
		}
	}
	return d
}

func randomPose(r *rand.Rand, scale float64) geom.Mat4 {
	q := geom.Quat{r.NormFloat64(), r.NormFloat64(), r.NormFloat64(), r.NormFloat64()}
	m, err := geom.Compose([3]float64{scale * r.NormFloat64(), scale * r.NormFloat64(), scale * r.NormFloat64()}, q)
	if err != nil {
		panic(err)
	}
	return m
}

// REP 103: the optical axes in body coordinates: optical z (forward) is
// body x, optical x (right) is −body y, optical y (down) is −body z.
func TestOpticalToBodyIsREP103(t *testing.T) {
	m := OpticalToBody()
	for _, c := range []struct{ opt, body [3]float64 }{
		{[3]float64{0, 0, 1}, [3]float64{1, 0, 0}},
		{[3]float64{1, 0, 0}, [3]float64{0, -1, 0}},
		{[3]float64{0, 1, 0}, [3]float64{0, 0, -1}},
	} {
		if got := geom.Apply(m, c.opt); got != c.body {
			t.Errorf("optical %v → body %v, want %v", c.opt, got, c.body)
		}
	}
	_, q, err := geom.Decompose(m)
	if err != nil {
		t.Fatal(err)
	}
	want := geom.Quat{-0.5, 0.5, -0.5, 0.5}
	for i := range 4 {
		if math.Abs(q[i]-want[i]) > 1e-12 {
			t.Fatalf("quaternion %v, want %v (the optical frame's usual rotation in a body frame)", q, want)
		}
	}
}

// Without a base frame, the first camera looks along the map's x axis and
// a camera moving forward (optical z) moves along map x; down (optical y)
// is map −z.
func TestUnfixedFrameIsZUp(t *testing.T) {
	f := New()
	if _, known := f.Scale(); known {
		t.Fatal("scale known before SetScale")
	}
	if ok, err := f.Fix(OpticalToBody()); !ok || err != nil {
		t.Fatalf("Fix: %v %v", ok, err)
	}
	cam := geom.Rigid(geom.Mat3{{1, 0, 0}, {0, 1, 0}, {0, 0, 1}}, [3]float64{0, 0.5, 2})
	got := geom.TranslationOf(f.CamPose(cam))
	if want := [3]float64{2, 0, -0.5}; maxDiff(geom.Rigid(geom.Mat3{}, got), geom.Rigid(geom.Mat3{}, want)) > 1e-12 {
		t.Fatalf("camera 2 forward, 0.5 down is at %v in the map, want %v", got, want)
	}
	// map_T_base(t0) = identity: the first camera's base pose
	if d := maxDiff(f.BasePose(geom.Rigid(geom.Mat3{{1, 0, 0}, {0, 1, 0}, {0, 0, 1}}, [3]float64{}), OpticalToBody()), geom.Rigid(geom.Mat3{{1, 0, 0}, {0, 1, 0}, {0, 0, 1}}, [3]float64{})); d > 1e-12 {
		t.Fatalf("map_T_base(t0) is not the identity (off by %g)", d)
	}
}

// map_T_cam(t) = base_T_cam(t0) · S_s(world_T_cam(t)) and map_T_base =
// map_T_cam · cam_T_base, for random poses, a mounted camera and a scale;
// points go through the same transform as the poses' positions.
func TestCompositionAndScale(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	baseCam := geom.Mul4(randomPose(r, 0.3), OpticalToBody())
	f := New()
	if _, err := f.Fix(baseCam); err != nil {
		t.Fatal(err)
	}
	if ok, _ := f.Fix(randomPose(r, 1)); ok {
		t.Fatal("a second Fix changed the frame")
	}
	if err := f.SetScale(2.5); err != nil {
		t.Fatal(err)
	}
	if s, known := f.Scale(); s != 2.5 || !known {
		t.Fatalf("Scale = %g, %v", s, known)
	}
	for range 20 {
		w := randomPose(r, 3)
		want := geom.Mul4(baseCam, w)
		for i := range 3 {
			want[i][3] = baseCam[i][3]
			for k := range 3 {
				want[i][3] += baseCam[i][k] * 2.5 * w[k][3]
			}
		}
		if d := maxDiff(f.CamPose(w), want); d > 1e-12 {
			t.Fatalf("CamPose off by %g", d)
		}
		base := f.BasePose(w, baseCam)
		if d := maxDiff(geom.Mul4(base, baseCam), f.CamPose(w)); d > 1e-12 {
			t.Fatalf("map_T_base · base_T_cam ≠ map_T_cam (off by %g)", d)
		}
		// the camera's centre is the world point at its position
		c := geom.TranslationOf(w)
		p := f.Points(nil, []geom.Point{{X: float32(c[0]), Y: float32(c[1]), Z: float32(c[2]), R: 7}})
		mc := geom.TranslationOf(f.CamPose(w))
		for i, v := range []float32{p[0].X, p[0].Y, p[0].Z} {
			if math.Abs(float64(v)-mc[i]) > 1e-4*(1+math.Abs(mc[i])) {
				t.Fatalf("point %v ≠ camera centre %v in the map", p[0], mc)
			}
		}
		if p[0].R != 7 {
			t.Fatal("colour lost")
		}
		if got := f.Point(c); math.Abs(got[0]-mc[0])+math.Abs(got[1]-mc[1])+math.Abs(got[2]-mc[2]) > 1e-9 {
			t.Fatalf("Point %v ≠ %v", got, mc)
		}
	}
	// first frame: map_T_base(t0) = identity
	id := geom.Rigid(geom.Mat3{{1, 0, 0}, {0, 1, 0}, {0, 0, 1}}, [3]float64{})
	if d := maxDiff(f.BasePose(id, baseCam), id); d > 1e-12 {
		t.Fatalf("map_T_base(t0) off the identity by %g", d)
	}
	// in place
	pts := []geom.Point{{X: 1, Y: 2, Z: 3}}
	out := f.Points(pts, pts)
	if &out[0] != &pts[0] {
		t.Fatal("Points did not convert in place")
	}
}

func TestBadInputAndState(t *testing.T) {
	f := New()
	for _, s := range []float64{0, -1, math.NaN(), math.Inf(1)} {
		if err := f.SetScale(s); !errors.Is(err, ErrBadScale) {
			t.Errorf("SetScale(%g) = %v", s, err)
		}
	}
	nan := OpticalToBody()
	nan[0][3] = math.NaN()
	if ok, err := f.Fix(nan); ok || err == nil {
		t.Fatal("a NaN base → camera transform was taken")
	}
	if f.Fixed() {
		t.Fatal("fixed after a refused Fix")
	}
	r := rand.New(rand.NewPCG(3, 4))
	m := randomPose(r, 1)
	f.Fix(m)
	f.SetScale(0.25)
	b, err := json.Marshal(f.State())
	if err != nil {
		t.Fatal(err)
	}
	var st State
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatal(err)
	}
	g := New()
	if err := g.Restore(st); err != nil {
		t.Fatal(err)
	}
	w := randomPose(r, 2)
	if d := maxDiff(f.CamPose(w), g.CamPose(w)); d != 0 || !g.Fixed() {
		t.Fatalf("restored frame differs by %g", d)
	}
	st.Scale = 0
	if err := g.Restore(st); err == nil {
		t.Fatal("a zero saved scale was taken")
	}
	g.Reset()
	if s, known := g.Scale(); g.Fixed() || known || s != 1 {
		t.Fatal("Reset kept the frame or the scale")
	}
}

// An engine whose first pose is not the identity: the map frame is the
// first frame's base all the same, and later poses keep their motion
// relative to the first, scaled.
func TestFixAtFirstPose(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	baseCam := geom.Mul4(randomPose(r, 0.3), OpticalToBody())
	first := randomPose(r, 2)
	f := New()
	if ok, err := f.FixAt(baseCam, first); !ok || err != nil {
		t.Fatal(ok, err)
	}
	f.SetScale(3)
	id := geom.Rigid(geom.Mat3{{1, 0, 0}, {0, 1, 0}, {0, 0, 1}}, [3]float64{})
	if d := maxDiff(f.BasePose(first, baseCam), id); d > 1e-12 {
		t.Fatalf("map_T_base(t0) off the identity by %g", d)
	}
	later := randomPose(r, 2)
	rel := geom.Mul4(geom.InvertRigid(first), later)
	for i := range 3 {
		rel[i][3] *= 3
	}
	if d := maxDiff(f.CamPose(later), geom.Mul4(baseCam, rel)); d > 1e-12 {
		t.Fatalf("CamPose off by %g", d)
	}
	st := f.State()
	g := New()
	if err := g.Restore(st); err != nil {
		t.Fatal(err)
	}
	if d := maxDiff(g.CamPose(later), f.CamPose(later)); d > 1e-12 {
		t.Fatalf("restored frame off by %g", d)
	}
}

// TestPointsEqualPoint: Points, which converts a keyframe's points in one
// loop, gives each point exactly what Point gives it, colours kept, in
// place too.
func TestPointsEqualPoint(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	f := New()
	first, err := geom.Compose([3]float64{0.4, -1.2, 2.5}, geom.Quat{0.1, -0.3, 0.2, 0.9})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.FixAt(OpticalToBody(), first); err != nil {
		t.Fatal(err)
	}
	if err := f.SetScale(0.37); err != nil {
		t.Fatal(err)
	}
	src := make([]geom.Point, 1000)
	for i := range src {
		src[i] = geom.Point{X: float32(rng.NormFloat64() * 5), Y: float32(rng.NormFloat64() * 5), Z: float32(rng.NormFloat64() * 5),
			R: uint8(i), G: uint8(i >> 2), B: uint8(i >> 4)}
	}
	got := f.Points(nil, src)
	for i, p := range src {
		w := f.Point([3]float64{float64(p.X), float64(p.Y), float64(p.Z)})
		want := geom.Point{X: float32(w[0]), Y: float32(w[1]), Z: float32(w[2]), R: p.R, G: p.G, B: p.B}
		if got[i] != want {
			t.Fatalf("point %d: %+v, want %+v", i, got[i], want)
		}
	}
	in := append([]geom.Point(nil), src...)
	if out := f.Points(in, in); &out[0] != &in[0] || out[len(out)-1] != got[len(got)-1] {
		t.Fatal("in place: another slice or other values")
	}
}
