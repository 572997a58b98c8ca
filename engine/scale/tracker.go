package scale

import (
	"fmt"
	"math"
	"sync"
)

// The states a Status reports.
const (
	// StateUnscaled: no source, or nothing fed yet: outputs are in model units.
	StateUnscaled = "unscaled"
	// StateEstimating: samples are coming in but the scale is withheld.
	StateEstimating = "estimating"
	// StateKnown: the scale is set; outputs are in metres.
	StateKnown = "known"
)

// Status is the scale as /diagnostics and run.json report it.
type Status struct {
	State  string `json:"state"`
	Source string `json:"source"`
	// Scale is metres per model unit; 0 until known.
	Scale      float64 `json:"scale"`
	Confidence float64 `json:"confidence"`
	// Samples and Inliers of the current estimate.
	Samples int `json:"samples"`
	Inliers int `json:"inliers"`
	// Reason is why the scale is withheld now (empty when the current
	// estimate is usable).
	Reason string `json:"reason,omitempty"`
	// Keyframes fed to the estimator, and Skipped those left out (no
	// odometry at the stamp, an unusable depth image, no floor), with the
	// last Issue.
	Keyframes int    `json:"keyframes"`
	Skipped   int    `json:"skipped"`
	Issue     string `json:"issue,omitempty"`
	// Jumps is the odometry steps refused as jumps.
	Jumps int `json:"jumps"`
}

// Setter is what takes the scale once known: the map frame
// (engine/mapframe.Frame).
type Setter interface {
	SetScale(s float64) error
}

// Tracker is the metric scale component: it feeds the source the settings
// pick with keyframe results and the robot's data, and sets the scale on
// the map frame from the moment the source knows it (and again as the
// estimate moves). It is safe for concurrent use.
type Tracker struct {
	mu    sync.Mutex
	set   Settings
	frame Setter
	odo   *Odometry
	dep   *Depth
	gnd   *Ground
	st    Status
	// the last keyframe's odometry position, for the jump check
	last     [3]float64
	haveLast bool
}

// NewTracker makes the component for settings s; frame takes the scale.
func NewTracker(s Settings, frame Setter) (*Tracker, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	t := &Tracker{set: s, frame: frame, st: Status{State: StateUnscaled, Source: s.Source}}
	var err error
	switch s.Source {
	case SourceOdometry:
		t.odo, err = NewOdometry(s.Odometry())
	case SourceDepth:
		t.dep, err = NewDepth(s.Depth())
	case SourceCameraHeight:
		t.gnd, err = NewGround(s.Ground())
	default:
		t.st.Reason = "no scale source configured (scale.source none): outputs are in model units"
	}
	if err != nil {
		return nil, err
	}
	return t, nil
}

// Settings are the tracker's settings.
func (t *Tracker) Settings() Settings { return t.set }

// Status is the scale's state now.
func (t *Tracker) Status() Status {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.st
}

// Skip records a keyframe the estimator could not use, with the reason
// (odometry missing or too old at the image's stamp, an unusable depth
// image): counted and reported, the scale left as it is.
func (t *Tracker) Skip(reason string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.st.Skipped++
	t.st.Issue = reason
	if t.st.State == StateUnscaled && t.set.Source != SourceNone {
		t.st.State = StateEstimating
		t.st.Reason = reason
	}
}

// AddOdometry feeds a keyframe: the camera's position in the model's world
// (model units) and in the odometry frame (metres). A step from the last
// keyframe longer than max_jump is an odometry jump: reported, and the
// window restarts after it (pairs across a jump would be wrong); the scale
// already set stays.
func (t *Tracker) AddOdometry(model, odom [3]float64) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.odo == nil {
		return fmt.Errorf("scale: odometry given, but the source is %s", t.set.Source)
	}
	if !finite3(model) || !finite3(odom) {
		t.skipLocked(fmt.Sprintf("keyframe with a non-finite position (model %v, odometry %v)", model, odom))
		return ErrNotFinite
	}
	if t.haveLast {
		if d := dist(t.last, odom); d > t.set.MaxJump {
			t.st.Jumps++
			t.skipLocked(fmt.Sprintf("odometry jumped %.3g m between two keyframes (max_jump %g m): window restarted", d, t.set.MaxJump))
			t.odo.Reset()
		}
	}
	t.last, t.haveLast = odom, true
	if err := t.odo.Add(model, odom); err != nil {
		return err
	}
	t.st.Keyframes++
	return t.updateLocked(t.odo.Estimate())
}

// AddDepth feeds a keyframe's predicted depth (w×h, model units) and the
// sensor's aligned depth image; a frame the depth source refuses (too few
// valid pixels, ratios that spread) is skipped with the reason.
func (t *Tracker) AddDepth(pred []float32, w, h int, sensor Image, m PixelMap) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.dep == nil {
		return fmt.Errorf("scale: depth given, but the source is %s", t.set.Source)
	}
	if err := t.dep.Add(pred, w, h, sensor, m); err != nil {
		t.skipLocked(err.Error())
		return t.updateLocked(t.dep.Estimate())
	}
	t.st.Keyframes++
	return t.updateLocked(t.dep.Estimate())
}

// AddGround feeds a keyframe's points and camera position in the z-up map
// frame at scale 1 (model units).
func (t *Tracker) AddGround(points [][3]float64, camera [3]float64) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.gnd == nil {
		return fmt.Errorf("scale: points given for the floor, but the source is %s", t.set.Source)
	}
	if err := t.gnd.Add(points, camera); err != nil {
		t.skipLocked(err.Error())
		return t.updateLocked(t.gnd.Estimate())
	}
	t.st.Keyframes++
	return t.updateLocked(t.gnd.Estimate())
}

// Resumed says a saved session brought the map frame's scale s: the
// outputs are in metres already, and the estimate goes on from new samples.
func (t *Tracker) Resumed(s float64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if s > 0 && !math.IsInf(s, 0) {
		t.st.State, t.st.Scale, t.st.Reason = StateKnown, s, "restored from the saved session"
	}
}

// Reset forgets the samples (a new map: new model units); the map frame
// forgets its scale itself.
func (t *Tracker) Reset() {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case t.odo != nil:
		t.odo.Reset()
	case t.dep != nil:
		t.dep.Reset()
	case t.gnd != nil:
		t.gnd.Reset()
	}
	t.haveLast = false
	t.st = Status{State: StateUnscaled, Source: t.set.Source, Reason: t.st.Reason}
	if t.set.Source != SourceNone {
		t.st.Reason = "new map: no samples yet"
	}
}

func (t *Tracker) skipLocked(reason string) {
	t.st.Skipped++
	t.st.Issue = reason
	if t.st.State == StateUnscaled {
		t.st.State = StateEstimating
	}
}

// updateLocked takes a new estimate: a known one sets the scale on the
// frame; one withheld keeps the scale already set (if any) and says why.
func (t *Tracker) updateLocked(e Estimate) error {
	t.st.Samples, t.st.Inliers, t.st.Reason = e.Samples, e.Inliers, e.Reason
	if !e.Known || !(e.Scale > 0) || math.IsInf(e.Scale, 0) {
		if t.st.State != StateKnown {
			t.st.State = StateEstimating
		}
		return nil
	}
	if t.frame != nil {
		if err := t.frame.SetScale(e.Scale); err != nil {
			return fmt.Errorf("scale: setting %g on the map frame: %w", e.Scale, err)
		}
	}
	t.st.State, t.st.Scale, t.st.Confidence = StateKnown, e.Scale, e.Confidence
	return nil
}

// PixelMapFor maps the model's w×h depth map onto a depth image of dw×dh
// aligned with a colour image of cw×ch: the preprocessing resized the
// colour image to the model's width (height rounded to whole patches) and
// cropped a portrait one to its centre square.
func PixelMapFor(cw, ch, w, h, dw, dh int) PixelMap {
	sx := float64(cw) / float64(w)
	sy := float64(ch) / float64(h)
	oy := 0.0
	if ch > cw && h == w {
		// portrait: the centre square was kept, aspect unchanged
		sy = sx
		oy = (float64(ch) - float64(h)*sy) / 2
	}
	kx, ky := float64(dw)/float64(cw), float64(dh)/float64(ch)
	return PixelMap{ScaleX: sx * kx, ScaleY: sy * ky, OffsetY: oy * ky}
}
