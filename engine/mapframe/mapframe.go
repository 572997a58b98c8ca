// Package mapframe is the map frame of REP 103 and REP 105 over the
// engine's world. The engine's world is the first camera's optical frame
// (x right, y down, z forward) in model units; the map frame is z-up and
// x-forward at the start: the robot's base at the first frame is the map's
// origin, map_T_base(t0) = identity, so map_T_world = base_T_cam(t0) ·
// world_T_cam(t0)⁻¹ (a model's first pose is the identity or close to it;
// taking it out makes map_T_base(t0) exactly the identity). With no base
// frame known, base_T_cam is the fixed optical-to-body rotation (body x =
// optical z, body y = −optical x, body z = −optical y).
//
// A metric scale (metres per model unit; 1 and unknown until set) applies
// to translations and points:
//
//	map_T_cam(t) = base_T_cam(t0) · S_s(world_T_cam(t0)⁻¹ · world_T_cam(t))
//
// where S_s multiplies the translation by s. The node and `run` keep their
// trajectory and voxel map in the engine's world and convert at every
// output (poses, path, odometry, clouds, the map, saved files), so that a
// scale found later applies to everything published or saved from then on.
// The metric scale estimators (engine/scale, wired by the node and run)
// call SetScale.
package mapframe

import (
	"errors"
	"fmt"
	"math"
	"sync"

	"github.com/lingbotmap/lingbotmap/engine/geom"
)

// OpticalToBody is base_T_cam for a camera whose optical axis looks along
// the body's x axis (REP 103): the optical frame's axes in body
// coordinates. Its quaternion (x, y, z, w) is (−½, ½, −½, ½).
func OpticalToBody() geom.Mat4 {
	return geom.Rigid(geom.Mat3{
		{0, 0, 1},
		{-1, 0, 0},
		{0, -1, 0},
	}, [3]float64{})
}

// ErrBadScale is a scale that is not a finite number > 0.
var ErrBadScale = errors.New("mapframe: scale must be a finite number > 0")

// Frame is one map's frame: map_T_world and the metric scale. It is safe
// for concurrent use.
type Frame struct {
	mu         sync.Mutex
	fixed      bool
	baseToCam  geom.Mat4 // base_T_cam(t0)
	first      geom.Mat4 // world_T_cam(t0)
	firstInv   geom.Mat4 // its inverse
	scale      float64
	scaleKnown bool
}

// New is a frame not yet fixed: until Fix, it converts with the optical
// to-body rotation, scale 1 (unknown).
func New() *Frame {
	return &Frame{baseToCam: OpticalToBody(), first: identity(), firstInv: identity(), scale: 1}
}

func identity() geom.Mat4 {
	return geom.Rigid(geom.Mat3{{1, 0, 0}, {0, 1, 0}, {0, 0, 1}}, [3]float64{})
}

// Fix sets the frame at the map's first frame: baseToCam is the camera's
// pose in the base frame then (base_T_cam(t0)), with the engine's world
// being that first camera. Only the first Fix or FixAt after New or Reset
// counts: later ones return false and change nothing. A transform that is
// not rigid and finite is refused.
func (f *Frame) Fix(baseToCam geom.Mat4) (bool, error) {
	return f.FixAt(baseToCam, identity())
}

// FixAt is Fix with the engine's pose of the first camera (world_T_cam(t0)),
// for engines whose world is not exactly the first camera: the map frame
// is then the first frame's base all the same.
func (f *Frame) FixAt(baseToCam, firstCamToWorld geom.Mat4) (bool, error) {
	if _, _, err := geom.Decompose(baseToCam); err != nil {
		return false, fmt.Errorf("mapframe: base → camera transform: %w", err)
	}
	if _, _, err := geom.Decompose(firstCamToWorld); err != nil {
		return false, fmt.Errorf("mapframe: first camera pose: %w", err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fixed {
		return false, nil
	}
	f.fixed, f.baseToCam, f.first, f.firstInv = true, baseToCam, firstCamToWorld, geom.InvertRigid(firstCamToWorld)
	return true, nil
}

// Fixed says whether Fix has set the frame.
func (f *Frame) Fixed() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.fixed
}

// MapToWorld is map_T_world at the current scale: the transform of a
// world point scaled by it, base_T_cam(t0) · S_s(world_T_cam(t0)⁻¹).
func (f *Frame) MapToWorld() geom.Mat4 {
	m, _ := f.get()
	return m
}

// SetScale sets the metric scale, metres per model unit. Everything
// converted from then on is in metres.
func (f *Frame) SetScale(s float64) error {
	if !(s > 0) || math.IsInf(s, 0) {
		return fmt.Errorf("%w, not %g", ErrBadScale, s)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.scale, f.scaleKnown = s, true
	return nil
}

// Scale is the metric scale and whether it is known (1, false until
// SetScale).
func (f *Frame) Scale() (s float64, known bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.scale, f.scaleKnown
}

// Reset forgets the frame and the scale: a new map (~reset) starts from a
// new first camera, and the model's units with it.
func (f *Frame) Reset() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fixed, f.baseToCam, f.first, f.firstInv, f.scale, f.scaleKnown = false, OpticalToBody(), identity(), identity(), 1, false
}

// get is map_T_world at the current scale and the scale: a world point p
// (and a pose's translation) scaled by s maps through it, as S_s
// distributes over products of rigid transforms.
func (f *Frame) get() (geom.Mat4, float64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return geom.Mul4(f.baseToCam, scaled(f.firstInv, f.scale)), f.scale
}

// scaled is S_s(m): m with its translation multiplied by s.
func scaled(m geom.Mat4, s float64) geom.Mat4 {
	for i := range 3 {
		m[i][3] *= s
	}
	return m
}

// CamPose is map_T_cam for the engine's camToWorld (world_T_cam).
func (f *Frame) CamPose(camToWorld geom.Mat4) geom.Mat4 {
	m, s := f.get()
	return geom.Mul4(m, scaled(camToWorld, s))
}

// BasePose is map_T_base for the engine's camToWorld and the camera's pose
// in the base frame now (camToBase, base_T_cam; metres).
func (f *Frame) BasePose(camToWorld, camToBase geom.Mat4) geom.Mat4 {
	return geom.Mul4(f.CamPose(camToWorld), geom.InvertRigid(camToBase))
}

// Point is a world point in the map frame.
func (f *Frame) Point(p [3]float64) [3]float64 {
	m, s := f.get()
	return geom.Apply(m, [3]float64{s * p[0], s * p[1], s * p[2]})
}

// Points converts world points into the map frame: dst (grown as needed)
// gets src's points; dst may be src itself (in place). Colours are kept.
func (f *Frame) Points(dst, src []geom.Point) []geom.Point {
	m, s := f.get()
	if cap(dst) < len(src) {
		dst = make([]geom.Point, len(src))
	}
	dst = dst[:len(src)]
	// geom.Apply's arithmetic inline, in its order (the same values): a
	// keyframe has hundreds of thousands of points
	r00, r01, r02, t0 := m[0][0], m[0][1], m[0][2], m[0][3]
	r10, r11, r12, t1 := m[1][0], m[1][1], m[1][2], m[1][3]
	r20, r21, r22, t2 := m[2][0], m[2][1], m[2][2], m[2][3]
	for i, p := range src {
		x, y, z := s*float64(p.X), s*float64(p.Y), s*float64(p.Z)
		dst[i] = geom.Point{
			X: float32(r00*x + r01*y + r02*z + t0),
			Y: float32(r10*x + r11*y + r12*z + t1),
			Z: float32(r20*x + r21*y + r22*z + t2),
			R: p.R, G: p.G, B: p.B,
		}
	}
	return dst
}

// State is a frame as a saved session keeps it (JSON).
type State struct {
	Fixed bool `json:"fixed"`
	// BaseToCam is base_T_cam(t0), FirstCamToWorld world_T_cam(t0)
	BaseToCam       geom.Mat4 `json:"base_T_cam0"`
	FirstCamToWorld geom.Mat4 `json:"world_T_cam0"`
	Scale           float64   `json:"scale"`
	ScaleKnown      bool      `json:"scale_known"`
}

// State is the frame's state, for a saved session.
func (f *Frame) State() State {
	f.mu.Lock()
	defer f.mu.Unlock()
	return State{Fixed: f.fixed, BaseToCam: f.baseToCam, FirstCamToWorld: f.first, Scale: f.scale, ScaleKnown: f.scaleKnown}
}

// Restore sets the frame from a saved state, checking it.
func (f *Frame) Restore(st State) error {
	if _, _, err := geom.Decompose(st.BaseToCam); err != nil {
		return fmt.Errorf("mapframe: saved base_T_cam0: %w", err)
	}
	if _, _, err := geom.Decompose(st.FirstCamToWorld); err != nil {
		return fmt.Errorf("mapframe: saved world_T_cam0: %w", err)
	}
	if !(st.Scale > 0) || math.IsInf(st.Scale, 0) {
		return fmt.Errorf("mapframe: saved scale: %w, not %g", ErrBadScale, st.Scale)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fixed, f.baseToCam, f.scale, f.scaleKnown = st.Fixed, st.BaseToCam, st.Scale, st.ScaleKnown
	f.first, f.firstInv = st.FirstCamToWorld, geom.InvertRigid(st.FirstCamToWorld)
	return nil
}
