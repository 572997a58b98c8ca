package node_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bluenviron/goroslib/v2/pkg/msgs/diagnostic_msgs"
	"github.com/bluenviron/goroslib/v2/pkg/msgs/geometry_msgs"
	"github.com/bluenviron/goroslib/v2/pkg/msgs/nav_msgs"
	"github.com/bluenviron/goroslib/v2/pkg/msgs/sensor_msgs"
	"github.com/bluenviron/goroslib/v2/pkg/msgs/std_msgs"
	"github.com/bluenviron/goroslib/v2/pkg/msgs/tf2_msgs"

	"github.com/lingbotmap/lingbotmap/engine"
	"github.com/lingbotmap/lingbotmap/engine/geom"
	"github.com/lingbotmap/lingbotmap/engine/golden/replay"
	"github.com/lingbotmap/lingbotmap/engine/mapframe"
	"github.com/lingbotmap/lingbotmap/engine/mapio"
	"github.com/lingbotmap/lingbotmap/internal/shared/sharedtest"
	"github.com/lingbotmap/lingbotmap/internal/syncbuf"
	"github.com/lingbotmap/lingbotmap/msgs"
	"github.com/lingbotmap/lingbotmap/node"
	"github.com/lingbotmap/lingbotmap/node/nodetest"
)

func goldenReplay(t *testing.T) *replay.Stream {
	t.Helper()
	s, err := replay.New(sharedtest.Path(t, "golden", "images_kf1"))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// core is a node running on the test double.
type core struct {
	tr   *nodetest.Transport
	logs *syncbuf.Buffer
	stop func() error // cancels Run and returns its error
}

// startCore runs a node named /lbm with cfg and stream on a fresh test
// transport and waits until it subscribes to wait.
func startCore(t *testing.T, cfg node.Config, stream engine.Stream, tr *nodetest.Transport, wait string) *core {
	t.Helper()
	if tr == nil {
		tr = nodetest.New("/lbm", nil)
	}
	logs := &syncbuf.Buffer{}
	n, err := node.New(node.Options{Config: cfg, Transport: tr, Log: slog.New(slog.NewTextHandler(logs, nil)),
		NewStream: func(context.Context, node.Config) (engine.Stream, error) { return stream, nil }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	runErr := make(chan error, 1)
	go func() { runErr <- n.Run(ctx) }()
	var once sync.Once
	var err2 error
	c := &core{tr: tr, logs: logs, stop: func() error {
		once.Do(func() {
			cancel()
			select {
			case err2 = <-runErr:
			case <-time.After(10 * time.Second):
				err2 = errors.New("Run did not return within 10 s of cancellation")
			}
		})
		return err2
	}}
	t.Cleanup(func() {
		if err := c.stop(); err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	waitFor(t, "the node to subscribe to "+wait, 5*time.Second, func() bool { return tr.Subscribed(wait) })
	return c
}

func waitFor(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(timeout); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
	}
}

// runNode runs n until stop or the test's end, and returns once it has
// subscribed to /image; stop cancels Run and returns its error (the same
// error to every call).
func runNode(t *testing.T, n *node.Node, tr *nodetest.Transport) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	runErr := make(chan error, 1)
	go func() { runErr <- n.Run(ctx) }()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() {
			cancel()
			err = <-runErr
		})
		return err
	}
	t.Cleanup(func() { stop() })
	waitFor(t, "the node to subscribe", 20*time.Second, func() bool { return tr.Subscribed("/image") })
	return stop
}

var stamp0 = time.Unix(1700000000, 0)

func stampOf(i int) time.Time { return stamp0.Add(time.Duration(i) * 100 * time.Millisecond) }

// frame is a w×h rgb8 image; the replay answers with reference numbers
// whatever the pixels.
func frame(i, w, h int, frameID string) *sensor_msgs.Image {
	data := make([]byte, 3*w*h)
	for p := range data {
		data[p] = byte(i + p)
	}
	return &sensor_msgs.Image{Header: std_msgs.Header{Seq: uint32(i), Stamp: stampOf(i), FrameId: frameID},
		Height: uint32(h), Width: uint32(w), Encoding: "rgb8", Step: uint32(3 * w), Data: data}
}

func diag(t *testing.T, tr *nodetest.Transport) *diagnostic_msgs.DiagnosticArray {
	t.Helper()
	d, _ := tr.Last("/diagnostics").(*diagnostic_msgs.DiagnosticArray)
	return d
}

func diagValue(d *diagnostic_msgs.DiagnosticArray, key string) string {
	if d == nil || len(d.Status) == 0 {
		return ""
	}
	for _, kv := range d.Status[0].Values {
		if kv.Key == key {
			return kv.Value
		}
	}
	return ""
}

// waitDiag waits for a /diagnostics message with every key at its value.
func waitDiag(t *testing.T, tr *nodetest.Transport, want map[string]string) *diagnostic_msgs.DiagnosticArray {
	t.Helper()
	var d *diagnostic_msgs.DiagnosticArray
	waitFor(t, fmt.Sprint("diagnostics ", want), 10*time.Second, func() bool {
		d = diag(t, tr)
		for k, v := range want {
			if diagValue(d, k) != v {
				return false
			}
		}
		return true
	})
	return d
}

// fastConfig publishes maps and diagnostics often and processes every frame.
func fastConfig(t *testing.T) node.Config {
	cfg := node.DefaultConfig()
	cfg.QueuePolicy = "all"
	cfg.MapRate = 1000
	cfg.DiagnosticsRate = 50
	cfg.SaveDir = t.TempDir()
	return cfg
}

// Frames in, every output out: each value is checked against the replayed
// reference result of its frame.
func TestCoreFramesToOutputs(t *testing.T) {
	ref := goldenReplay(t)
	w, h := ref.Size()
	c := startCore(t, fastConfig(t), goldenReplay(t), nil, "/image")
	tr := c.tr
	for _, s := range []struct {
		name string
		role node.Role
	}{
		{"/lbm/pose", node.RoleOutput}, {"/lbm/path", node.RoleLatched}, {"/lbm/odom", node.RoleOutput},
		{"/lbm/cloud", node.RoleOutput}, {"/lbm/map", node.RoleLatched}, {"/lbm/depth", node.RoleOutput},
		{"/tf", node.RoleTF}, {"/tf_static", node.RoleTFStatic}, {"/diagnostics", node.RoleOutput},
	} {
		if spec, ok := tr.Spec(s.name); !ok || spec.Role != s.role {
			t.Errorf("%s: advertised %v with role %v, want role %v", s.name, ok, spec.Role, s.role)
		}
	}
	if spec, ok := tr.SubscriptionSpec("/image"); !ok || spec.Role != node.RoleSensor {
		t.Errorf("/image subscribed with role %v, want the sensor role", spec.Role)
	}
	if tr.Subscribed("/image/compressed") || tr.Subscribed("/camera_info") {
		t.Error("image_transport raw without camera_info subscribed to more than /image")
	}

	const n = 16
	for i := range n {
		if err := tr.Deliver("/image", frame(i, w, h, "cam_optical"), nil); err != nil {
			t.Fatal(err)
		}
	}
	// A result's messages go out pose first, path last.
	waitFor(t, "16 poses, depth images and a path of 16", 10*time.Second, func() bool {
		p, _ := tr.Last("/lbm/path").(*nav_msgs.Path)
		return len(tr.Messages("/lbm/depth")) == n && p != nil && len(p.Poses) == n
	})
	waitDiag(t, tr, map[string]string{"frames_processed": "16", "frames_received": "16", "kv_frame_count": "16", "queue_policy": "all"})

	poses, odoms, tfs, depths := tr.Messages("/lbm/pose"), tr.Messages("/lbm/odom"), tr.Messages("/tf"), tr.Messages("/lbm/depth")
	if len(odoms) != n || len(tfs) != n || len(depths) != n {
		t.Fatalf("%d odometry, %d tf, %d depth messages, want %d each", len(odoms), len(tfs), len(depths), n)
	}
	keyframes := 0
	for i := range n {
		r := ref.Reference(i)
		// the map frame is z-up (REP 103/105): the reference's optical-frame
		// poses seen from the first camera's body frame
		want := poseOf(t, mapOf(t, ref).CamPose(r.CamToWorld))
		p := poses[i].(*geometry_msgs.PoseStamped)
		if !p.Header.Stamp.Equal(stampOf(i)) || p.Header.FrameId != "map" || p.Pose != want {
			t.Fatalf("pose %d: %v %q %+v, want %v map %+v", i, p.Header.Stamp, p.Header.FrameId, p.Pose, stampOf(i), want)
		}
		o := odoms[i].(*nav_msgs.Odometry)
		if !o.Header.Stamp.Equal(stampOf(i)) || o.Header.FrameId != "map" || o.ChildFrameId != "cam_optical" || o.Pose.Pose != want {
			t.Fatalf("odometry %d: %v %q→%q %+v", i, o.Header.Stamp, o.Header.FrameId, o.ChildFrameId, o.Pose.Pose)
		}
		tf := tfs[i].(*tf2_msgs.TFMessage).Transforms
		if len(tf) != 1 || tf[0].Header.FrameId != "map" || tf[0].ChildFrameId != "cam_optical" ||
			tf[0].Transform.Rotation != want.Orientation || tf[0].Transform.Translation.Z != want.Position.Z {
			t.Fatalf("tf %d: %+v", i, tf)
		}
		d := depths[i].(*sensor_msgs.Image)
		if d.Encoding != "32FC1" || int(d.Width) != r.Width || int(d.Height) != r.Height || d.Header.FrameId != "cam_optical" || !d.Header.Stamp.Equal(stampOf(i)) {
			t.Fatalf("depth %d: %s %dx%d %q", i, d.Encoding, d.Width, d.Height, d.Header.FrameId)
		}
		for p, v := range r.Depth {
			if got := math.Float32frombits(binary.LittleEndian.Uint32(d.Data[4*p:])); got != v {
				t.Fatalf("depth %d pixel %d = %g, want %g", i, p, got, v)
			}
		}
		if r.Kind != engine.NonKeyframe {
			keyframes++
		}
	}
	clouds := tr.Messages("/lbm/cloud")
	if len(clouds) != keyframes || keyframes == 0 {
		t.Fatalf("%d clouds for %d keyframes", len(clouds), keyframes)
	}
	for i, m := range clouds {
		pts, err := msgs.ParsePointCloud2(m.(*sensor_msgs.PointCloud2))
		if err != nil {
			t.Fatal(err)
		}
		r := ref.Reference(i)
		want, err := geom.ConfidentPoints(nil, r.DepthFrame(), geom.PointFilter{ConfThreshold: 1.5, Stride: 1})
		if err != nil {
			t.Fatal(err)
		}
		if len(want) == 0 {
			t.Fatalf("reference frame %d has no confident points", i)
		}
		// in the z-up map frame (REP 103/105)
		mapOf(t, ref).Points(want, want)
		first, last := want[0], want[len(want)-1]
		if len(pts) != len(want) || len(pts) == 0 ||
			pts[0] != (msgs.PointXYZRGB{X: first.X, Y: first.Y, Z: first.Z, R: first.R, G: first.G, B: first.B}) ||
			pts[len(pts)-1] != (msgs.PointXYZRGB{X: last.X, Y: last.Y, Z: last.Z, R: last.R, G: last.G, B: last.B}) {
			t.Fatalf("cloud %d: %d points, want %d", i, len(pts), len(want))
		}
	}
	path := tr.Last("/lbm/path").(*nav_msgs.Path)
	if len(path.Poses) != n || path.Header.FrameId != "map" || !path.Header.Stamp.Equal(stampOf(n-1)) {
		t.Fatalf("path: %d poses, frame %q, stamp %v", len(path.Poses), path.Header.FrameId, path.Header.Stamp)
	}
	for i, p := range path.Poses {
		if p.Pose != poses[i].(*geometry_msgs.PoseStamped).Pose {
			t.Fatalf("path pose %d differs from the published pose", i)
		}
	}
	waitFor(t, "a map with every keyframe", 5*time.Second, func() bool {
		m, _ := tr.Last("/lbm/map").(*sensor_msgs.PointCloud2)
		return m != nil && m.Header.Stamp.Equal(stampOf(n-1))
	})
	if m := tr.Last("/lbm/map").(*sensor_msgs.PointCloud2); m.Header.FrameId != "map" || m.Width == 0 {
		t.Fatalf("map: frame %q, %d points", m.Header.FrameId, m.Width)
	}
	if len(tr.Messages("/tf_static")) != 0 {
		t.Error("/tf_static was sent without a base frame")
	}
	if d := diag(t, tr); d.Status[0].Name != "/lbm: engine" || d.Status[0].Level != diagnostic_msgs.DiagnosticStatus_OK {
		t.Errorf("diagnostics status %q level %d", d.Status[0].Name, d.Status[0].Level)
	}
}

// Bad input of each kind is counted, named in /diagnostics, and logged once
// per kind however often it comes; a transport's own decoding failure counts
// under its DecodeError kind.
func TestCoreCountsDecodeErrorsOncePerKind(t *testing.T) {
	cfg := fastConfig(t)
	cfg.ImageTransport = "both"
	cfg.UseCameraInfo = true
	ref := goldenReplay(t)
	w, h := ref.Size()
	tr := nodetest.New("/robot/lbm", map[string]string{"/robot/image": "/cam/image_raw"})
	c := startCore(t, cfg, ref, tr, "/cam/image_raw")
	if !tr.Subscribed("/cam/image_raw/compressed") || !tr.Subscribed("/robot/camera_info") {
		t.Fatal("the compressed topic does not follow the image remap, or camera_info is missing")
	}
	bad := frame(0, w, h, "cam")
	bad.Encoding = "yuv422_10bit"
	short := frame(1, w, h, "cam")
	short.Step = 3
	wire := &msgs.DecodeError{Kind: "cdr", Err: errors.New("truncated at byte 12")}
	for range 2 {
		for _, d := range []struct {
			topic string
			msg   any
			err   error
		}{
			{"/cam/image_raw", bad, nil},
			{"/cam/image_raw", short, nil},
			{"/cam/image_raw/compressed", &sensor_msgs.CompressedImage{Format: "jpeg", Data: []byte("\xff\xd8\xff\xe0 not a JPEG")}, nil},
			{"/cam/image_raw", nil, wire},
			{"/robot/camera_info", &sensor_msgs.CameraInfo{Width: 518, Height: 294}, nil},
		} {
			if err := tr.Deliver(d.topic, d.msg, d.err); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tr.Deliver("/robot/camera_info", &sensor_msgs.CameraInfo{Width: 518, Height: 294, K: [9]float64{400, 0, 259, 0, 401, 147, 0, 0, 1}}, nil); err != nil {
		t.Fatal(err)
	}
	d := waitDiag(t, tr, map[string]string{"skipped_encoding": "2", "skipped_step": "2", "skipped_corrupt": "2",
		"skipped_cdr": "2", "skipped_camera_info": "2", "skipped_total": "10", "frames_received": "8"})
	if !strings.Contains(diagValue(d, "skip_reason_encoding"), "yuv422_10bit") || !strings.Contains(diagValue(d, "skip_reason_cdr"), "truncated") {
		t.Errorf("skip reasons do not say why: encoding %q, cdr %q", diagValue(d, "skip_reason_encoding"), diagValue(d, "skip_reason_cdr"))
	}
	if ci := diagValue(d, "camera_info"); !strings.Contains(ci, "fx=400.00") || !strings.Contains(ci, "518x294") {
		t.Errorf("camera_info = %q", ci)
	}
	if got := strings.Count(c.logs.String(), "skipping input images"); got != 5 {
		t.Errorf("%d skip reports in the log for 5 kinds, want one each:\n%s", got, c.logs.String())
	}
	warned := false
	for _, m := range tr.Messages("/diagnostics") {
		s := m.(*diagnostic_msgs.DiagnosticArray).Status[0]
		if s.Level == diagnostic_msgs.DiagnosticStatus_WARN && strings.Contains(s.Message, "skipping input images") {
			warned = true
		}
	}
	if !warned {
		t.Error("no WARN status while inputs were skipped")
	}
	if len(tr.Messages("/robot/lbm/pose")) != 0 {
		t.Error("bad input produced a pose")
	}
}

// 16-bit images are used, reduced to 8 bits, and the reduction is reported
// once per encoding, not per frame.
func TestCoreReports16BitInputOnce(t *testing.T) {
	cfg := fastConfig(t)
	ref := goldenReplay(t)
	w, h := ref.Size()
	tr := nodetest.New("/lbm", nil)
	c := startCore(t, cfg, ref, tr, "/image")
	for i := range 3 {
		m := frame(i, w, h, "cam")
		m.Encoding, m.Step, m.Data = "mono16", uint32(2*w), make([]byte, 2*w*h)
		if err := tr.Deliver("/image", m, nil); err != nil {
			t.Fatal(err)
		}
	}
	// decoding runs on the pipeline's workers: wait until the engine has the frames
	waitDiag(t, tr, map[string]string{"frames_received": "3", "engine_frames_in": "3", "skipped_total": "0"})
	if got := strings.Count(c.logs.String(), "converted with a loss"); got != 1 {
		t.Errorf("%d reports of the 16-bit reduction for 3 mono16 frames, want 1:\n%s", got, c.logs.String())
	}
	if !strings.Contains(c.logs.String(), "mono16") {
		t.Errorf("the report does not name the encoding:\n%s", c.logs.String())
	}
}

// The services: pause ignores frames, resume takes them again, save_map
// writes what was published into the directory of the save_dir parameter,
// reset clears the path and the map.
func TestCoreServices(t *testing.T) {
	ref := goldenReplay(t)
	w, h := ref.Size()
	cfg := fastConfig(t)
	c := startCore(t, cfg, ref, nil, "/image")
	tr := c.tr
	if msg, err := tr.Call("/lbm/pause"); err != nil || !strings.Contains(msg, "paused") {
		t.Fatalf("pause: %q %v", msg, err)
	}
	if err := tr.Deliver("/image", frame(0, w, h, "cam"), nil); err != nil {
		t.Fatal(err)
	}
	waitDiag(t, tr, map[string]string{"frames_paused": "1", "paused": "true"})
	if _, err := tr.Call("/lbm/resume"); err != nil {
		t.Fatal(err)
	}
	for i := range 6 {
		if err := tr.Deliver("/image", frame(i, w, h, "cam"), nil); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "a path of 6 poses", 10*time.Second, func() bool {
		p, _ := tr.Last("/lbm/path").(*nav_msgs.Path)
		return p != nil && len(p.Poses) == 6
	})
	if s := tr.Messages("/lbm/pose")[0].(*geometry_msgs.PoseStamped).Header.Stamp; !s.Equal(stampOf(0)) {
		t.Fatalf("the first pose is stamped %v: the paused frame reached the engine", s)
	}
	waitFor(t, "the map of all 6 frames", 5*time.Second, func() bool {
		m, _ := tr.Last("/lbm/map").(*sensor_msgs.PointCloud2)
		return m != nil && m.Header.Stamp.Equal(stampOf(5))
	})

	// save_dir read at call time: a wrong type is an error naming it, a
	// string is where the files go.
	tr.SetParam("save_dir", 3)
	if _, err := tr.Call("/lbm/save_map"); err == nil || !strings.Contains(err.Error(), "save_dir") {
		t.Fatalf("save_map with an integer save_dir: %v", err)
	}
	dir := filepath.Join(t.TempDir(), "saved")
	tr.SetParam("save_dir", dir)
	msg, err := tr.Call("/lbm/save_map")
	if err != nil || !strings.Contains(msg, dir) {
		t.Fatalf("save_map: %q %v", msg, err)
	}
	f, err := os.Open(filepath.Join(dir, "map.ply"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	pts, _, err := mapio.ReadPLY(f)
	if err != nil {
		t.Fatal(err)
	}
	mapPts, err := msgs.ParsePointCloud2(tr.Last("/lbm/map").(*sensor_msgs.PointCloud2))
	if err != nil {
		t.Fatal(err)
	}
	if len(pts) != len(mapPts) || len(pts) == 0 || pts[0].X != mapPts[0].X || pts[len(pts)-1].B != mapPts[len(mapPts)-1].B {
		t.Fatalf("map.ply has %d points, the last ~map %d", len(pts), len(mapPts))
	}
	tum, err := os.ReadFile(filepath.Join(dir, "trajectory.tum"))
	if err != nil {
		t.Fatal(err)
	}
	if lines := strings.Split(strings.TrimSpace(string(tum)), "\n"); len(lines) != 7 || !strings.HasPrefix(lines[1], "1700000000.0") {
		t.Fatalf("trajectory.tum:\n%s", tum)
	}

	if msg, err := tr.Call("/lbm/reset"); err != nil || msg != "map reset" {
		t.Fatalf("reset: %q %v", msg, err)
	}
	if p := tr.Last("/lbm/path").(*nav_msgs.Path); len(p.Poses) != 0 {
		t.Fatalf("path after reset has %d poses", len(p.Poses))
	}
	if m := tr.Last("/lbm/map").(*sensor_msgs.PointCloud2); m.Width != 0 {
		t.Fatalf("map after reset has %d points", m.Width)
	}
	// A new map may start at another size.
	if err := tr.Deliver("/image", frame(0, w+14, h, "cam"), nil); err != nil {
		t.Fatal(err)
	}
	waitDiag(t, tr, map[string]string{"engine_frames_in": "7", "skipped_total": "0"})
}

// A shutdown request from the middleware ends Run: the frames the engine
// still buffers are flushed out as poses, and the transport is closed.
func TestCoreShutdownFlushes(t *testing.T) {
	ref := goldenReplay(t)
	w, h := ref.Size()
	cfg := fastConfig(t)
	c := startCore(t, cfg, ref, nil, "/image")
	tr := c.tr
	for i := range 2 {
		if err := tr.Deliver("/image", frame(i, w, h, "cam"), nil); err != nil {
			t.Fatal(err)
		}
	}
	waitDiag(t, tr, map[string]string{"engine_frames_in": "2"})
	if n := len(tr.Messages("/lbm/pose")); n != 0 || ref.ScaleFrames() <= 2 {
		t.Fatalf("%d poses before the %d scale frames were complete", n, ref.ScaleFrames())
	}
	tr.RequestShutdown()
	waitFor(t, "the transport to close", 10*time.Second, tr.Closed)
	if err := c.stop(); err != nil {
		t.Fatal(err)
	}
	poses := tr.Messages("/lbm/pose")
	if len(poses) != 2 {
		t.Fatalf("%d poses after shutdown, want the 2 buffered frames", len(poses))
	}
	// the wait is not silent: what the node does, before and after
	logs := c.logs.String()
	before := strings.Index(logs, "stopping: mapping the frames still in the pipeline")
	after := strings.Index(logs, "stopping: the engine is done; leaving the ROS graph")
	left := strings.Index(logs, "stopped: left the ROS graph")
	if before < 0 || after < before || left < after || !strings.Contains(logs, "in_flight=2") {
		t.Errorf("the shutdown did not say what it was doing:\n%s", logs)
	}
	for i, p := range poses {
		if p.(*geometry_msgs.PoseStamped).Pose != poseOf(t, mapOf(t, ref).CamPose(ref.Reference(i).CamToWorld)) {
			t.Fatalf("flushed pose %d differs from the reference", i)
		}
	}
}

// Parameters override the configuration by key, a bad one stops the node
// with its name, and a transport that cannot connect is an error.
func TestCoreParamsAndConnect(t *testing.T) {
	ref := goldenReplay(t)
	tr := nodetest.New("/lbm", nil)
	tr.SetParam("queue_policy", "all")
	tr.SetParam("queue_size", 7)
	tr.SetParam("base_frame", "base_link")
	tr.SetParam("base_to_camera", "0.1 0 0.2 -0.5 0.5 -0.5 0.5")
	tr.SetReconnects(3)
	cfg := fastConfig(t)
	cfg.QueuePolicy = "latest"
	c := startCore(t, cfg, ref, tr, "/image")
	w, h := ref.Size()
	for i := range 4 {
		if err := tr.Deliver("/image", frame(i, w, h, "cam"), nil); err != nil {
			t.Fatal(err)
		}
	}
	waitDiag(t, tr, map[string]string{"queue_policy": "all", "queue_capacity": "7", "master_reconnects": "3", "frames_processed": "4", "map_points_outside": "0"})
	st := tr.Messages("/tf_static")
	if len(st) != 1 {
		t.Fatalf("%d /tf_static messages, want 1", len(st))
	}
	if tf := st[0].(*tf2_msgs.TFMessage).Transforms[0]; tf.Header.FrameId != "base_link" || tf.ChildFrameId != "cam" {
		t.Fatalf("/tf_static %s→%s", tf.Header.FrameId, tf.ChildFrameId)
	}
	if tf := tr.Last("/tf").(*tf2_msgs.TFMessage).Transforms[0]; tf.ChildFrameId != "base_link" {
		t.Fatalf("/tf child %q, want base_link", tf.ChildFrameId)
	}
	if err := c.stop(); err != nil {
		t.Fatal(err)
	}

	run := func(tr *nodetest.Transport, ctx context.Context) error {
		n, err := node.New(node.Options{Config: fastConfig(t), Transport: tr, Log: slog.New(slog.NewTextHandler(&syncbuf.Buffer{}, nil)),
			NewStream: func(context.Context, node.Config) (engine.Stream, error) { return ref, nil }})
		if err != nil {
			t.Fatal(err)
		}
		return n.Run(ctx)
	}
	bad := nodetest.New("/lbm", nil)
	bad.SetParam("map_voxel", -1.0)
	if err := run(bad, context.Background()); err == nil || !strings.Contains(err.Error(), "'map_voxel'") {
		t.Errorf("a bad map_voxel parameter: %v", err)
	}
	down := nodetest.New("/lbm", nil)
	refused := errors.New("connection refused")
	down.FailConnect(refused)
	if err := run(down, context.Background()); !errors.Is(err, refused) {
		t.Errorf("a failed Connect: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := run(down, ctx); err != nil {
		t.Errorf("a failed Connect after cancellation: %v, want nil", err)
	}
}

// brokenPoses gives frame 5 a pose that is no rigid transform and frame 6
// intrinsics that cannot unproject, as a faulty model might.
type brokenPoses struct{ *replay.Stream }

func (b brokenPoses) Push(ctx context.Context, f engine.Frame) ([]engine.Result, error) {
	res, err := b.Stream.Push(ctx, f)
	for i := range res {
		switch res[i].Seq {
		case 5:
			res[i].CamToWorld[0][0] = math.NaN()
		case 6:
			res[i].Intrinsics[0] = 0
			res[i].Kind = engine.Keyframe
		}
	}
	return res, err
}

// A result the map cannot take is left out, counted and reported once; the
// stream goes on.
func TestCoreRejectsDegenerateResults(t *testing.T) {
	ref := goldenReplay(t)
	w, h := ref.Size()
	c := startCore(t, fastConfig(t), brokenPoses{goldenReplay(t)}, nil, "/image")
	tr := c.tr
	for i := range 8 {
		if err := tr.Deliver("/image", frame(i, w, h, "cam"), nil); err != nil {
			t.Fatal(err)
		}
	}
	waitDiag(t, tr, map[string]string{"engine_frames_in": "8", "results_rejected": "2", "frames_processed": "7"})
	waitFor(t, "a path of 7 poses", 10*time.Second, func() bool {
		p, _ := tr.Last("/lbm/path").(*nav_msgs.Path)
		return p != nil && len(p.Poses) == 7
	})
	for _, m := range tr.Messages("/lbm/pose") {
		p := m.(*geometry_msgs.PoseStamped)
		if p.Header.Stamp.Equal(stampOf(5)) || math.IsNaN(p.Pose.Orientation.W) {
			t.Fatalf("the degenerate pose of frame 5 was published: %+v", p)
		}
	}
	for _, m := range tr.Messages("/lbm/cloud") {
		if m.(*sensor_msgs.PointCloud2).Header.Stamp.Equal(stampOf(6)) {
			t.Fatal("frame 6, whose depth cannot be unprojected, was published as a cloud")
		}
	}
	if got := strings.Count(c.logs.String(), "cannot be mapped"); got != 1 {
		t.Errorf("%d reports of unmappable results, want 1:\n%s", got, c.logs.String())
	}
}

// mapOf is the node's map frame for a replay without a base frame or a
// metric scale: the first camera's body frame (REP 103/105).
func mapOf(t *testing.T, ref *replay.Stream) *mapframe.Frame {
	t.Helper()
	f := mapframe.New()
	if _, err := f.FixAt(mapframe.OpticalToBody(), ref.Reference(0).CamToWorld); err != nil {
		t.Fatal(err)
	}
	return f
}

// poseOf is the pose message of a camera→world matrix, as the node builds it.
func poseOf(t *testing.T, m geom.Mat4) geometry_msgs.Pose {
	t.Helper()
	tr, q, err := geom.Decompose(m)
	if err != nil {
		t.Fatal(err)
	}
	return msgs.Pose(tr, q)
}

// save_map holds every pose published before the call, although poses go
// out before their frames are mapped: while the mapping of the last frame
// is held back, its pose is out and save_map waits for it.
func TestSaveMapHoldsPublishedPoses(t *testing.T) {
	ref := goldenReplay(t)
	w, h := ref.Size()
	cfg := fastConfig(t)
	const frames = 6
	hold := make(chan struct{})
	tr := nodetest.New("/lbm", nil)
	n, err := node.New(node.Options{Config: cfg, Transport: tr, Log: slog.New(slog.DiscardHandler),
		NewStream: func(context.Context, node.Config) (engine.Stream, error) { return ref, nil },
		// frames are mapped in order: holding the one before the last
		// holds the last one's mapping, not its pose
		Observe: func(r node.FrameReport) {
			if r.Seq == frames-2 {
				<-hold
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	runErr := make(chan error, 1)
	go func() { runErr <- n.Run(ctx) }()
	released := false
	release := func() {
		if !released {
			released = true
			close(hold)
		}
	}
	defer func() {
		release()
		cancel()
		if err := <-runErr; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	waitFor(t, "the node to subscribe", 5*time.Second, func() bool { return tr.Subscribed("/image") })
	for i := range frames {
		if err := tr.Deliver("/image", frame(i, w, h, "cam"), nil); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "every pose", 10*time.Second, func() bool { return len(tr.Messages("/lbm/pose")) == frames })
	type reply struct {
		msg string
		err error
	}
	done := make(chan reply, 1)
	go func() {
		msg, err := tr.Call("/lbm/save_map")
		done <- reply{msg, err}
	}()
	select {
	case r := <-done:
		t.Fatalf("save_map answered while the last frame's mapping was held: %q %v", r.msg, r.err)
	case <-time.After(300 * time.Millisecond):
	}
	release()
	r := <-done
	if want := fmt.Sprintf("%d poses", frames); r.err != nil || !strings.Contains(r.msg, want) {
		t.Fatalf("save_map: %q %v, want %s", r.msg, r.err, want)
	}
}

// slowFlush is the golden replay with a phase 1 that never ends on its own:
// its Flush returns only when its context ends.
type slowFlush struct {
	*replay.Stream
	flushing chan struct{}
}

func (s *slowFlush) Flush(ctx context.Context) ([]engine.Result, error) {
	close(s.flushing)
	<-ctx.Done()
	return nil, ctx.Err()
}

// A second stop (Options.Abort) during the shutdown's flush gives up the
// frames still in the pipeline: the engine's call ends through its context
// and Run returns, saying so; without it the node would wait for the
// model.
func TestCoreShutdownAbort(t *testing.T) {
	ref := &slowFlush{Stream: goldenReplay(t), flushing: make(chan struct{})}
	w, h := ref.Size()
	tr := nodetest.New("/lbm", nil)
	logs := &syncbuf.Buffer{}
	abort := make(chan struct{})
	n, err := node.New(node.Options{Config: fastConfig(t), Transport: tr, Log: slog.New(slog.NewTextHandler(logs, nil)), Abort: abort,
		NewStream: func(context.Context, node.Config) (engine.Stream, error) { return ref, nil }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	runErr := make(chan error, 1)
	go func() { runErr <- n.Run(ctx) }()
	waitFor(t, "the node to subscribe", 5*time.Second, func() bool { return tr.Subscribed("/image") })
	for i := range 2 {
		if err := tr.Deliver("/image", frame(i, w, h, "cam"), nil); err != nil {
			t.Fatal(err)
		}
	}
	waitDiag(t, tr, map[string]string{"engine_frames_in": "2"})
	cancel()
	<-ref.flushing // the shutdown waits on the model
	if !strings.Contains(logs.String(), "(stop again to skip them)") {
		t.Errorf("the shutdown did not say how to cut it short:\n%s", logs.String())
	}
	close(abort)
	select {
	case err := <-runErr:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after the second stop")
	}
	if l := logs.String(); !strings.Contains(l, "stopping now: the frames still in the pipeline are not mapped") || strings.Contains(l, "finishing the frames in the pipeline") {
		t.Errorf("the abort was not said, or reported as a failure:\n%s", l)
	}
}
