//go:build ros2

package test

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"image"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lingbotmap/lingbotmap/engine"
	"github.com/lingbotmap/lingbotmap/engine/mapframe"
	"github.com/lingbotmap/lingbotmap/internal/shared"
	"github.com/lingbotmap/lingbotmap/node/ros1/rostest"
)

// The ROS 2 node's end-to-end tests: `lingbotmap node --ros=2` with the tiny
// golden model, fed and read by the independent peers of test/ros2peers
// (Cyclone DDS C with idlc types, Fast DDS, @foxglove/rtps), all inside
// netns-run.sh. Every pose is compared with the engine run in-process on the
// same frames.

// poseStampedHash is geometry_msgs/msg/PoseStamped's REP 2011 type hash
// (ros2-notes.md).
const poseStampedHash = "RIHS01_10f3786d7d40fd2b54367835614bff85d4ad3b5dab62bf8bca0cc232d73b4cd8"

// baseToCamera is the node's base_to_camera setting in the tests: a camera
// looking along base x (config/lingbotmap.yaml).
var baseToCamera = [7]float64{0, 0, 0, -0.5, 0.5, -0.5, 0.5}

// ros2NodeArgs are the --ros-args of a node named name running the golden
// weights at model width width.
func ros2NodeArgs(t *testing.T, name string, width int, extra ...string) []string {
	t.Helper()
	w, err := shared.Path("golden", "weights.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"-r", "__node:=" + name, "-r", "image:=/camera/image_raw",
		"-p", "weights:=" + w,
		"-p", fmt.Sprintf("image_width:=%d", width),
		"-p", "scale_frames:=3",
		"-p", "sliding_window:=4",
		"-p", "threads:=2",
		"-p", "queue_policy:=all",
		"-p", "diagnostics_rate:=10.0",
	}
	return append(args, extra...)
}

// engineResults runs the engine in-process on frames with the nodes' settings.
func engineResults(t *testing.T, frames []*image.RGBA, width int) []engine.Result {
	t.Helper()
	w, err := shared.Path("golden", "weights.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	cfg := engine.DefaultConfig()
	cfg.Weights, cfg.ImageWidth, cfg.ScaleFrames, cfg.SlidingWindow, cfg.Threads = w, width, 3, 4, 2
	ctx := context.Background()
	st, err := engine.New(ctx, cfg, cpuBackend, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var out []engine.Result
	for i, f := range frames {
		res, err := st.Push(ctx, engine.Frame{Seq: uint64(i), Stamp: rostest.StampOf(i), Image: f})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, res...)
	}
	res, err := st.Flush(ctx)
	if err != nil {
		t.Fatal(err)
	}
	out = append(out, res...)
	if len(out) != len(frames) {
		t.Fatalf("the engine gave %d results for %d frames", len(out), len(frames))
	}
	return out
}

// rigid is a rotation and a translation.
type rigid struct {
	r [3][3]float64
	t [3]float64
}

func quatRigid(p [3]float64, q [4]float64) rigid {
	x, y, z, w := q[0], q[1], q[2], q[3]
	return rigid{r: [3][3]float64{
		{1 - 2*(y*y+z*z), 2 * (x*y - z*w), 2 * (x*z + y*w)},
		{2 * (x*y + z*w), 1 - 2*(x*x+z*z), 2 * (y*z - x*w)},
		{2 * (x*z - y*w), 2 * (y*z + x*w), 1 - 2*(x*x+y*y)},
	}, t: p}
}

func matRigid(m [4][4]float64) rigid {
	var g rigid
	for i := range 3 {
		for j := range 3 {
			g.r[i][j] = m[i][j]
		}
		g.t[i] = m[i][3]
	}
	return g
}

func (a rigid) mul(b rigid) rigid {
	var c rigid
	for i := range 3 {
		for j := range 3 {
			for k := range 3 {
				c.r[i][j] += a.r[i][k] * b.r[k][j]
			}
			c.t[i] += a.r[i][j] * b.t[j]
		}
		c.t[i] += a.t[i]
	}
	return c
}

// diff is the largest absolute difference of the two transforms' entries.
func (a rigid) diff(b rigid) float64 {
	d := 0.0
	for i := range 3 {
		for j := range 3 {
			d = math.Max(d, math.Abs(a.r[i][j]-b.r[i][j]))
		}
		d = math.Max(d, math.Abs(a.t[i]-b.t[i]))
	}
	return d
}

// checkPose fails unless a received pose is the engine's to 1e-6.
func checkPose(t *testing.T, who string, e peerEvent, want engine.Result) {
	t.Helper()
	if !e.Stamp.Time().Equal(want.Stamp) || e.FrameID != "map" {
		t.Fatalf("%s pose %d: stamp %v frame %q, want %v map", who, e.N, e.Stamp.Time(), e.FrameID, want.Stamp)
	}
	if d := quatRigid(e.Position, e.Orientation).diff(matRigid(want.CamToWorld)); !(d <= 1e-6) {
		t.Fatalf("%s pose %d differs from the engine's by %g: %v %v, want %v", who, e.N, d, e.Position, e.Orientation, want.CamToWorld)
	}
}

// byStamp finds the result of a stamp.
func byStamp(t *testing.T, res []engine.Result, s peerStamp) (int, engine.Result) {
	t.Helper()
	for i, r := range res {
		if r.Stamp.Equal(s.Time()) {
			return i, r
		}
	}
	t.Fatalf("no frame has the stamp %v", s.Time())
	return 0, engine.Result{}
}

func float32s(b []byte) []float32 {
	out := make([]float32, len(b)/4)
	for i := range out {
		out[i] = math.Float32frombits(uint32(b[4*i]) | uint32(b[4*i+1])<<8 | uint32(b[4*i+2])<<16 | uint32(b[4*i+3])<<24)
	}
	return out
}

// checkCloud checks that a cloud's points are unprojected depth pixels, in
// pixel order: X_cam = ((u−cx)/fx·d, (v−cy)/fy·d, d) moved by the pose.
func checkCloud(t *testing.T, e peerEvent, data []byte, depth []float32, r engine.Result) {
	t.Helper()
	var fields []struct {
		Name     string `json:"name"`
		Offset   uint32 `json:"offset"`
		Datatype uint8  `json:"datatype"`
	}
	if err := json.Unmarshal(e.Fields, &fields); err != nil {
		t.Fatal(err)
	}
	if len(fields) != 4 || fields[0].Name != "x" || fields[1].Name != "y" || fields[2].Name != "z" ||
		fields[0].Offset != 0 || fields[1].Offset != 4 || fields[2].Offset != 8 || fields[0].Datatype != 7 ||
		e.PointStep != 16 || e.Height != 1 || int(e.Width)*16 != len(data) || e.FrameID != "map" {
		t.Fatalf("cloud %d layout: %+v", e.N, e)
	}
	if e.Width == 0 {
		t.Fatalf("cloud %d is empty", e.N)
	}
	pose := matRigid(r.CamToWorld)
	fx, fy, cx, cy := r.Intrinsics[0], r.Intrinsics[1], r.Intrinsics[2], r.Intrinsics[3]
	pts := float32s(data)
	k := 0 // next cloud point
	for v := 0; v < r.Height && k < int(e.Width); v++ {
		for u := 0; u < r.Width && k < int(e.Width); u++ {
			d := float64(depth[v*r.Width+u])
			if !(d > 0) || math.IsInf(d, 0) {
				continue
			}
			c := [3]float64{(float64(u) - cx) / fx * d, (float64(v) - cy) / fy * d, d}
			var w [3]float64
			for i := range 3 {
				w[i] = pose.r[i][0]*c[0] + pose.r[i][1]*c[1] + pose.r[i][2]*c[2] + pose.t[i]
			}
			p := pts[4*k : 4*k+3]
			if math.Abs(float64(p[0])-w[0]) <= 1e-5*(1+math.Abs(w[0])) &&
				math.Abs(float64(p[1])-w[1]) <= 1e-5*(1+math.Abs(w[1])) &&
				math.Abs(float64(p[2])-w[2]) <= 1e-5*(1+math.Abs(w[2])) {
				k++
			}
		}
	}
	if k != int(e.Width) {
		t.Fatalf("cloud %d: point %d of %d (%v) is no unprojected depth pixel in order", e.N, k, e.Width, pts[4*k:4*k+3])
	}
}

// diagValue is the newest value of key in the listener's /diagnostics.
func diagValue(l *peer, key string) string {
	ds := l.find(func(e peerEvent) bool { return e.Event == "msg" && e.Kind == "diag" })
	for i := len(ds) - 1; i >= 0; i-- {
		for _, s := range ds[i].Status {
			if v, ok := s.Values[key]; ok {
				return v
			}
		}
	}
	return ""
}

func waitDiag(t *testing.T, l *peer, key, want string, timeout time.Duration) {
	t.Helper()
	for deadline := time.Now().Add(timeout); diagValue(l, key) != want; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("/diagnostics %s = %q after %v, want %q", key, diagValue(l, key), timeout, want)
		}
	}
}

// feed runs a publisher peer with --stdin (it sends one sample per line) and
// paces it by what the node reports in /diagnostics, which l receives: the
// first sample once publishers_matched:<topic> counts the publisher (the
// reader's side of the match, which comes after the writer's), each next once
// frames_received counts the one before. The node's image readers are best
// effort whatever the writer offers: a sample that meets a reader not yet
// matched, or one behind on a loaded machine, is dropped, not delayed, and
// the tests count frames exactly. So nothing here waits a fixed time.
func feed(t *testing.T, l *peer, topic string, samples int, prog string, args ...string) *peer {
	t.Helper()
	key := "publishers_matched:" + topic
	// The previous publisher on topic has gone, so the count that becomes 1
	// below is this one's.
	waitDiag(t, l, key, "0", 30*time.Second)
	received, err := strconv.Atoi(diagValue(l, "frames_received"))
	if err != nil {
		t.Fatalf("/diagnostics frames_received: %v", err)
	}
	p := startPeerStdin(t, prog, args...)
	if m := p.waitFor(t, "the publisher's side of the match", 1, 30*time.Second, func(e peerEvent) bool { return e.Event == "matched" }); !m[0].OK {
		t.Fatalf("%s matched no reader", p.name)
	}
	waitDiag(t, l, key, "1", 30*time.Second)
	for i := range samples {
		if _, err := fmt.Fprintln(p.stdin, "go"); err != nil {
			t.Fatalf("%s: %v", p.name, err)
		}
		received++
		waitDiag(t, l, "frames_received", strconv.Itoa(received), 60*time.Second)
		p.waitFor(t, "the publisher's report", i+1, 10*time.Second, func(e peerEvent) bool { return e.Event == "published" })
	}
	p.stdin.Close()
	p.wait(t, 60*time.Second)
	return p
}

// feedBad is feed for one bad sample, which the node counts and skips, from
// a publisher that sends it again for each further line. The node's reader
// is best effort and may drop a sample even once matched; a bad sample sent
// twice costs only a count, so it is sent again while frames_received has
// not counted it, and the test checks what the node counted, not how often
// the peer sent.
func feedBad(t *testing.T, l *peer, topic string, prog string, args ...string) {
	t.Helper()
	key := "publishers_matched:" + topic
	waitDiag(t, l, key, "0", 30*time.Second)
	received := diagInt(t, l, "frames_received")
	p := startPeerStdin(t, prog, args...)
	if m := p.waitFor(t, "the publisher's side of the match", 1, 30*time.Second, func(e peerEvent) bool { return e.Event == "matched" }); !m[0].OK {
		t.Fatalf("%s matched no reader", p.name)
	}
	waitDiag(t, l, key, "1", 30*time.Second)
	for try := 1; ; try++ {
		if _, err := fmt.Fprintln(p.stdin, "go"); err != nil {
			t.Fatalf("%s: %v", p.name, err)
		}
		p.waitFor(t, "the publisher's report", try, 10*time.Second, func(e peerEvent) bool { return e.Event == "published" })
		deadline := time.Now().Add(5 * time.Second)
		for diagInt(t, l, "frames_received") <= received && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
		if diagInt(t, l, "frames_received") > received {
			break
		}
		if try == 10 {
			t.Fatalf("the node counted none of %d samples of %s", try, p.name)
		}
		t.Logf("%s: the node has not counted the sample; sending it again", p.name)
	}
	p.stdin.Close()
	p.wait(t, 60*time.Second)
}

// diagInt is diagValue as a number.
func diagInt(t *testing.T, l *peer, key string) int {
	t.Helper()
	v, err := strconv.Atoi(diagValue(l, key))
	if err != nil {
		t.Fatalf("/diagnostics %s: %v", key, err)
	}
	return v
}

// TestROS2NodeEndToEnd runs the ROS 2 node on 17 courthouse frames sent by
// the Cyclone peer as Image and CompressedImage, best effort and reliable,
// from four publishers that come and go, and checks everything the node
// sends against the peers and the engine; then bad inputs, ~/save_map and
// SIGINT.
func TestROS2NodeEndToEnd(t *testing.T) {
	if !inNetns(t) {
		return
	}
	const width, n = 154, 17
	dir, err := shared.Path("data", "courthouse")
	if err != nil {
		t.Fatal(err)
	}
	oxford, err := shared.Path("data", "oxford")
	if err != nil {
		t.Fatal(err)
	}
	dump, saveDir := t.TempDir(), t.TempDir()

	l := startPeer(t, "cyclone-peer", "listen", "--secs", "600", "--dump", dump,
		"pose:/mapper/pose", "path:/mapper/path:tl", "odom:/mapper/odom", "cloud:/mapper/cloud",
		"cloud:/mapper/map:tl", "image:/mapper/depth", "tf:/tf", "tf:/tf_static:tl", "diag:/diagnostics",
		"pei:ros_discovery_info:tl")
	fast := startPeer(t, "fastdds-peer", "sub-pose", "/mapper/pose", strconv.Itoa(n), "600")
	foxPose := startPeer(t, "foxglove-peer.js", "/mapper/pose", "geometry_msgs/msg/PoseStamped", strconv.Itoa(n), "600")
	foxCloud := startPeer(t, "foxglove-peer.js", "/mapper/cloud", "sensor_msgs/msg/PointCloud2", strconv.Itoa(n), "600")
	for _, p := range []*peer{l, fast, foxPose, foxCloud} {
		p.waitFor(t, "the peer to start", 1, 20*time.Second, func(e peerEvent) bool { return e.Event == "ready" })
	}

	node := startROS2Node(t, ros2NodeArgs(t, "mapper", width,
		"-p", "image_transport:=both",
		"-p", "conf_threshold:=0.0",
		"-p", "map_voxel:=0.000001",
		"-p", "map_rate:=20.0",
		"-p", "base_frame:=base_link",
		"-p", "base_to_camera:=0 0 0 -0.5 0.5 -0.5 0.5",
		"-p", "save_dir:="+saveDir,
		// The Cyclone peer's idlc types read Humble's 24-byte Gid
		// (ros2peers/ros2msgs.idl); the real Jazzy checks the 16-byte one.
		"-p", "ros2_gid_size:=24")...)
	var poseWriter peerEndpoint
	for _, topic := range []string{"/mapper/pose", "/mapper/cloud", "/mapper/depth", "/diagnostics"} {
		m := l.waitFor(t, "the node's writer of "+topic, 1, 30*time.Second, func(e peerEvent) bool {
			return e.Event == "matched" && e.Topic == topic && e.Writers == 1
		})
		if topic == "/mapper/pose" && len(m[0].Endpoints) == 1 {
			poseWriter = m[0].Endpoints[0]
		}
	}
	// REP 2011: the writer's USER_DATA carries its type hash (the value in
	// ros2-notes.md), the participant's the enclave.
	if poseWriter.Type != "geometry_msgs::msg::dds_::PoseStamped_" ||
		!strings.Contains(poseWriter.UserData, "typehash="+poseStampedHash+";") ||
		poseWriter.ParticipantUserData == nil || !strings.Contains(*poseWriter.ParticipantUserData, "enclave=/;") {
		t.Errorf("the pose writer as Cyclone sees it: %+v (participant USER_DATA %v)", poseWriter, poseWriter.ParticipantUserData)
	}
	// The writers are volatile: every subscriber must have found the node
	// before the first frame.
	fast.waitFor(t, "Fast DDS to match the node's pose writer", 1, 30*time.Second, func(e peerEvent) bool {
		return e.Event == "matched" && e.Writers == 1
	})
	for topic, p := range map[string]*peer{"rt/mapper/pose": foxPose, "rt/mapper/cloud": foxCloud} {
		p.waitFor(t, "foxglove to discover "+topic, 1, 30*time.Second, func(e peerEvent) bool {
			return e.Event == "publication" && e.Topic == topic
		})
	}
	// The node's side of those matches: its volatile writers send only to
	// the readers they have matched.
	// (At least: the node's own readers, of /tf for one, count too.)
	for topic, readers := range map[string]int{"/mapper/pose": 3, "/mapper/cloud": 2, "/mapper/depth": 1, "/mapper/odom": 1, "/tf": 1} {
		key := "subscribers_matched:" + topic
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			if v, err := strconv.Atoi(diagValue(l, key)); err == nil && v >= readers {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("/diagnostics %s = %q after 30s, want at least %d", key, diagValue(l, key), readers)
			}
		}
	}

	// Four publishers in turn: each is a new participant the node discovers.
	poses := func(k int) {
		l.waitFor(t, fmt.Sprintf("%d poses", k), k, 90*time.Second, func(e peerEvent) bool { return e.Event == "msg" && e.Kind == "pose" })
	}
	batches := [][]string{
		{"--first", "0"},
		{"--first", "4", "--reliable"},
		{"--first", "8", "--compressed"},
		{"--first", "12", "--compressed", "--reliable"},
	}
	for i, b := range batches {
		topic := "/camera/image_raw"
		if slices.Contains(b, "--compressed") {
			topic += "/compressed"
		}
		feed(t, l, topic, 4, "cyclone-peer", append(append([]string{"pub-images", "--stdin"}, b...), dir, "4")...)
		poses(4 * (i + 1))
	}

	// Bad input: counted, skipped, and the node goes on.
	for _, kind := range []string{"encoding", "step", "short"} {
		feedBad(t, l, "/camera/image_raw", "cyclone-peer", "pub-bad", "--stdin", kind)
	}
	for _, kind := range []string{"truncated", "overlength", "huge"} {
		feedBad(t, l, "/camera/image_raw", "fastdds-peer", "pub-corrupt", "/camera/image_raw", kind, "--stdin")
	}
	feed(t, l, "/camera/image_raw", 1, "cyclone-peer", "pub-images", "--stdin", "--reliable", "--stamp-offset", "50", oxford, "1")
	// Every input counted but the 16 frames is skipped (the bad ones were
	// sent until counted, perhaps more than once): wait for the last skip,
	// which the pipeline's workers may still be deciding.
	for deadline := time.Now().Add(30 * time.Second); diagInt(t, l, "frames_received")-diagInt(t, l, "skipped_total") != 16; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("/diagnostics: frames_received %s, skipped_total %s after 30s, want 16 frames more than skipped", diagValue(l, "frames_received"), diagValue(l, "skipped_total"))
		}
	}
	for key, least := range map[string]int{"skipped_encoding": 1, "skipped_step": 1, "skipped_size": 1, "skipped_cdr": 3, "skipped_size_change": 1} {
		if got := diagInt(t, l, key); got < least || key == "skipped_size_change" && got != 1 {
			t.Errorf("/diagnostics %s = %d, want %d (at least, for the bad samples that may have been sent again)", key, got, least)
		}
	}
	if sum := diagInt(t, l, "skipped_encoding") + diagInt(t, l, "skipped_step") + diagInt(t, l, "skipped_size") + diagInt(t, l, "skipped_cdr") + diagInt(t, l, "skipped_size_change"); sum != diagInt(t, l, "skipped_total") {
		t.Errorf("/diagnostics: the skipped kinds add up to %d, skipped_total is %s", sum, diagValue(l, "skipped_total"))
	}
	// Reported once per kind: three corrupt CDR samples, one log line.
	if got := strings.Count(node.out.String(), "kind=cdr"); got != 1 {
		t.Errorf("the node logged corrupt CDR %d times, want once", got)
	}
	feed(t, l, "/camera/image_raw", 1, "cyclone-peer", "pub-images", "--stdin", "--reliable", "--first", "16", dir, "1")
	poses(n)
	waitDiag(t, l, "frames_processed", strconv.Itoa(n), 10*time.Second)

	// ~/save_map through the peer's Trigger client; the files read back.
	c := runPeer(t, 60*time.Second, "cyclone-peer", "call", "/mapper/save_map")
	if r := c.find(func(e peerEvent) bool { return e.Event == "reply" }); len(r) != 1 || !r[0].Success {
		t.Fatalf("~/save_map replied %+v", r)
	}

	fast.wait(t, 60*time.Second)
	foxPose.wait(t, 60*time.Second)
	foxCloud.wait(t, 60*time.Second)
	mapMsgs := l.waitFor(t, "a ~/map with the last frame", 1, 20*time.Second, func(e peerEvent) bool {
		return e.Event == "msg" && e.Topic == "/mapper/map" && e.Stamp.Time().Equal(rostest.StampOf(n-1))
	})
	if err := node.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	exitedCleanly(t, "SIGINT", node.wait(t, 20*time.Second))
	l.waitFor(t, "the node's pose writer to go away", 1, 20*time.Second, func(e peerEvent) bool {
		return e.Event == "matched" && e.Topic == "/mapper/pose" && e.Writers == 0
	})
	l.stop()

	frames := rostest.Frames(t, n)
	// the node's poses, odometry and clouds are in the z-up map frame: the
	// first frame's base (base_to_camera is the optical-to-body rotation)
	want := inMapFrame(t, engineResults(t, frames, width), mapframe.OpticalToBody())

	// Poses, by three stacks.
	for who, p := range map[string]*peer{"cyclone": l, "fastdds": fast, "foxglove": foxPose} {
		got := p.find(func(e peerEvent) bool { return e.Event == "msg" && e.Kind == "pose" })
		if len(got) != n {
			t.Fatalf("%s got %d poses, want %d", who, len(got), n)
		}
		for i, e := range got {
			checkPose(t, who, e, want[i])
		}
	}
	// Path: the last one holds every pose.
	paths := l.msgs("/mapper/path")
	last := paths[len(paths)-1]
	if len(last.Poses) != n || last.FrameID != "map" {
		t.Fatalf("the last path has %d poses in %q, want %d in map", len(last.Poses), last.FrameID, n)
	}
	for i, e := range last.Poses {
		e.N = i
		checkPose(t, "path", e, want[i])
	}
	// Odometry and /tf give map -> base_link; with /tf_static's base_link ->
	// camera they compose to the camera pose.
	camInBase := quatRigid([3]float64(baseToCamera[:3]), [4]float64(baseToCamera[3:]))
	odoms := l.msgs("/mapper/odom")
	tfs := l.msgs("/tf")
	if len(odoms) != n || len(tfs) != n {
		t.Fatalf("%d odometry and %d /tf messages, want %d", len(odoms), len(tfs), n)
	}
	for i := range n {
		o, tf := odoms[i], tfs[i]
		if o.FrameID != "map" || o.ChildFrameID != "base_link" || !o.Stamp.Time().Equal(want[i].Stamp) {
			t.Fatalf("odometry %d: %+v", i, o)
		}
		if d := quatRigid(o.Position, o.Orientation).mul(camInBase).diff(matRigid(want[i].CamToWorld)); !(d <= 1e-6) {
			t.Fatalf("odometry %d composed with base_to_camera is off the camera pose by %g", i, d)
		}
		if len(tf.Transforms) != 1 || tf.Transforms[0].FrameID != "map" || tf.Transforms[0].ChildFrameID != "base_link" ||
			quatRigid(tf.Transforms[0].Translation, tf.Transforms[0].Rotation).diff(quatRigid(o.Position, o.Orientation)) > 1e-12 {
			t.Fatalf("/tf %d: %+v, odometry %+v", i, tf, o)
		}
	}
	st := l.msgs("/tf_static")
	if len(st) != 1 || len(st[0].Transforms) != 1 || st[0].Transforms[0].FrameID != "base_link" ||
		st[0].Transforms[0].ChildFrameID != "camera_optical" ||
		quatRigid(st[0].Transforms[0].Translation, st[0].Transforms[0].Rotation).diff(camInBase) > 1e-12 {
		t.Fatalf("/tf_static: %+v", st)
	}
	// Depth images equal the engine's depth; clouds are their unprojection.
	depths := map[peerStamp][]float32{}
	for _, e := range l.msgs("/mapper/depth") {
		i, r := byStamp(t, want, e.Stamp)
		if e.Encoding != "32FC1" || int(e.Width) != r.Width || int(e.Height) != r.Height || int(e.Step) != 4*r.Width || e.FrameID != "camera_optical" {
			t.Fatalf("depth %d: %+v", i, e)
		}
		d := float32s(readDump(t, e))
		for j := range d {
			if math.Abs(float64(d[j]-r.Depth[j])) > 1e-6*(1+math.Abs(float64(r.Depth[j]))) {
				t.Fatalf("depth %d pixel %d: %g, the engine's %g", i, j, d[j], r.Depth[j])
			}
		}
		depths[e.Stamp] = d
	}
	if len(depths) != n {
		t.Fatalf("%d depth images, want %d", len(depths), n)
	}
	cloudSums := map[peerStamp]string{}
	for _, e := range l.msgs("/mapper/cloud") {
		_, r := byStamp(t, want, e.Stamp)
		data := readDump(t, e)
		checkCloud(t, e, data, depths[e.Stamp], r)
		s := sha256.Sum256(data)
		cloudSums[e.Stamp] = hex.EncodeToString(s[:])
	}
	if len(cloudSums) != n {
		t.Fatalf("%d clouds, want %d", len(cloudSums), n)
	}
	for _, e := range foxCloud.find(func(e peerEvent) bool { return e.Event == "msg" }) {
		if e.SHA256 != cloudSums[e.Stamp] {
			t.Fatalf("foxglove's cloud at %v differs from Cyclone's", e.Stamp.Time())
		}
	}
	// The accumulated map: over 3 MB, whole.
	m := mapMsgs[len(mapMsgs)-1]
	mapData := readDump(t, m)
	h := fnv.New64a()
	h.Write(mapData)
	if m.DataLen <= 3_000_000 || int(m.Width)*16 != m.DataLen || hex.EncodeToString(h.Sum(nil)) != m.FNV1a {
		t.Fatalf("~/map: %d points, %d bytes (want > 3 MB, whole)", m.Width, m.DataLen)
	}
	// The files ~/save_map wrote.
	checkSavedMap(t, saveDir, l.msgs("/mapper/pose"), int(m.Width))
	// /diagnostics and ros_discovery_info.
	// Received counts every input, the bad ones too.
	if got, skipped := diagInt(t, l, "frames_received"), diagInt(t, l, "skipped_total"); got != n+skipped {
		t.Errorf("/diagnostics frames_received = %d, want %d frames and %d skipped", got, n, skipped)
	}
	found := false
	for _, e := range l.msgs("ros_discovery_info") {
		for _, nd := range e.Nodes {
			if nd.Name == "mapper" && nd.Namespace == "/" && len(nd.Readers) >= 1 && slices.Contains(nd.Writers, poseWriter.GUID) {
				found = true
			}
		}
	}
	if !found {
		t.Fatalf("no ros_discovery_info names the node /mapper with its readers and its pose writer %s: %+v", poseWriter.GUID, l.msgs("ros_discovery_info"))
	}
}

// checkSavedMap re-reads trajectory.tum and map.ply.
func checkSavedMap(t *testing.T, dir string, poses []peerEvent, mapPoints int) {
	t.Helper()
	f, err := os.Open(filepath.Join(dir, "trajectory.tum"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	i := 0
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		var v [8]float64
		fs := strings.Fields(line)
		if len(fs) != 8 || i >= len(poses) {
			t.Fatalf("trajectory.tum line %q (pose %d of %d)", line, i, len(poses))
		}
		for j := range v {
			if v[j], err = strconv.ParseFloat(fs[j], 64); err != nil {
				t.Fatalf("trajectory.tum: %v", err)
			}
		}
		p := poses[i]
		stamp := float64(p.Stamp.Sec) + float64(p.Stamp.Nanosec)*1e-9
		if math.Abs(v[0]-stamp) > 1e-6 || quatRigid([3]float64(v[1:4]), [4]float64(v[4:8])).diff(quatRigid(p.Position, p.Orientation)) > 1e-6 {
			t.Fatalf("trajectory.tum line %d %v, published pose %+v", i, v, p)
		}
		i++
	}
	if i != len(poses) {
		t.Fatalf("trajectory.tum has %d poses, %d were published", i, len(poses))
	}
	b, err := os.ReadFile(filepath.Join(dir, "map.ply"))
	if err != nil {
		t.Fatal(err)
	}
	head, body, ok := strings.Cut(string(b), "end_header\n")
	if !ok || !strings.HasPrefix(head, "ply\nformat binary_little_endian 1.0\n") {
		t.Fatalf("map.ply header:\n%.400s", b)
	}
	vertices, stride := -1, 0
	for _, line := range strings.Split(head, "\n") {
		fs := strings.Fields(line)
		switch {
		case len(fs) == 3 && fs[0] == "element" && fs[1] == "vertex":
			vertices, _ = strconv.Atoi(fs[2])
		case len(fs) == 3 && fs[0] == "property" && fs[1] == "float":
			stride += 4
		case len(fs) == 3 && fs[0] == "property" && fs[1] == "uchar":
			stride++
		}
	}
	if vertices != mapPoints || len(body) != vertices*stride {
		t.Fatalf("map.ply: %d vertices of %d bytes in %d bytes; ~/map had %d points", vertices, stride, len(body), mapPoints)
	}
}

// TestROS2NodeRediscoversAndFlushesOnSIGTERM: a subscriber that leaves and
// comes back is matched again, two publishers in turn are both heard, and
// SIGTERM flushes the frames the engine still buffers (fewer than the scale
// frames) as poses before the node's writers go away.
func TestROS2NodeRediscoversAndFlushesOnSIGTERM(t *testing.T) {
	if !inNetns(t) {
		return
	}
	const width = 70
	dir, err := shared.Path("data", "courthouse")
	if err != nil {
		t.Fatal(err)
	}
	node := startROS2Node(t, ros2NodeArgs(t, "flusher", width)...)
	first := startPeer(t, "cyclone-peer", "listen", "--secs", "120", "pose:/flusher/pose")
	first.waitFor(t, "the node's pose writer", 1, 30*time.Second, func(e peerEvent) bool { return e.Event == "matched" && e.Writers == 1 })
	first.stop()
	l := startPeer(t, "cyclone-peer", "listen", "--secs", "120", "pose:/flusher/pose", "diag:/diagnostics")
	l.waitFor(t, "the node's writers again", 2, 30*time.Second, func(e peerEvent) bool { return e.Event == "matched" && e.Writers == 1 })
	// and the node's side of the pose match: the flushed poses go only to
	// readers its writer has matched
	waitDiag(t, l, "subscribers_matched:/flusher/pose", "1", 30*time.Second)
	feed(t, l, "/camera/image_raw", 1, "cyclone-peer", "pub-images", "--stdin", "--reliable", dir, "1")
	feed(t, l, "/camera/image_raw", 1, "cyclone-peer", "pub-images", "--stdin", "--reliable", "--first", "1", dir, "1")
	waitDiag(t, l, "engine_frames_in", "2", 30*time.Second)
	if got := l.msgs("/flusher/pose"); len(got) != 0 {
		t.Fatalf("%d poses before the scale frames were complete, want 0", len(got))
	}
	if err := node.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	exitedCleanly(t, "SIGTERM", node.wait(t, 20*time.Second))
	got := l.waitFor(t, "the flushed poses", 2, 10*time.Second, func(e peerEvent) bool { return e.Event == "msg" && e.Kind == "pose" })
	l.waitFor(t, "the node's pose writer to go away", 1, 20*time.Second, func(e peerEvent) bool {
		return e.Event == "matched" && e.Topic == "/flusher/pose" && e.Writers == 0
	})
	want := inMapFrame(t, engineResults(t, rostest.Frames(t, 2), width), mapframe.OpticalToBody())
	for i, e := range got {
		checkPose(t, "cyclone", e, want[i])
	}
}
