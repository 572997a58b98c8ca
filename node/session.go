package node

import (
	"context"
	"errors"
	"fmt"
	"image"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/bluenviron/goroslib/v2"
	"github.com/bluenviron/goroslib/v2/pkg/msgs/diagnostic_msgs"
	"github.com/bluenviron/goroslib/v2/pkg/msgs/geometry_msgs"
	"github.com/bluenviron/goroslib/v2/pkg/msgs/nav_msgs"
	"github.com/bluenviron/goroslib/v2/pkg/msgs/sensor_msgs"
	"github.com/bluenviron/goroslib/v2/pkg/msgs/std_msgs"
	"github.com/bluenviron/goroslib/v2/pkg/msgs/std_srvs"
	"github.com/bluenviron/goroslib/v2/pkg/msgs/tf2_msgs"

	"github.com/lingbotmap/lingbotmap/engine"
	"github.com/lingbotmap/lingbotmap/engine/mapio"
	"github.com/lingbotmap/lingbotmap/msgs"
)

// session is everything registered with one master: after a master restart
// the node throws it away and builds a new one.
type session struct {
	gn     *goroslib.Node
	ctx    context.Context // ends when the session closes, releasing blocked callbacks
	cancel context.CancelFunc

	pose, path, odom, cloud, mapPub, depth, tf, tfStatic, diag *goroslib.Publisher

	subs []*goroslib.Subscriber
	srvs []*goroslib.ServiceProvider

	staticSent atomic.Bool // base → camera sent on /tf_static
}

func (s *session) close() {
	s.closeEndpoints()
	s.gn.Close()
}

// closeEndpoints stops the session's work and closes what it registered on
// gn, but not gn itself.
func (s *session) closeEndpoints() {
	s.cancel()
	for _, sub := range s.subs {
		sub.Close()
	}
	for _, sp := range s.srvs {
		sp.Close()
	}
	for _, p := range []*goroslib.Publisher{s.pose, s.path, s.odom, s.cloud, s.mapPub, s.depth, s.tf, s.tfStatic, s.diag} {
		if p != nil {
			p.Close()
		}
	}
}

// attach registers publishers, subscribers and services on gn. On error the
// caller still owns gn.
func (n *Node) attach(gn *goroslib.Node) (*session, error) {
	ctx, cancel := context.WithCancel(context.Background())
	s := &session{gn: gn, ctx: ctx, cancel: cancel}
	fail := func(what string, err error) (*session, error) {
		s.closeEndpoints()
		return nil, fmt.Errorf("node: %s: %w", what, err)
	}
	pub := func(dst **goroslib.Publisher, name string, msg any, latch bool) error {
		p, err := goroslib.NewPublisher(goroslib.PublisherConf{Node: gn, Topic: n.topic(name), Msg: msg, Latch: latch})
		if err != nil {
			return fmt.Errorf("publisher %s: %w", n.topic(name), err)
		}
		*dst = p
		return nil
	}
	for _, p := range []struct {
		dst   **goroslib.Publisher
		name  string
		msg   any
		latch bool
	}{
		{&s.pose, "~pose", &geometry_msgs.PoseStamped{}, false},
		{&s.path, "~path", &nav_msgs.Path{}, true},
		{&s.odom, "~odom", &nav_msgs.Odometry{}, false},
		{&s.cloud, "~cloud", &sensor_msgs.PointCloud2{}, false},
		{&s.mapPub, "~map", &sensor_msgs.PointCloud2{}, true},
		{&s.depth, "~depth", &sensor_msgs.Image{}, false},
		{&s.tf, "/tf", &tf2_msgs.TFMessage{}, false},
		{&s.tfStatic, "/tf_static", &tf2_msgs.TFMessage{}, true},
		{&s.diag, "/diagnostics", &diagnostic_msgs.DiagnosticArray{}, false},
	} {
		if err := pub(p.dst, p.name, p.msg, p.latch); err != nil {
			return fail("registering publishers", err)
		}
	}

	sub := func(topic string, cb any) error {
		sb, err := goroslib.NewSubscriber(goroslib.SubscriberConf{Node: gn, Topic: topic, Callback: cb})
		if err != nil {
			return fmt.Errorf("subscriber %s: %w", topic, err)
		}
		s.subs = append(s.subs, sb)
		return nil
	}
	if n.cfg.ImageTransport != "compressed" {
		if err := sub(n.topic("image"), func(m *sensor_msgs.Image) {
			img, err := msgs.DecodeImage(m)
			n.onInput(ctx, img, err, m.Header)
		}); err != nil {
			return fail("subscribing", err)
		}
	}
	if n.cfg.ImageTransport != "raw" {
		if err := sub(n.compressedTopic(), func(m *sensor_msgs.CompressedImage) {
			img, err := msgs.DecodeCompressed(m)
			n.onInput(ctx, img, err, m.Header)
		}); err != nil {
			return fail("subscribing", err)
		}
	}
	if n.cfg.UseCameraInfo {
		if err := sub(n.topic("camera_info"), n.onCameraInfo); err != nil {
			return fail("subscribing", err)
		}
	}

	srv := func(name string, cb func() (string, error)) error {
		sp, err := goroslib.NewServiceProvider(goroslib.ServiceProviderConf{
			Node: gn,
			Name: n.topic(name),
			Srv:  &std_srvs.Trigger{},
			Callback: func(*std_srvs.TriggerReq) (*std_srvs.TriggerRes, bool) {
				msg, err := cb()
				if err != nil {
					n.log.Warn("service failed", "service", n.topic(name), "err", err)
					return &std_srvs.TriggerRes{Success: false, Message: err.Error()}, true
				}
				return &std_srvs.TriggerRes{Success: true, Message: msg}, true
			},
		})
		if err != nil {
			return fmt.Errorf("service %s: %w", n.topic(name), err)
		}
		s.srvs = append(s.srvs, sp)
		return nil
	}
	for _, sv := range []struct {
		name string
		cb   func() (string, error)
	}{
		{"~reset", func() (string, error) { return "map reset", n.reset() }},
		{"~pause", func() (string, error) { n.paused.Store(true); return "paused: incoming images are ignored", nil }},
		{"~resume", func() (string, error) { n.paused.Store(false); return "resumed", nil }},
		{"~save_map", func() (string, error) { return n.saveMap(gn) }},
	} {
		if err := srv(sv.name, sv.cb); err != nil {
			return fail("offering services", err)
		}
	}

	return s, nil
}

// onInput takes a decoded image (or the reason it could not be decoded) into the queue.
func (n *Node) onInput(ctx context.Context, img *image.RGBA, err error, h std_msgs.Header) {
	n.stats.received.Add(1)
	if err != nil {
		kind := "corrupt"
		var de *msgs.DecodeError
		if errors.As(err, &de) {
			kind = de.Kind
		}
		n.skip(kind, err)
		return
	}
	if n.paused.Load() {
		n.stats.pausedFrames.Add(1)
		return
	}
	w, hgt := img.Bounds().Dx(), img.Bounds().Dy()
	n.mu.Lock()
	if n.size == [2]int{} {
		n.size = [2]int{w, hgt}
	}
	start := n.size
	n.mu.Unlock()
	if start != [2]int{w, hgt} {
		n.skip("size_change", fmt.Errorf("image is %d×%d but this map started at %d×%d; call ~reset to start a new map at the new size", w, hgt, start[0], start[1]))
		return
	}
	qf := queuedFrame{
		frame:    engine.Frame{Seq: n.nextSeq.Add(1) - 1, Stamp: h.Stamp, Image: img},
		frameID:  h.FrameId,
		received: time.Now(),
	}
	if err := n.queue.Push(ctx, qf); err != nil {
		n.stats.droppedOnClose.Add(1)
	}
}

// skip counts a rejected input and reports the first of each kind.
func (n *Node) skip(kind string, err error) {
	if n.stats.skip(kind, err) {
		n.log.Warn("skipping input images of this kind (reported once; counted in /diagnostics)", "kind", kind, "reason", err)
	}
}

func (n *Node) onCameraInfo(m *sensor_msgs.CameraInfo) {
	fx, fy, cx, cy, w, h, err := msgs.CameraInfoK(m)
	if err != nil {
		n.skip("camera_info", err)
		return
	}
	n.stats.setCameraInfo(fmt.Sprintf("fx=%.2f fy=%.2f cx=%.2f cy=%.2f %dx%d", fx, fy, cx, cy, w, h))
}

// saveMap writes map.ply and trajectory.tum into the directory named by the
// ~save_dir parameter (set it with rosparam), or the save_dir setting.
func (n *Node) saveMap(gn *goroslib.Node) (string, error) {
	dir := n.cfg.SaveDir
	params := rosParams{gn, n.ros}
	name := params.ParamName("save_dir")
	if set, err := params.IsSet("save_dir"); err == nil && set {
		d, err := params.String("save_dir")
		if err != nil {
			return "", fmt.Errorf("parameter %s must be a string: %w", name, err)
		}
		dir = d
	}
	if dir == "" {
		return "", fmt.Errorf("no directory: set the parameter %s", name)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("creating %s: %w", dir, err)
	}
	n.mu.Lock()
	pts := n.grid.Points()
	traj := make([]mapio.StampedPose, len(n.path))
	for i, p := range n.path {
		traj[i] = mapio.PoseFromMatrix(float64(p.stamp.UnixNano())/1e9, p.c2w)
	}
	n.mu.Unlock()
	plyPath, tumPath := filepath.Join(dir, "map.ply"), filepath.Join(dir, "trajectory.tum")
	if err := writeFileAtomic(plyPath, func(f *os.File) error {
		return mapio.WritePLY(f, pts, "lingbotmap map, frame "+n.cfg.MapFrame, fmt.Sprintf("voxel %g m, confidence > %g", n.cfg.MapVoxel, n.cfg.ConfThreshold))
	}); err != nil {
		return "", err
	}
	if err := writeFileAtomic(tumPath, func(f *os.File) error { return mapio.WriteTUM(f, traj) }); err != nil {
		return "", err
	}
	msg := fmt.Sprintf("wrote %d points to %s and %d poses to %s", len(pts), plyPath, len(traj), tumPath)
	n.log.Info("map saved", "ply", plyPath, "points", len(pts), "tum", tumPath, "poses", len(traj))
	return msg, nil
}

// writeFileAtomic writes through a temporary file so a reader never sees half a file.
func writeFileAtomic(path string, write func(*os.File) error) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	defer os.Remove(f.Name())
	if err := write(f); err != nil {
		f.Close()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}
