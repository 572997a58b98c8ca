package scale

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

type frameStub struct {
	s   float64
	set int
}

func (f *frameStub) SetScale(s float64) error { f.s = s; f.set++; return nil }

func odomSettings() Settings {
	s := DefaultSettings()
	s.Source = SourceOdometry
	return s
}

// a camera driving a curve in model units, odometry = s × it, rotated and
// moved
func curve(i int) [3]float64 {
	a := float64(i) * 0.05
	return [3]float64{math.Sin(a) * 3, 0.01 * float64(i), 3 - 3*math.Cos(a)}
}

func TestTrackerOdometrySetsScale(t *testing.T) {
	f := &frameStub{}
	tr, err := NewTracker(odomSettings(), f)
	if err != nil {
		t.Fatal(err)
	}
	if st := tr.Status(); st.State != StateUnscaled {
		t.Fatalf("before any keyframe: %+v", st)
	}
	const s = 2.5
	for i := range 30 {
		m := curve(i)
		o := [3]float64{-m[2]*s + 10, m[0]*s - 4, m[1] * s}
		if err := tr.AddOdometry(m, o); err != nil {
			t.Fatal(err)
		}
		if i == 1 {
			if st := tr.Status(); st.State != StateEstimating || !strings.Contains(st.Reason, "not enough motion") || f.set != 0 {
				t.Fatalf("after 2 keyframes: %+v (set %d)", st, f.set)
			}
		}
	}
	st := tr.Status()
	if st.State != StateKnown || math.Abs(st.Scale/s-1) > 1e-9 || math.Abs(f.s/s-1) > 1e-9 {
		t.Fatalf("status %+v, frame %g; want %g", st, f.s, s)
	}
}

func TestTrackerWithholdsOnPureRotation(t *testing.T) {
	f := &frameStub{}
	tr, err := NewTracker(odomSettings(), f)
	if err != nil {
		t.Fatal(err)
	}
	// turning in place: the camera (on the axis) does not move; the model
	// sees only noise-sized translations
	rng := rand.New(rand.NewPCG(1, 2))
	for range 40 {
		m := [3]float64{rng.NormFloat64() * 1e-3, 0, rng.NormFloat64() * 1e-3}
		o := [3]float64{1 + rng.NormFloat64()*1e-3, 2, 0}
		if err := tr.AddOdometry(m, o); err != nil {
			t.Fatal(err)
		}
	}
	st := tr.Status()
	if st.State != StateEstimating || f.set != 0 || !strings.Contains(st.Reason, "turning in place") {
		t.Fatalf("pure rotation: %+v, set %d times", st, f.set)
	}
}

func TestTrackerOdometryJumpAndNaN(t *testing.T) {
	f := &frameStub{}
	tr, err := NewTracker(odomSettings(), f)
	if err != nil {
		t.Fatal(err)
	}
	const s = 0.8
	for i := range 60 {
		m := curve(i)
		o := [3]float64{m[0] * s, m[1] * s, m[2] * s}
		if i >= 30 {
			o[0] += 5 // the odometry jumped (a wheel slipped, a relocalisation)
		}
		if err := tr.AddOdometry(m, o); err != nil {
			t.Fatal(err)
		}
	}
	if err := tr.AddOdometry([3]float64{math.NaN(), 0, 0}, [3]float64{}); err == nil {
		t.Error("a NaN position was taken")
	}
	st := tr.Status()
	if st.Jumps != 1 || !strings.Contains(st.Issue, "non-finite") || st.Skipped != 2 {
		t.Errorf("jump and NaN not reported: %+v", st)
	}
	if st.State != StateKnown || math.Abs(st.Scale/s-1) > 1e-9 {
		t.Errorf("after the jump: %+v, want scale %g", st, s)
	}
}

func TestTrackerDepthAndSkips(t *testing.T) {
	s := DefaultSettings()
	s.Source = SourceDepth
	f := &frameStub{}
	tr, err := NewTracker(s, f)
	if err != nil {
		t.Fatal(err)
	}
	const w, h, scale = 40, 30, 1.7
	pred := make([]float32, w*h)
	sensor := Image{W: 2 * w, H: 2 * h, Depth: make([]float32, 4*w*h)}
	for y := range h {
		for x := range w {
			pred[y*w+x] = 1 + float32(x+y)/50
		}
	}
	for y := range 2 * h {
		for x := range 2 * w {
			d := float32(scale) * pred[(y/2)*w+x/2]
			if (x*7+y*3)%11 == 0 {
				d = 0 // holes
			}
			sensor.Depth[y*2*w+x] = d
		}
	}
	m := PixelMapFor(2*w, 2*h, w, h, 2*w, 2*h)
	if err := tr.AddDepth(pred, w, h, Image{W: 2 * w, H: 2 * h, Depth: make([]float32, 4*w*h)}, m); err != nil {
		t.Fatal(err)
	}
	if st := tr.Status(); st.State != StateEstimating || st.Skipped != 1 || !strings.Contains(st.Issue, "valid pixels") {
		t.Fatalf("an all-zero depth image: %+v", st)
	}
	if err := tr.AddDepth(pred, w, h, sensor, m); err != nil {
		t.Fatal(err)
	}
	if st := tr.Status(); st.State != StateKnown || math.Abs(st.Scale/scale-1) > 1e-6 || f.s != st.Scale {
		t.Fatalf("depth: %+v, frame %g", st, f.s)
	}
}

func TestPixelMapFor(t *testing.T) {
	// landscape 640×480 → 518×392, depth at half size
	m := PixelMapFor(640, 480, 518, 392, 320, 240)
	if math.Abs(m.ScaleX-320.0/518) > 1e-12 || math.Abs(m.ScaleY-240.0/392) > 1e-12 || m.OffsetY != 0 {
		t.Errorf("landscape: %+v", m)
	}
	// portrait 480×640 → 518×518 centre crop: model row 0 is colour row 80
	m = PixelMapFor(480, 640, 518, 518, 480, 640)
	if math.Abs(m.ScaleX-480.0/518) > 1e-12 || m.ScaleY != m.ScaleX || math.Abs(m.OffsetY-80) > 1e-9 {
		t.Errorf("portrait: %+v", m)
	}
}

func TestSettingsValidate(t *testing.T) {
	if err := DefaultSettings().Validate(); err != nil {
		t.Fatal(err)
	}
	s := DefaultSettings()
	s.Source = "lidar"
	if err := s.Validate(); err == nil || !strings.Contains(err.Error(), "scale.source") {
		t.Errorf("source lidar: %v", err)
	}
	s = DefaultSettings()
	s.Source = SourceCameraHeight
	if err := s.Validate(); err == nil || !strings.Contains(err.Error(), "scale.camera_height") {
		t.Errorf("camera_height 0: %v", err)
	}
}

func TestTrackerResumed(t *testing.T) {
	tr, err := NewTracker(odomSettings(), &frameStub{})
	if err != nil {
		t.Fatal(err)
	}
	tr.Resumed(1.5)
	if st := tr.Status(); st.State != StateKnown || st.Scale != 1.5 {
		t.Errorf("resumed: %+v", st)
	}
	// too little motion after the resume keeps the restored scale
	tr.AddOdometry([3]float64{}, [3]float64{})
	if st := tr.Status(); st.State != StateKnown || st.Scale != 1.5 || !strings.Contains(st.Reason, "not enough motion") {
		t.Errorf("after a still keyframe: %+v", st)
	}
}
