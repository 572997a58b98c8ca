package ros1

import (
	"context"
	"encoding/binary"
	"image"
	"io"
	"log/slog"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bluenviron/goroslib/v2"
	"github.com/bluenviron/goroslib/v2/pkg/apimaster"
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
	"github.com/lingbotmap/lingbotmap/msgs"
	"github.com/lingbotmap/lingbotmap/node"
	"github.com/lingbotmap/lingbotmap/node/ros1/rostest"
)

// recorder collects what the node publishes, as a real subscriber sees it.
type recorder struct {
	mu     sync.Mutex
	poses  []*geometry_msgs.PoseStamped
	odoms  []*nav_msgs.Odometry
	clouds []*sensor_msgs.PointCloud2
	depths []*sensor_msgs.Image
	tfs    []*tf2_msgs.TFMessage
	static *tf2_msgs.TFMessage
	path   *nav_msgs.Path
	mapMsg *sensor_msgs.PointCloud2
	diag   *diagnostic_msgs.DiagnosticArray
	// warning is the message of the last WARN status seen.
	warning string
}

func (r *recorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.poses)
}

// subscribe attaches the recorder through a fresh goroslib node.
func (r *recorder) subscribe(t *testing.T, master, prefix string) *goroslib.Node {
	t.Helper()
	gn, err := goroslib.NewNode(goroslib.NodeConf{Name: "lbm_listener", MasterAddress: master, Host: "127.0.0.1",
		LogDestinations: goroslib.LogDestinationCallback})
	if err != nil {
		t.Fatal(err)
	}
	add := func(topic string, cb any) {
		s, err := goroslib.NewSubscriber(goroslib.SubscriberConf{Node: gn, Topic: topic, Callback: cb, QueueSize: 256})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Close)
	}
	lock := func(f func()) { r.mu.Lock(); f(); r.mu.Unlock() }
	add(prefix+"/pose", func(m *geometry_msgs.PoseStamped) { lock(func() { r.poses = append(r.poses, m) }) })
	add(prefix+"/odom", func(m *nav_msgs.Odometry) { lock(func() { r.odoms = append(r.odoms, m) }) })
	add(prefix+"/cloud", func(m *sensor_msgs.PointCloud2) { lock(func() { r.clouds = append(r.clouds, m) }) })
	add(prefix+"/depth", func(m *sensor_msgs.Image) { lock(func() { r.depths = append(r.depths, m) }) })
	add("/tf", func(m *tf2_msgs.TFMessage) { lock(func() { r.tfs = append(r.tfs, m) }) })
	add("/tf_static", func(m *tf2_msgs.TFMessage) { lock(func() { r.static = m }) })
	add(prefix+"/path", func(m *nav_msgs.Path) { lock(func() { r.path = m }) })
	add(prefix+"/map", func(m *sensor_msgs.PointCloud2) { lock(func() { r.mapMsg = m }) })
	add("/diagnostics", func(m *diagnostic_msgs.DiagnosticArray) {
		lock(func() {
			r.diag = m
			if len(m.Status) > 0 && m.Status[0].Level == diagnostic_msgs.DiagnosticStatus_WARN {
				r.warning = m.Status[0].Message
			}
		})
	})
	return gn
}

func waitFor(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(timeout); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
	}
}

// waitConnected waits until node self (asked through gn) has live connections
// with peer on every topic; ask the publishing side, which names its peers.
func waitConnected(t *testing.T, gn *goroslib.Node, self, peer string, topics ...string) {
	t.Helper()
	waitFor(t, self+" to connect with "+peer+" on "+strings.Join(topics, " "), 10*time.Second, func() bool {
		conns, err := gn.NodeGetConns(self)
		if err != nil {
			return false
		}
		up := map[string]bool{}
		for _, c := range conns {
			if c.To == peer && c.Connected {
				up[c.Topic] = true
			}
		}
		for _, tp := range topics {
			if !up[tp] {
				return false
			}
		}
		return true
	})
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

// TestNodeAgainstRealMaster runs the node in-process against a private
// rosmaster with a replay of the golden images_kf1 case, plays it a bag of
// the 16 real courthouse frames (plus bad input) with rosbag play, and checks
// every output a real subscriber receives against the reference numbers;
// then the services (through rosservice and rosparam) and a master restart.
func TestNodeAgainstRealMaster(t *testing.T) {
	master := rostest.StartMaster(t)
	frames := rostest.Frames(t, 16)
	replay, err := replay.New(goldenDir(t))
	if err != nil {
		t.Fatal(err)
	}

	cfg := node.DefaultConfig()
	cfg.QueuePolicy = "all"
	cfg.ImageTransport = "both"
	cfg.UseCameraInfo = true
	cfg.MapRate = 1000
	cfg.DiagnosticsRate = 20
	cfg.MasterCheckInterval = 0.2
	cfg.SaveDir = t.TempDir()
	// A host name, as ROS_HOSTNAME=localhost gives: the node advertises
	// it through the master relay for the whole test, master restart included.
	ros := ROSEnv{MasterAddress: master.Addr, Host: "localhost", Namespace: "/", Name: "lbm",
		Remaps: map[string]string{"/image": "/cam/image_raw"}}
	logw := io.Discard
	if testing.Verbose() {
		logw = os.Stderr
	}
	n, err := newNode(ros, cfg, replay, slog.New(slog.NewTextHandler(logw, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	runErr := make(chan error, 1)
	go func() { runErr <- n.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-runErr:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("Run did not return within 10 s of cancellation")
		}
	})

	rec := &recorder{}
	listener := rec.subscribe(t, master.Addr, "/lbm")
	defer listener.Close()
	master.WaitSubscribed(t, "/cam/image_raw", "/lbm", 10*time.Second)

	// rostopic echo -n 1 must see the first pose, as any ROS user would.
	echoCtx, echoCancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer echoCancel()
	echo := master.Command(echoCtx, "rostopic", "echo", "-n", "1", "/lbm/pose")
	var echoOut strings.Builder
	echo.Stdout, echo.Stderr = &echoOut, &echoOut
	if err := echo.Start(); err != nil {
		t.Fatal(err)
	}
	master.WaitSubscribed(t, "/lbm/pose", "/rostopic", 10*time.Second)

	hdr := func(i int) std_msgs.Header {
		return std_msgs.Header{Seq: uint32(i), Stamp: rostest.StampOf(i), FrameId: "camera_optical"}
	}
	// The bag: bad input first (an unknown encoding, a corrupt JPEG, a wrong
	// step), camera_info, the 16 real frames, then a frame of another size,
	// which must be skipped rather than fed to the model.
	bad := rostest.ImageMsg(frames[0], hdr(100))
	bad.Encoding = "yuv422_10bit"
	short := rostest.ImageMsg(frames[0], hdr(102))
	short.Step = 3
	t0 := rostest.StampOf(-4)
	bagMsgs := []rostest.BagMsg{
		{Topic: "/cam/image_raw", Time: t0, Msg: bad},
		{Topic: "/cam/image_raw/compressed", Time: t0, Msg: &sensor_msgs.CompressedImage{Header: hdr(101), Format: "jpeg", Data: []byte("\xff\xd8\xff\xe0 this is not a JPEG")}},
		{Topic: "/cam/image_raw", Time: t0, Msg: short},
		{Topic: "/camera_info", Time: t0, Msg: &sensor_msgs.CameraInfo{Header: hdr(0), Width: 518, Height: 294, K: [9]float64{400, 0, 259, 0, 401, 147, 0, 0, 1}}},
	}
	bagMsgs = append(bagMsgs, rostest.FrameMsgs("/cam/image_raw", frames)...)
	bagMsgs = append(bagMsgs, rostest.BagMsg{Topic: "/cam/image_raw", Time: rostest.StampOf(16),
		Msg: rostest.ImageMsg(image.NewRGBA(image.Rect(0, 0, 64, 48)), hdr(103))})
	bagPath := filepath.Join(t.TempDir(), "frames.bag")
	rostest.WriteBag(t, bagPath, bagMsgs)
	waitConnected(t, listener, "/lbm", "/lbm_listener", "/lbm/pose", "/lbm/odom", "/lbm/cloud", "/lbm/depth", "/tf", "/lbm/path", "/lbm/map", "/diagnostics", "/tf_static")
	master.Run(t, 60*time.Second, "rosbag", "play", "-q", "--wait-for-subscribers", bagPath)
	// Each topic has its own connection: wait for the last message of each.
	waitFor(t, "16 poses, odometry, tf, clouds and depth images, the whole path and map, and diagnostics of 16 frames", 30*time.Second, func() bool {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		return len(rec.poses) >= 16 && len(rec.odoms) >= 16 && len(rec.tfs) >= 16 && len(rec.clouds) >= 16 && len(rec.depths) >= 16 &&
			rec.path != nil && len(rec.path.Poses) >= 16 && rec.mapMsg != nil && diagValue(rec.diag, "frames_processed") == "16"
	})

	t.Run("pose", func(t *testing.T) {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		if len(rec.poses) != 16 {
			t.Fatalf("%d poses, want 16", len(rec.poses))
		}
		ext := loadGolden(t, "extrinsic")
		for i, p := range rec.poses {
			if !p.Header.Stamp.Equal(rostest.StampOf(i)) || p.Header.FrameId != "map" {
				t.Fatalf("pose %d: stamp %v frame %q, want %v map", i, p.Header.Stamp, p.Header.FrameId, rostest.StampOf(i))
			}
			q := p.Pose.Orientation
			if d := math.Abs(q.X*q.X + q.Y*q.Y + q.Z*q.Z + q.W*q.W - 1); d > 1e-9 {
				t.Fatalf("pose %d: quaternion not normalised (|q|²−1 = %g)", i, d)
			}
			// Independent check: the reference's world→camera extrinsic,
			// inverted, after taking the pose out of the z-up map frame.
			w2c := geom.InvertRigid(fromMap(replay, matrixOf(t, p.Pose)))
			for a := range 3 {
				for b := range 4 {
					if d := math.Abs(w2c[a][b] - float64(ext[12*i+4*a+b])); d > 2e-5 {
						t.Fatalf("pose %d: world→camera[%d][%d] = %g, reference %g", i, a, b, w2c[a][b], ext[12*i+4*a+b])
					}
				}
			}
			want := poseOf(t, mapOf(t, replay).CamPose(replay.Reference(i).CamToWorld))
			if p.Pose != want {
				t.Fatalf("pose %d: %+v, stream result %+v", i, p.Pose, want)
			}
		}
	})
	t.Run("odom and tf", func(t *testing.T) {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		if len(rec.odoms) != 16 || len(rec.tfs) < 16 {
			t.Fatalf("%d odometry and %d tf messages, want 16 each", len(rec.odoms), len(rec.tfs))
		}
		for i, o := range rec.odoms {
			if !o.Header.Stamp.Equal(rostest.StampOf(i)) || o.Header.FrameId != "map" || o.ChildFrameId != "camera_optical" || o.Pose.Pose != rec.poses[i].Pose {
				t.Fatalf("odometry %d: %v %q→%q %+v", i, o.Header.Stamp, o.Header.FrameId, o.ChildFrameId, o.Pose.Pose)
			}
			tr := rec.tfs[i].Transforms
			if len(tr) != 1 || tr[0].Header.FrameId != "map" || tr[0].ChildFrameId != "camera_optical" || !tr[0].Header.Stamp.Equal(rostest.StampOf(i)) {
				t.Fatalf("tf %d: %+v", i, tr)
			}
			if tr[0].Transform.Translation.X != o.Pose.Pose.Position.X || tr[0].Transform.Rotation != o.Pose.Pose.Orientation {
				t.Fatalf("tf %d disagrees with the pose", i)
			}
		}
	})
	t.Run("cloud", func(t *testing.T) {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		if len(rec.clouds) != 16 {
			t.Fatalf("%d clouds, want one per keyframe (16)", len(rec.clouds))
		}
		frame := mapOf(t, replay)
		for i, c := range rec.clouds {
			if !c.Header.Stamp.Equal(rostest.StampOf(i)) || c.Header.FrameId != "map" {
				t.Fatalf("cloud %d: stamp %v frame %q", i, c.Header.Stamp, c.Header.FrameId)
			}
			got, err := msgs.ParsePointCloud2(c)
			if err != nil {
				t.Fatalf("cloud %d: %v", i, err)
			}
			r := replay.Reference(i)
			want := 0
			for p := range r.Width * r.Height {
				if r.Conf[p] > 1.5 {
					want++
				}
			}
			if len(got) != want || want == 0 {
				t.Fatalf("cloud %d: %d points, %d pixels have conf > 1.5", i, len(got), want)
			}
			// Each point is the unprojection of its pixel, recomputed here.
			k := 0
			for v := range r.Height {
				for u := range r.Width {
					p := v*r.Width + u
					if !(r.Conf[p] > 1.5) {
						continue
					}
					w := geom.Unproject(u, v, float64(r.Depth[p]), r.Intrinsics, r.CamToWorld)
					// in the z-up map frame (REP 103/105)
					m := frame.Points(nil, []geom.Point{{X: float32(w[0]), Y: float32(w[1]), Z: float32(w[2])}})[0]
					x := [3]float32{m.X, m.Y, m.Z}
					g := got[k]
					if g.X != x[0] || g.Y != x[1] || g.Z != x[2] || g.R != r.RGB[3*p] || g.G != r.RGB[3*p+1] || g.B != r.RGB[3*p+2] {
						t.Fatalf("cloud %d point %d (pixel %d,%d): %+v, want %v", i, k, u, v, g, x)
					}
					k++
				}
			}
		}
	})
	t.Run("depth", func(t *testing.T) {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		if len(rec.depths) != 16 {
			t.Fatalf("%d depth images, want 16", len(rec.depths))
		}
		for i, d := range rec.depths {
			r := replay.Reference(i)
			if d.Encoding != "32FC1" || int(d.Width) != r.Width || int(d.Height) != r.Height || d.Header.FrameId != "camera_optical" || !d.Header.Stamp.Equal(rostest.StampOf(i)) {
				t.Fatalf("depth %d: %s %dx%d %q %v", i, d.Encoding, d.Width, d.Height, d.Header.FrameId, d.Header.Stamp)
			}
			for p, want := range r.Depth {
				if got := math.Float32frombits(binary.LittleEndian.Uint32(d.Data[4*p:])); got != want {
					t.Fatalf("depth %d pixel %d = %g, want %g", i, p, got, want)
				}
			}
		}
	})
	t.Run("path and map", func(t *testing.T) {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		if rec.path == nil || len(rec.path.Poses) != 16 || rec.path.Header.FrameId != "map" {
			t.Fatalf("path: %+v", rec.path)
		}
		for i, p := range rec.path.Poses {
			if !p.Header.Stamp.Equal(rostest.StampOf(i)) || p.Pose != rec.poses[i].Pose {
				t.Fatalf("path pose %d differs from the published pose", i)
			}
		}
		if rec.mapMsg == nil || rec.mapMsg.Header.FrameId != "map" || rec.mapMsg.Width == 0 {
			t.Fatalf("map: %+v", rec.mapMsg)
		}
	})
	t.Run("bad input is skipped with a diagnostic", func(t *testing.T) {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		for key, want := range map[string]string{
			"skipped_encoding": "1", "skipped_corrupt": "1", "skipped_step": "1", "skipped_size_change": "1",
			"frames_processed": "16", "kv_frame_count": "16", "queue_policy": "all",
		} {
			if got := diagValue(rec.diag, key); got != want {
				t.Errorf("diagnostics %s = %q, want %q", key, got, want)
			}
		}
		if ms, err := strconv.ParseFloat(diagValue(rec.diag, "model_ms_mean"), 64); err != nil || ms < 0 {
			t.Errorf("diagnostics model_ms_mean = %q", diagValue(rec.diag, "model_ms_mean"))
		}
		if ci := diagValue(rec.diag, "camera_info"); !strings.Contains(ci, "fx=400.00") || !strings.Contains(ci, "518x294") {
			t.Errorf("diagnostics camera_info = %q", ci)
		}
		if !strings.Contains(rec.warning, "skipping input images") || !strings.Contains(rec.warning, "corrupt") {
			t.Errorf("no WARN status naming the skipped input; last warning %q", rec.warning)
		}
		if r := diagValue(rec.diag, "skip_reason_encoding"); !strings.Contains(r, "yuv422_10bit") {
			t.Errorf("the encoding skip reason %q does not name the encoding", r)
		}
	})
	t.Run("rostopic echo", func(t *testing.T) {
		if err := echo.Wait(); err != nil {
			t.Fatalf("rostopic echo: %v\n%s", err, echoOut.String())
		}
		out := echoOut.String()
		if !strings.Contains(out, "frame_id: \"map\"") || !strings.Contains(out, "secs: 1700000000") || !strings.Contains(out, "orientation:") {
			t.Fatalf("rostopic echo -n 1 /lbm/pose printed:\n%s", out)
		}
	})

	t.Run("save_map", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "saved")
		master.Run(t, 20*time.Second, "rosparam", "set", "/lbm/save_dir", dir)
		out := master.Run(t, 20*time.Second, "rosservice", "call", "/lbm/save_map")
		if !strings.Contains(out, "success: True") {
			t.Fatalf("rosservice call /lbm/save_map:\n%s", out)
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
		rec.mu.Lock()
		mapPts, err := msgs.ParsePointCloud2(rec.mapMsg)
		rec.mu.Unlock()
		if err != nil {
			t.Fatal(err)
		}
		if len(pts) != len(mapPts) {
			t.Fatalf("map.ply has %d points, the last ~map %d", len(pts), len(mapPts))
		}
		for i, p := range pts {
			m := mapPts[i]
			if p.X != m.X || p.Y != m.Y || p.Z != m.Z || p.R != m.R || p.G != m.G || p.B != m.B {
				t.Fatalf("map.ply point %d %+v, ~map %+v", i, p, m)
			}
		}
		tum, err := os.ReadFile(filepath.Join(dir, "trajectory.tum"))
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSpace(string(tum)), "\n")
		if len(lines) != 17 {
			t.Fatalf("trajectory.tum has %d lines, want a header and 16 poses", len(lines))
		}
		fields := strings.Fields(lines[1])
		ts, _ := strconv.ParseFloat(fields[0], 64)
		x, _ := strconv.ParseFloat(fields[1], 64)
		rec.mu.Lock()
		defer rec.mu.Unlock()
		if math.Abs(ts-1700000000) > 1e-6 || math.Abs(x-rec.poses[0].Pose.Position.X) > 1e-6 {
			t.Fatalf("trajectory.tum first pose %q, published %+v", lines[1], rec.poses[0].Pose)
		}
	})

	t.Run("pause, resume, reset", func(t *testing.T) {
		if out := master.Run(t, 20*time.Second, "rosservice", "call", "/lbm/pause"); !strings.Contains(out, "success: True") {
			t.Fatalf("pause: %s", out)
		}
		imgPub := camera(t, master, "lbm_camera", "/cam/image_raw", "/lbm")
		imgPub.Write(rostest.ImageMsg(frames[0], hdr(200)))
		waitFor(t, "the paused frame to be counted", 10*time.Second, func() bool {
			rec.mu.Lock()
			defer rec.mu.Unlock()
			return diagValue(rec.diag, "frames_paused") == "1"
		})
		if rec.count() != 16 {
			t.Fatalf("a frame was processed while paused")
		}
		master.Run(t, 20*time.Second, "rosservice", "call", "/lbm/resume")
		if out := master.Run(t, 20*time.Second, "rosservice", "call", "/lbm/reset"); !strings.Contains(out, "success: True") {
			t.Fatalf("reset: %s", out)
		}
		waitFor(t, "an empty path after reset", 10*time.Second, func() bool {
			rec.mu.Lock()
			defer rec.mu.Unlock()
			return rec.path != nil && len(rec.path.Poses) == 0
		})
	})

	t.Run("master restart", func(t *testing.T) {
		master.Stop()
		time.Sleep(500 * time.Millisecond)
		master.Start()
		waitFor(t, "the node to re-register with the new master", 20*time.Second, func() bool { return master.Knows("/lbm") })
		uri, err := apimaster.NewClient(master.Addr, "/asker", &http.Client{Timeout: 5 * time.Second}).LookupNode("/lbm")
		if err != nil || !strings.HasPrefix(uri, "http://localhost:") {
			t.Fatalf("after the restart the node registered as %q (%v), want its host name localhost", uri, err)
		}
		listener.Close()
		rec2 := &recorder{}
		l2 := rec2.subscribe(t, master.Addr, "/lbm")
		defer l2.Close()
		p2 := camera(t, master, "lbm_camera2", "/cam/image_raw", "/lbm")
		waitConnected(t, l2, "/lbm", "/lbm_listener", "/lbm/pose")
		for i := range 4 {
			p2.Write(rostest.ImageMsg(frames[i], hdr(300+i)))
		}
		waitFor(t, "poses after the master restart", 20*time.Second, func() bool { return rec2.count() >= 4 })
		rec2.mu.Lock()
		defer rec2.mu.Unlock()
		// After the reset the replay starts again at reference frame 0.
		for i, p := range rec2.poses {
			if !p.Header.Stamp.Equal(rostest.StampOf(300+i)) || p.Pose != poseOf(t, mapOf(t, replay).CamPose(replay.Reference(i).CamToWorld)) {
				t.Fatalf("pose %d after restart: %v %+v", i, p.Header.Stamp, p.Pose)
			}
		}
	})
}

// TestNodeBaseFrame checks REP 105 with a base frame: /tf and ~odom give
// map → base_link, /tf_static gives base_link → camera, and together they
// compose to the camera pose.
func TestNodeBaseFrame(t *testing.T) {
	master := rostest.StartMaster(t)
	frames := rostest.Frames(t, 3)
	replay, err := replay.New(goldenDir(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg := node.DefaultConfig()
	cfg.QueuePolicy = "all"
	cfg.BaseFrame = "base_link"
	cfg.BaseToCamera = "0.1 0 0.2 -0.5 0.5 -0.5 0.5"
	r := startRig(t, master, "lbm", cfg, replay, nil, "/lbm/pose", "/lbm/odom", "/tf", "/tf_static")
	rec, imgPub := r.rec, r.camera
	for i, f := range frames {
		imgPub.Write(rostest.ImageMsg(f, std_msgs.Header{Stamp: rostest.StampOf(i), FrameId: "cam_optical"}))
	}
	// Each topic has its own connection: wait for all three of each.
	waitFor(t, "3 poses, transforms and odometry messages, and the static transform", 20*time.Second, func() bool {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		return len(rec.poses) >= 3 && len(rec.tfs) >= 3 && len(rec.odoms) >= 3 && rec.static != nil
	})
	rec.mu.Lock()
	defer rec.mu.Unlock()
	st := rec.static.Transforms
	if len(st) != 1 || st[0].Header.FrameId != "base_link" || st[0].ChildFrameId != "cam_optical" {
		t.Fatalf("/tf_static: %+v", st)
	}
	baseToCam := matrixOf(t, geometry_msgs.Pose{
		Position:    geometry_msgs.Point{X: st[0].Transform.Translation.X, Y: st[0].Transform.Translation.Y, Z: st[0].Transform.Translation.Z},
		Orientation: st[0].Transform.Rotation,
	})
	for i := range 3 {
		tr := rec.tfs[i].Transforms[0]
		if tr.Header.FrameId != "map" || tr.ChildFrameId != "base_link" || rec.odoms[i].ChildFrameId != "base_link" {
			t.Fatalf("frame %d: tf %s→%s, odometry child %s; want map→base_link", i, tr.Header.FrameId, tr.ChildFrameId, rec.odoms[i].ChildFrameId)
		}
		mapToBase := matrixOf(t, geometry_msgs.Pose{
			Position:    geometry_msgs.Point{X: tr.Transform.Translation.X, Y: tr.Transform.Translation.Y, Z: tr.Transform.Translation.Z},
			Orientation: tr.Transform.Rotation,
		})
		// the map frame is the base's at the first frame (REP 105):
		// map_T_cam = base_T_cam · world_T_cam, map_T_base(t0) = identity
		frame := mapframe.New()
		frame.FixAt(baseToCam, replay.Reference(0).CamToWorld)
		got, want := mul4(mapToBase, baseToCam), frame.CamPose(replay.Reference(i).CamToWorld)
		if i == 0 {
			for a := range 3 {
				for b := range 4 {
					id := 0.0
					if a == b {
						id = 1
					}
					if math.Abs(mapToBase[a][b]-id) > 1e-6 {
						t.Fatalf("map → base_link at the first frame is not the identity: %v", mapToBase)
					}
				}
			}
		}
		for a := range 3 {
			for b := range 4 {
				if d := math.Abs(got[a][b] - want[a][b]); d > 1e-6 {
					t.Fatalf("frame %d: map→base→camera [%d][%d] = %g, camera pose %g", i, a, b, got[a][b], want[a][b])
				}
			}
		}
	}
}

// slowStream makes the replay take a while per frame, like a real model
// slower than the camera.
type slowStream struct {
	*replay.Stream
	delay time.Duration
}

func (s slowStream) Push(ctx context.Context, f engine.Frame) ([]engine.Result, error) {
	time.Sleep(s.delay)
	return s.Stream.Push(ctx, f)
}

// rig is an in-process node on a private master, a recorder subscribed to its
// outputs and a camera publishing on /image.
type rig struct {
	rec      *recorder
	listener *goroslib.Node
	camera   *goroslib.Publisher
}

// startRig runs a node named name with cfg and stream, and connects the
// recorder and the camera to it; listened are the topics to wait for.
func startRig(t *testing.T, master *rostest.Master, name string, cfg node.Config, stream engine.Stream, log *slog.Logger, listened ...string) *rig {
	t.Helper()
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	ros := ROSEnv{MasterAddress: master.Addr, Host: "127.0.0.1", Namespace: "/", Name: name, Remaps: map[string]string{}}
	n, err := newNode(ros, cfg, stream, log)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	runErr := make(chan error, 1)
	go func() { runErr <- n.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-runErr; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	r := &rig{rec: &recorder{}}
	r.listener = r.rec.subscribe(t, master.Addr, "/"+name)
	t.Cleanup(r.listener.Close)
	master.WaitSubscribed(t, "/image", "/"+name, 10*time.Second)
	r.camera = camera(t, master, name+"_camera", "/image", "/"+name)
	waitConnected(t, r.listener, "/"+name, "/lbm_listener", listened...)
	return r
}

// camera publishes sensor_msgs/Image on topic from its own node, connected to
// the node under test (peer) before it returns; both close with the test.
func camera(t *testing.T, master *rostest.Master, name, topic, peer string) *goroslib.Publisher {
	t.Helper()
	gn, err := goroslib.NewNode(goroslib.NodeConf{Name: name, MasterAddress: master.Addr, Host: "127.0.0.1",
		LogDestinations: goroslib.LogDestinationCallback})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(gn.Close)
	pub, err := goroslib.NewPublisher(goroslib.PublisherConf{Node: gn, Topic: topic, Msg: &sensor_msgs.Image{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pub.Close)
	waitConnected(t, gn, "/"+name, peer, topic)
	return pub
}

// TestNodeLatestPolicyDropsAndCounts floods a slow engine: with policy
// latest the node drops waiting frames, counts them in /diagnostics, and
// every received frame is either processed or counted as dropped.
func TestNodeLatestPolicyDropsAndCounts(t *testing.T) {
	master := rostest.StartMaster(t)
	frames := rostest.Frames(t, 16)
	replay, err := replay.New(goldenDir(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg := node.DefaultConfig()
	cfg.QueuePolicy, cfg.QueueSize, cfg.DiagnosticsRate = "latest", 1, 20
	r := startRig(t, master, "lbm", cfg, slowStream{replay, 60 * time.Millisecond}, nil, "/lbm/pose", "/diagnostics")
	rec, imgPub := r.rec, r.camera
	for i, f := range frames {
		imgPub.Write(rostest.ImageMsg(f, std_msgs.Header{Stamp: rostest.StampOf(i), FrameId: "cam"}))
		time.Sleep(5 * time.Millisecond) // a 200 Hz camera
	}
	var processed, dropped int
	waitFor(t, "every frame to be processed or dropped", 20*time.Second, func() bool {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		processed, _ = strconv.Atoi(diagValue(rec.diag, "frames_processed"))
		dropped, _ = strconv.Atoi(diagValue(rec.diag, "frames_dropped"))
		received := diagValue(rec.diag, "frames_received")
		// The engine buffers the first 3 frames, so processed counts results.
		engineIn, _ := strconv.Atoi(diagValue(rec.diag, "engine_frames_in"))
		return received == "16" && engineIn+dropped == 16 && diagValue(rec.diag, "queue_length") == "0" && processed == engineIn
	})
	if dropped == 0 {
		t.Fatalf("a 200 Hz camera into a 60 ms engine dropped nothing (processed %d)", processed)
	}
	if rec.warning != "dropping frames: the model is slower than the camera" {
		t.Errorf("no WARN status for the drops; last warning %q", rec.warning)
	}
	// The stamps of the published poses are increasing: drops keep the newest.
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for i := 1; i < len(rec.poses); i++ {
		if !rec.poses[i].Header.Stamp.After(rec.poses[i-1].Header.Stamp) {
			t.Fatalf("pose stamps not increasing at %d", i)
		}
	}
	if !rec.poses[len(rec.poses)-1].Header.Stamp.Equal(rostest.StampOf(15)) {
		t.Errorf("the newest frame was not processed: last pose at %v", rec.poses[len(rec.poses)-1].Header.Stamp)
	}
}

// poseOf is the pose message of a camera→world matrix, as the node builds it.
// mapOf is the node's map frame for a replay without a base frame or a
// metric scale: the first camera's body frame (REP 103/105); fromMap
// takes a pose out of it, back into the engine's world.
func mapOf(t *testing.T, r *replay.Stream) *mapframe.Frame {
	t.Helper()
	f := mapframe.New()
	if _, err := f.FixAt(mapframe.OpticalToBody(), r.Reference(0).CamToWorld); err != nil {
		t.Fatal(err)
	}
	return f
}

func fromMap(r *replay.Stream, m geom.Mat4) geom.Mat4 {
	return geom.Mul4(r.Reference(0).CamToWorld, geom.Mul4(geom.InvertRigid(mapframe.OpticalToBody()), m))
}

func poseOf(t *testing.T, m geom.Mat4) geometry_msgs.Pose {
	t.Helper()
	tr, q, err := geom.Decompose(m)
	if err != nil {
		t.Fatal(err)
	}
	return msgs.Pose(tr, q)
}

// matrixOf reads a pose message back into a camera→world matrix.
func matrixOf(t *testing.T, p geometry_msgs.Pose) geom.Mat4 {
	t.Helper()
	m, err := geom.Compose(msgs.PoseParts(p))
	if err != nil {
		t.Fatal(err)
	}
	return m
}
