package scale

import (
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// path is a camera trajectory in model units: a loop with height changes.
func path(n int) [][3]float64 {
	out := make([][3]float64, n)
	for i := range out {
		a := float64(i) * 0.15
		out[i] = [3]float64{3 * math.Sin(a), 0.2 * math.Sin(3*a), 2 * (1 - math.Cos(a))}
	}
	return out
}

// rigid moves a point by a fixed rotation about z and a translation, the
// odometry frame's arbitrary placement.
func rigid(p [3]float64) [3]float64 {
	c, s := math.Cos(0.7), math.Sin(0.7)
	return [3]float64{c*p[0] - s*p[1] + 5, s*p[0] + c*p[1] - 2, p[2] + 0.3}
}

func TestOdometryExact(t *testing.T) {
	const s = 2.7
	o, err := NewOdometry(DefaultOdometryConfig())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range path(60) {
		q := rigid([3]float64{s * p[0], s * p[1], s * p[2]})
		if err := o.Add(p, q); err != nil {
			t.Fatal(err)
		}
	}
	e := o.Estimate()
	if !e.Known || math.Abs(e.Scale/s-1) > 1e-9 {
		t.Fatalf("estimate %v, want %g", e, s)
	}
	if e.Confidence < 0.99 || e.Inliers != e.Samples {
		t.Fatalf("exact samples: confidence %g, %d of %d inliers", e.Confidence, e.Inliers, e.Samples)
	}
}

func TestOdometryNoiseAndJumps(t *testing.T) {
	const s = 0.45
	rng := rand.New(rand.NewPCG(7, 9))
	o, err := NewOdometry(DefaultOdometryConfig())
	if err != nil {
		t.Fatal(err)
	}
	pts := path(80)
	for i, p := range pts {
		q := rigid([3]float64{s * p[0], s * p[1], s * p[2]})
		// 2 % noise on each odometry position, relative to the distance
		// travelled from the start, as wheel odometry drifts
		d := dist(q, rigid([3]float64{s * pts[0][0], s * pts[0][1], s * pts[0][2]}))
		for k := range q {
			q[k] += 0.02 * d * rng.NormFloat64() / math.Sqrt(3)
		}
		if i == 70 || i == 75 {
			q[0] += 3 // odometry jumps
		}
		if err := o.Add(p, q); err != nil {
			t.Fatal(err)
		}
	}
	e := o.Estimate()
	if !e.Known || math.Abs(e.Scale/s-1) > 0.03 {
		t.Fatalf("estimate %v, want %g within 3 %%", e, s)
	}
	if e.Inliers == e.Samples {
		t.Fatalf("the jumps should be outliers: %d of %d inliers", e.Inliers, e.Samples)
	}
}

func TestOdometryWithholdsWithoutMotion(t *testing.T) {
	o, err := NewOdometry(DefaultOdometryConfig())
	if err != nil {
		t.Fatal(err)
	}
	// turning in place: the camera sits on the axis, positions barely move
	for i := 0; i < 50; i++ {
		jit := 0.001 * float64(i%3)
		if err := o.Add([3]float64{jit, 0, 0}, [3]float64{1 + jit, 2, 0}); err != nil {
			t.Fatal(err)
		}
	}
	e := o.Estimate()
	if e.Known || !strings.Contains(e.Reason, "not enough motion") {
		t.Fatalf("estimate %v, want withheld for lack of motion", e)
	}
	if err := o.Add([3]float64{math.NaN(), 0, 0}, [3]float64{}); !errors.Is(err, ErrNotFinite) {
		t.Fatalf("NaN sample: %v", err)
	}
}

func TestOdometryWithholdsOnDisagreement(t *testing.T) {
	o, err := NewOdometry(DefaultOdometryConfig())
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for _, p := range path(40) {
		// odometry unrelated to the camera's motion
		q := [3]float64{10 * rng.Float64(), 10 * rng.Float64(), 0}
		if err := o.Add(p, q); err != nil {
			t.Fatal(err)
		}
	}
	if e := o.Estimate(); e.Known {
		t.Fatalf("unrelated odometry gave a scale: %v", e)
	}
}

// depthPair makes a predicted depth map and a sensor image of s × it at twice
// the resolution, with holes, noise and a border the sensor doesn't see.
func depthPair(s, noise float64, holes float64, seed uint64) ([]float32, int, int, Image, PixelMap) {
	const w, h = 64, 48
	rng := rand.New(rand.NewPCG(seed, 1))
	pred := make([]float32, w*h)
	for y := 0; y < h; y++ {
		for x := 0; x < w; x++ {
			pred[y*w+x] = float32(1 + 0.05*float64(x) + 0.02*float64(y))
		}
	}
	sensor := Image{W: 2 * w, H: 2 * h, Depth: make([]float32, 4*w*h)}
	for y := 0; y < sensor.H; y++ {
		for x := 0; x < sensor.W; x++ {
			d := s * float64(pred[(y/2)*w+x/2]) * (1 + noise*rng.NormFloat64())
			switch {
			case rng.Float64() < holes:
				d = 0
			case rng.Float64() < holes/4:
				d = math.NaN()
			}
			sensor.Depth[y*sensor.W+x] = float32(d)
		}
	}
	return pred, w, h, sensor, PixelMap{ScaleX: 2, ScaleY: 2}
}

func TestDepthRatio(t *testing.T) {
	const s = 1.8
	d, err := NewDepth(DefaultDepthConfig())
	if err != nil {
		t.Fatal(err)
	}
	for f := 0; f < 5; f++ {
		pred, w, h, sensor, m := depthPair(s, 0.02, 0.2, uint64(f))
		if err := d.Add(pred, w, h, sensor, m); err != nil {
			t.Fatal(err)
		}
	}
	e := d.Estimate()
	if !e.Known || math.Abs(e.Scale/s-1) > 0.01 {
		t.Fatalf("estimate %v, want %g within 1 %%", e, s)
	}
}

func TestDepthRefusesBadFrames(t *testing.T) {
	d, err := NewDepth(DefaultDepthConfig())
	if err != nil {
		t.Fatal(err)
	}
	pred, w, h, sensor, m := depthPair(1, 0, 0, 1)
	// all zero depth: no valid pixel
	empty := Image{W: sensor.W, H: sensor.H, Depth: make([]float32, len(sensor.Depth))}
	if err := d.Add(pred, w, h, empty, m); err == nil || !strings.Contains(err.Error(), "valid pixels") {
		t.Fatalf("empty depth: %v", err)
	}
	// a depth image of another scene: ratios spread
	rng := rand.New(rand.NewPCG(5, 5))
	for i := range sensor.Depth {
		sensor.Depth[i] = float32(0.3 + 9*rng.Float64())
	}
	if err := d.Add(pred, w, h, sensor, m); err == nil || !strings.Contains(err.Error(), "spread") {
		t.Fatalf("unrelated depth: %v", err)
	}
	if err := d.Add(pred, w, h, Image{W: 3, H: 3, Depth: make([]float32, 8)}, m); err == nil {
		t.Fatal("a sensor image with the wrong length was taken")
	}
	if e := d.Estimate(); e.Known || d.Rejected != 2 {
		t.Fatalf("after refused frames: %v, %d rejected", e, d.Rejected)
	}
}

// scene is a floor at z = 0, a wall and a table top, in metres, seen from a
// camera at height hm; returned in model units (divided by s).
func scene(hm, s float64, seed uint64) ([][3]float64, [3]float64) {
	rng := rand.New(rand.NewPCG(seed, 3))
	var pts [][3]float64
	for i := 0; i < 3000; i++ {
		pts = append(pts, [3]float64{rng.Float64()*6 - 1, rng.Float64()*4 - 2, 0.005 * rng.NormFloat64()})
	}
	for i := 0; i < 1500; i++ { // a wall at x = 5
		pts = append(pts, [3]float64{5, rng.Float64()*4 - 2, rng.Float64() * 2.5})
	}
	for i := 0; i < 600; i++ { // a table top at 0.7 m
		pts = append(pts, [3]float64{2 + rng.Float64(), rng.Float64(), 0.7})
	}
	cam := [3]float64{0, 0, hm}
	for i := range pts {
		pts[i] = [3]float64{pts[i][0] / s, pts[i][1] / s, pts[i][2] / s}
	}
	return pts, [3]float64{cam[0] / s, cam[1] / s, cam[2] / s}
}

func TestGroundHeight(t *testing.T) {
	const s, hm = 3.2, 1.1
	cfg := DefaultGroundConfig()
	cfg.CameraHeight = hm
	g, err := NewGround(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for f := 0; f < 4; f++ {
		pts, cam := scene(hm, s, uint64(f))
		if err := g.Add(pts, cam); err != nil {
			t.Fatal(err)
		}
	}
	e := g.Estimate()
	if !e.Known || math.Abs(e.Scale/s-1) > 0.01 {
		t.Fatalf("estimate %v, want %g within 1 %%", e, s)
	}
}

func TestGroundWithholdsWithoutFloor(t *testing.T) {
	cfg := DefaultGroundConfig()
	cfg.CameraHeight = 1
	g, err := NewGround(cfg)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(2, 2))
	var pts [][3]float64
	for i := 0; i < 2000; i++ { // only a wall
		pts = append(pts, [3]float64{5, rng.Float64()*4 - 2, rng.Float64() * 2})
	}
	if err := g.Add(pts, [3]float64{0, 0, 1.5}); err == nil {
		t.Fatal("a wall was taken for the ground")
	}
	if e := g.Estimate(); e.Known || !strings.Contains(e.Reason, "plane") {
		t.Fatalf("estimate %v, want withheld", e)
	}
	if _, err := NewGround(DefaultGroundConfig()); err == nil {
		t.Fatal("a ground source without a camera height was made")
	}
}
