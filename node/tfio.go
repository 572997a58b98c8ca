package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/bluenviron/goroslib/v2/pkg/msgs/geometry_msgs"
	"github.com/bluenviron/goroslib/v2/pkg/msgs/std_msgs"
	"github.com/bluenviron/goroslib/v2/pkg/msgs/tf2_msgs"

	"github.com/lingbotmap/lingbotmap/engine/geom"
	"github.com/lingbotmap/lingbotmap/engine/mapframe"
	"github.com/lingbotmap/lingbotmap/msgs"
	"github.com/lingbotmap/lingbotmap/node/tf"
)

// The TF listener and the node's TF outputs (REP 105). The node keeps the
// robot's tree from /tf and /tf_static in a tf.Buffer; its own transforms,
// which come back on the same topics, are recognised and left out, so the
// buffer holds only what other nodes publish and its Parent says whether a
// frame already has a parent from elsewhere.

// tfListener is the node's view of the robot's TF tree.
type tfListener struct {
	buf *tf.Buffer
	// updated is signalled (without blocking) on every transform taken
	updated chan struct{}

	mu sync.Mutex
	// own are the transforms the node published lately, by parent, child
	// and stamp: a received one that matches is the node's own
	own      map[ownKey]struct{}
	ownOrder []ownKey
	// seen are the frames named by transforms taken
	seen map[string]bool
}

type ownKey struct {
	parent, child string
	stamp         int64
}

// ownKeep bounds the node's own transforms remembered: those of the last
// few seconds of frames, more than a transport holds back.
const ownKeep = 1024

func newTFListener() *tfListener {
	return &tfListener{buf: tf.NewBuffer(0), updated: make(chan struct{}, 1), own: map[ownKey]struct{}{}, seen: map[string]bool{}}
}

func (l *tfListener) saw(frames ...string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, f := range frames {
		l.seen[tf.Name(f)] = true
	}
}

func (l *tfListener) seenFrame(f string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.seen[tf.Name(f)]
}

func keyOf(parent, child string, stamp time.Time) ownKey {
	return ownKey{tf.Name(parent), tf.Name(child), stamp.UnixNano()}
}

// sent remembers a transform the node is about to publish.
func (l *tfListener) sent(parent, child string, stamp time.Time) {
	k := keyOf(parent, child, stamp)
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.own[k]; ok {
		return
	}
	l.own[k] = struct{}{}
	l.ownOrder = append(l.ownOrder, k)
	if len(l.ownOrder) > ownKeep {
		delete(l.own, l.ownOrder[0])
		l.ownOrder = append(l.ownOrder[:0], l.ownOrder[1:]...)
	}
}

func (l *tfListener) isOwn(parent, child string, stamp time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, ok := l.own[keyOf(parent, child, stamp)]
	return ok
}

// listenTF subscribes to /tf and /tf_static (ROS 2: tf2_ros's QoS; ROS 1:
// /tf_static latched) into the node's buffer.
func (n *Node) listenTF() ([]io.Closer, error) {
	var subs []io.Closer
	for _, s := range []struct {
		name   string
		role   Role
		static bool
	}{{"/tf", RoleTF, false}, {"/tf_static", RoleTFStatic, true}} {
		name, static := n.tr.Resolve(s.name), s.static
		c, err := n.tr.Subscribe(TopicSpec{Name: name, Type: &tf2_msgs.TFMessage{}, Role: s.role}, func(msg any, err error) {
			m, _ := msg.(*tf2_msgs.TFMessage)
			if err == nil && m == nil {
				err = fmt.Errorf("unexpected message %T on %s", msg, name)
			}
			if err != nil {
				n.tfIssue("unreadable", err)
				return
			}
			n.takeTF(m, static)
		})
		if err != nil {
			closeAll(subs)
			return nil, fmt.Errorf("node: subscribing to %s: %w", name, err)
		}
		subs = append(subs, c)
	}
	return subs, nil
}

// takeTF puts a TF message's transforms into the buffer, leaving out the
// node's own; a transform refused (a second parent, NaN) is counted.
func (n *Node) takeTF(m *tf2_msgs.TFMessage, static bool) {
	l := n.tfl
	took := false
	for _, ts := range m.Transforms {
		if l.isOwn(ts.Header.FrameId, ts.ChildFrameId, ts.Header.Stamp) {
			continue
		}
		tr := tf.Transform{
			Parent: ts.Header.FrameId, Child: ts.ChildFrameId, Stamp: ts.Header.Stamp,
			T: [3]float64{ts.Transform.Translation.X, ts.Transform.Translation.Y, ts.Transform.Translation.Z},
			Q: geom.Quat{ts.Transform.Rotation.X, ts.Transform.Rotation.Y, ts.Transform.Rotation.Z, ts.Transform.Rotation.W},
		}
		if err := l.buf.Set(tr, static, "another node"); err != nil {
			switch {
			case errors.Is(err, tf.ErrBadTransform):
				n.tfIssue("bad_transform", err)
			case errors.Is(err, tf.ErrSecondParent):
				n.tfIssue("conflicting_parent", err)
			default:
				n.tfIssue("refused", err)
			}
			continue
		}
		l.saw(tr.Parent, tr.Child)
		took = true
	}
	if took {
		select {
		case l.updated <- struct{}{}:
		default:
		}
	}
}

// tfIssue counts a problem with the TF tree in /diagnostics (tf_KIND) and
// logs the first of each kind.
func (n *Node) tfIssue(kind string, err error) {
	if n.stats.tfIssue(kind, err) {
		n.log.Warn("a TF problem (reported once per kind; counted in /diagnostics)", "kind", "tf_"+kind, "err", err)
	}
}

// tfTolerance is the tf_tolerance setting.
func (n *Node) tfTolerance() time.Duration {
	return time.Duration(n.cfg.TFTolerance * float64(time.Second))
}

// baseToCamera is the camera's pose in base_frame for an image (base_T_cam):
// from the robot's tree at the image's stamp, else the last one it gave,
// else base_to_camera, else the optical-to-body rotation at the base's
// origin (a diagnostic says so). fromConfig says base_to_camera gave it.
// Without base_frame it is the optical-to-body rotation: the camera is the
// base.
func (n *Node) baseToCamera(camFrame string, stamp time.Time) (m geom.Mat4, fromConfig bool) {
	if n.cfg.BaseFrame == "" {
		return mapframe.OpticalToBody(), false
	}
	m, err := n.tfl.buf.Lookup(n.cfg.BaseFrame, camFrame, stamp, n.tfTolerance())
	if err == nil {
		n.lastBaseCam = &m
		return m, false
	}
	if n.lastBaseCam != nil {
		if !errors.Is(err, tf.ErrNoPath) {
			n.tfIssue("base_camera_stale", fmt.Errorf("%s → %s at the image's stamp: %w; using the last one", n.cfg.BaseFrame, camFrame, err))
		}
		return *n.lastBaseCam, false
	}
	if n.baseToCam != nil {
		return *n.baseToCam, true
	}
	n.tfIssue("base_camera_missing", fmt.Errorf("no %s → %s transform on /tf or /tf_static and no base_to_camera: taking the camera at the base's origin, looking along its x axis: %w", n.cfg.BaseFrame, camFrame, err))
	return mapframe.OpticalToBody(), false
}

// waitBaseCamera waits, before the camera is subscribed, up to tf_wait
// for the robot's tree to connect base_frame and camera_frame (without
// camera_frame, whose name the first image brings, for any transform
// naming base_frame), so that no frame waits for it, and says when it
// never comes. With base_to_camera set it does not wait: the first frame
// takes the tree's transform if it has come, else the fallback.
func (n *Node) waitBaseCamera(ctx context.Context) {
	// with base_to_camera set there is a fallback: the node starts at once
	if n.cfg.BaseFrame == "" || n.baseToCam != nil {
		return
	}
	ready := func() error {
		if n.cfg.CameraFrame != "" {
			_, err := n.tfl.buf.Lookup(n.cfg.BaseFrame, n.cfg.CameraFrame, time.Time{}, 0)
			return err
		}
		if n.tfl.seenFrame(n.cfg.BaseFrame) {
			return nil
		}
		return fmt.Errorf("%w: no transform names %s", tf.ErrNoPath, n.cfg.BaseFrame)
	}
	deadline := time.NewTimer(time.Duration(n.cfg.TFWait * float64(time.Second)))
	defer deadline.Stop()
	for {
		err := ready()
		if err == nil {
			return
		}
		select {
		case <-n.tfl.updated:
			continue
		case <-ctx.Done():
			return
		case <-deadline.C:
		}
		n.log.Warn("no base → camera transform on /tf or /tf_static yet; until one comes the node takes the camera at the base's origin, looking along its x axis (set base_to_camera)",
			"base_frame", n.cfg.BaseFrame, "camera_frame", n.cfg.CameraFrame, "waited_s", n.cfg.TFWait, "err", err)
		return
	}
}

// publishTF sends parent → child unless child has a parent from elsewhere
// (REP 105: one parent per frame), which is counted instead.
func (n *Node) publishTF(p Publisher, parent, child string, stamp time.Time, m geom.Mat4) bool {
	if other, _, ok := n.tfl.buf.Parent(child); ok {
		n.tfIssue("second_parent_withheld", fmt.Errorf("%s already has the parent %s from another node: not publishing %s → %s (set odom_frame for a robot with odometry, or switch this output off)", child, other, parent, child))
		return false
	}
	t, q, err := geom.Decompose(m)
	if err != nil {
		n.tfIssue("bad_output", fmt.Errorf("%s → %s: %w", parent, child, err))
		return false
	}
	n.tfl.sent(parent, child, stamp)
	n.write(p, &tf2_msgs.TFMessage{Transforms: []geometry_msgs.TransformStamped{{
		Header:       std_msgs.Header{Stamp: stamp, FrameId: parent},
		ChildFrameId: child,
		Transform:    msgs.Transform(t, q),
	}}})
	return true
}

// frameComments describe the saved map's frame in map.ply's header.
func (n *Node) frameComments() []string {
	s, known := n.frame.Scale()
	unit := "model units (metric scale unknown)"
	if known {
		unit = fmt.Sprintf("metres (metric scale %g m per model unit)", s)
	}
	return []string{
		"lingbotmap map, frame " + n.cfg.MapFrame + " (REP 103/105: z up, x forward at the first frame; the base's origin at the first frame)",
		"units " + unit,
	}
}
