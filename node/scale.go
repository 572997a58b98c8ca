package node

import (
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/bluenviron/goroslib/v2/pkg/msgs/diagnostic_msgs"
	"github.com/bluenviron/goroslib/v2/pkg/msgs/nav_msgs"
	"github.com/bluenviron/goroslib/v2/pkg/msgs/sensor_msgs"

	"github.com/lingbotmap/lingbotmap/engine"
	"github.com/lingbotmap/lingbotmap/engine/geom"
	"github.com/lingbotmap/lingbotmap/engine/mapframe"
	"github.com/lingbotmap/lingbotmap/engine/scale"
	"github.com/lingbotmap/lingbotmap/msgs"
	"github.com/lingbotmap/lingbotmap/node/tf"
)

// The node's metric scale (settings: the scale section). The scale
// component (engine/scale.Tracker) is fed in frame order with each
// keyframe's result and the robot's data at the image's stamp: the camera's
// pose in the odometry frame (from /tf, or a nav_msgs/Odometry topic), or
// the aligned depth image nearest the stamp. It sets the scale on the map
// frame once known, so that every output from then on is in metres;
// /diagnostics reports its state. Missing, late or unreadable data leaves
// the keyframe out of the estimate with the reason: nothing is dropped.

// depthKeep bounds the depth images held for matching: a few frames of
// a camera's rate, more than the model lags behind.
const depthKeep = 16

type nodeScale struct {
	tr    *scale.Tracker
	set   scale.Settings
	frame *mapframe.Frame
	tol   time.Duration
	// lookup gives target_T_source at a stamp from the robot's TF tree (the
	// node's listener); odometry from a topic goes into odomBuf of its own
	// (it gives the base no parent in the robot's tree), and the camera's
	// pose on the base comes from the tree or baseToCam (base_to_camera)
	lookup    func(target, source string, at time.Time, tol time.Duration) (geom.Mat4, error)
	baseToCam *geom.Mat4
	odomBuf   *tf.Buffer

	mu        sync.Mutex
	odomFrame string // the Odometry topic's header frame
	odomChild string // and its child frame (the base)
	odomTF    string // odom_frame, looked up in /tf
	depths    []stampedDepth
	refused   int64 // depth or odometry messages refused (encoding, NaN)
	lastIssue string
}

type stampedDepth struct {
	stamp time.Time
	img   scale.Image
}

// newNodeScale makes the component, or nil when the source is none.
func newNodeScale(set scale.Settings, frame *mapframe.Frame) (*nodeScale, error) {
	if set.Source == scale.SourceNone {
		return nil, nil
	}
	tr, err := scale.NewTracker(set, frame)
	if err != nil {
		return nil, err
	}
	s := &nodeScale{tr: tr, set: set, frame: frame, tol: time.Duration(set.StampTolerance * float64(time.Second))}
	if set.Source == scale.SourceOdometry && set.OdomTopic != "" {
		s.odomBuf = tf.NewBuffer(0)
	}
	return s, nil
}

// subscribe opens the topics the source reads: the odometry topic or the
// depth topic (/tf is the node's listener's).
func (s *nodeScale) subscribe(tr Transport) ([]io.Closer, error) {
	switch {
	case s.set.Source == scale.SourceOdometry && s.set.OdomTopic != "":
		name := tr.Resolve(s.set.OdomTopic)
		c, err := tr.Subscribe(TopicSpec{Name: name, Type: &nav_msgs.Odometry{}, Role: RoleSensor}, func(msg any, err error) {
			m, _ := msg.(*nav_msgs.Odometry)
			if err == nil && m == nil {
				err = fmt.Errorf("unexpected message %T", msg)
			}
			if err != nil {
				s.refuse(fmt.Sprintf("odometry on %s: %v", name, err))
				return
			}
			s.takeOdometry(m)
		})
		if err != nil {
			return nil, fmt.Errorf("node: subscribing to %s: %w", name, err)
		}
		return []io.Closer{c}, nil
	case s.set.Source == scale.SourceDepth:
		if s.set.DepthTopic == "" {
			return nil, errors.New("node: scale.source depth needs scale.depth_topic")
		}
		name := tr.Resolve(s.set.DepthTopic)
		c, err := tr.Subscribe(TopicSpec{Name: name, Type: &sensor_msgs.Image{}, Role: RoleSensor}, func(msg any, err error) {
			m, _ := msg.(*sensor_msgs.Image)
			if err == nil && m == nil {
				err = fmt.Errorf("unexpected message %T", msg)
			}
			if err != nil {
				s.refuse(fmt.Sprintf("depth on %s: %v", name, err))
				return
			}
			s.takeDepth(m)
		})
		if err != nil {
			return nil, fmt.Errorf("node: subscribing to %s: %w", name, err)
		}
		return []io.Closer{c}, nil
	}
	return nil, nil
}

func (s *nodeScale) refuse(issue string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refused++
	s.lastIssue = issue
}

// takeOdometry keeps an Odometry message's pose as header.frame_id →
// child_frame_id.
func (s *nodeScale) takeOdometry(m *nav_msgs.Odometry) {
	p, q := m.Pose.Pose.Position, m.Pose.Pose.Orientation
	err := s.odomBuf.Set(tf.Transform{Parent: m.Header.FrameId, Child: m.ChildFrameId, Stamp: m.Header.Stamp,
		T: [3]float64{p.X, p.Y, p.Z}, Q: geom.Quat{q.X, q.Y, q.Z, q.W}}, false, "odometry")
	if err != nil {
		s.refuse(fmt.Sprintf("odometry %s → %s: %v", m.Header.FrameId, m.ChildFrameId, err))
		return
	}
	s.mu.Lock()
	s.odomFrame, s.odomChild = tf.Name(m.Header.FrameId), tf.Name(m.ChildFrameId)
	s.mu.Unlock()
}

// takeDepth decodes a depth image and keeps it for matching; another
// encoding or a broken message is refused with the reason.
func (s *nodeScale) takeDepth(m *sensor_msgs.Image) {
	w, h, d, err := msgs.DecodeDepth(m)
	if err != nil {
		s.refuse(fmt.Sprintf("depth image refused: %v", err))
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.depths = append(s.depths, stampedDepth{stamp: m.Header.Stamp, img: scale.Image{W: w, H: h, Depth: d}})
	if n := len(s.depths) - depthKeep; n > 0 {
		s.depths = append(s.depths[:0], s.depths[n:]...)
	}
}

// depthAt is the held depth image nearest stamp within the tolerance.
func (s *nodeScale) depthAt(stamp time.Time) (scale.Image, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	best := scale.Nearest(s.depths, func(d stampedDepth) time.Time { return d.stamp }, stamp, s.tol)
	if best < 0 {
		return scale.Image{}, false
	}
	return s.depths[best].img, true
}

// add feeds a result in frame order: camFrame is its camera's frame, size
// the colour image's.
func (s *nodeScale) add(r *engine.Result, camFrame string, size [2]int) {
	if r.Kind == engine.NonKeyframe {
		return
	}
	switch s.set.Source {
	case scale.SourceOdometry:
		m, frame, err := s.odomCamera(camFrame, r.Stamp)
		if err != nil {
			s.tr.Skip(fmt.Sprintf("no odometry %s → %s at the image's stamp (tolerance %g s): %v", frame, camFrame, s.set.StampTolerance, err))
			return
		}
		s.tr.AddOdometry(geom.TranslationOf(r.CamToWorld), geom.TranslationOf(m))
	case scale.SourceDepth:
		img, ok := s.depthAt(r.Stamp)
		if !ok {
			s.tr.Skip(fmt.Sprintf("no depth image on %s within %g s of the image", s.set.DepthTopic, s.set.StampTolerance))
			return
		}
		w, h := size[0], size[1]
		if w <= 0 || h <= 0 {
			w, h = img.W, img.H
		}
		s.tr.AddDepth(r.Depth, r.Width, r.Height, img, scale.PixelMapFor(w, h, r.Width, r.Height, img.W, img.H))
	case scale.SourceCameraHeight:
		// the floor among the frame's points, in the z-up map frame at
		// scale 1
		pts, cam := scale.FloorPoints(r.Depth, r.Width, r.Height, 4, r.Intrinsics, r.CamToWorld, s.frame.MapToWorld())
		s.tr.AddGround(pts, cam)
	}
}

// diagnostics are the scale's /diagnostics values (s may be nil: no source).
func (s *nodeScale) diagnostics(kv func(string, any) diagnostic_msgs.KeyValue) []diagnostic_msgs.KeyValue {
	if s == nil {
		return []diagnostic_msgs.KeyValue{kv("scale_state", scale.StateUnscaled), kv("scale_source", scale.SourceNone),
			kv("scale_reason", "no scale source configured (scale.source none): outputs are in model units")}
	}
	st := s.tr.Status()
	s.mu.Lock()
	refused, issue := s.refused, s.lastIssue
	s.mu.Unlock()
	if issue == "" {
		issue = st.Issue
	}
	return []diagnostic_msgs.KeyValue{
		kv("scale_state", st.State),
		kv("scale_source", st.Source),
		kv("scale", st.Scale),
		kv("scale_confidence", fmt.Sprintf("%.3f", st.Confidence)),
		kv("scale_reason", st.Reason),
		kv("scale_keyframes", st.Keyframes),
		kv("scale_skipped", st.Skipped),
		kv("scale_jumps", st.Jumps),
		kv("scale_messages_refused", refused),
		kv("scale_issue", issue),
	}
}

// odomCamera is the camera's pose in the odometry frame at stamp: from the
// robot's tree (odom_frame → the camera), or the Odometry topic's base pose
// composed with the camera's pose on the base.
func (s *nodeScale) odomCamera(camFrame string, stamp time.Time) (geom.Mat4, string, error) {
	if s.odomBuf == nil {
		m, err := s.lookup(s.odomTF, camFrame, stamp, s.tol)
		return m, s.odomTF, err
	}
	s.mu.Lock()
	frame, base := s.odomFrame, s.odomChild
	s.mu.Unlock()
	if frame == "" {
		return geom.Mat4{}, s.set.OdomTopic, fmt.Errorf("no odometry on %s yet", s.set.OdomTopic)
	}
	odomBase, err := s.odomBuf.Lookup(frame, base, stamp, s.tol)
	if err != nil {
		return geom.Mat4{}, frame, err
	}
	baseCam, err := s.lookup(base, camFrame, stamp, s.tol)
	if err != nil {
		if s.baseToCam == nil {
			return geom.Mat4{}, frame, fmt.Errorf("the camera's pose on %s: %w (and no base_to_camera)", base, err)
		}
		baseCam = *s.baseToCam
	}
	return geom.Mul4(odomBase, baseCam), frame, nil
}

// unscaled says why the map is not in metres yet while a scale source is
// configured (nil: no source, or the scale is known).
func (s *nodeScale) unscaled() error {
	if s == nil {
		return nil
	}
	if st := s.tr.Status(); st.State != scale.StateKnown {
		return fmt.Errorf("the metric scale is not known yet (scale.source %s: %s)", st.Source, st.Reason)
	}
	return nil
}
