// Package test holds the end-to-end tests: the real lingbotmap binary against
// Debian's rosmaster, rosbag, rostopic, rosnode, roslaunch and rviz. The
// model is replaced by a replay of the golden images_kf1 case (--replay), so
// every published pose can be checked against the reference.
package test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/bluenviron/goroslib/v2"
	"github.com/bluenviron/goroslib/v2/pkg/msgs/diagnostic_msgs"
	"github.com/bluenviron/goroslib/v2/pkg/msgs/geometry_msgs"
	"github.com/bluenviron/goroslib/v2/pkg/msgs/nav_msgs"
	"github.com/bluenviron/goroslib/v2/pkg/msgs/sensor_msgs"
	"github.com/bluenviron/goroslib/v2/pkg/msgs/std_msgs"

	"github.com/lingbotmap/lingbotmap/engine/golden/replay"
	"github.com/lingbotmap/lingbotmap/engine/mapframe"
	"github.com/lingbotmap/lingbotmap/internal/shared"
	"github.com/lingbotmap/lingbotmap/internal/syncbuf"
	"github.com/lingbotmap/lingbotmap/node/ros1/rostest"
)

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
	buildDir  string
)

// atExit runs after the package's tests (the ros2 build's binary folder).
var atExit []func()

func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	for _, f := range atExit {
		f()
	}
	os.Exit(code)
}

// binary builds ./cmd/lingbotmap once for the package's tests.
func binary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "lingbotmap-e2e-")
		if buildErr != nil {
			return
		}
		binPath = filepath.Join(buildDir, "lingbotmap")
		cmd := exec.Command("go", "build", "-o", binPath, "../cmd/lingbotmap")
		out, err := cmd.CombinedOutput()
		if err != nil {
			buildErr = errors.New(string(out))
		}
	})
	if buildErr != nil {
		t.Fatalf("building the lingbotmap binary: %v", buildErr)
	}
	return binPath
}

func golden(t *testing.T) string {
	t.Helper()
	d, err := shared.Path("golden", "images_kf1")
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// nodeProc is the binary running as a ROS node.
type nodeProc struct {
	cmd  *exec.Cmd
	out  *syncbuf.Buffer
	done chan error
}

func startNode(t *testing.T, m *rostest.Master, args ...string) *nodeProc {
	t.Helper()
	p := &nodeProc{cmd: exec.Command(binary(t), append([]string{"node", "--ros", "1"}, args...)...), out: &syncbuf.Buffer{}, done: make(chan error, 1)}
	p.cmd.Env = m.Env
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.done <- p.cmd.Wait() }()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("node output:\n%s", p.out.String())
		}
	})
	return p
}

// wait returns the exit error, failing the test after timeout.
func (p *nodeProc) wait(t *testing.T, timeout time.Duration) error {
	t.Helper()
	select {
	case err := <-p.done:
		p.done <- err
		return err
	case <-time.After(timeout):
		t.Fatalf("the node did not exit within %v", timeout)
		return nil
	}
}

func waitFor(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(timeout); !cond(); time.Sleep(25 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
	}
}

// listener subscribes to the node's outputs.
type listener struct {
	mu    sync.Mutex
	poses []*geometry_msgs.PoseStamped
	path  *nav_msgs.Path
	cloud *sensor_msgs.PointCloud2
	mapPC *sensor_msgs.PointCloud2
	diag  *diagnostic_msgs.DiagnosticArray
	gn    *goroslib.Node
}

func listen(t *testing.T, m *rostest.Master, prefix string) *listener {
	t.Helper()
	l := &listener{}
	gn, err := goroslib.NewNode(goroslib.NodeConf{Name: "e2e_listener", MasterAddress: m.Addr, Host: "127.0.0.1",
		LogDestinations: goroslib.LogDestinationCallback})
	if err != nil {
		t.Fatal(err)
	}
	l.gn = gn
	t.Cleanup(gn.Close)
	sub := func(topic string, cb any) {
		s, err := goroslib.NewSubscriber(goroslib.SubscriberConf{Node: gn, Topic: topic, Callback: cb, QueueSize: 256})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Close)
	}
	sub(prefix+"/pose", func(p *geometry_msgs.PoseStamped) { l.mu.Lock(); l.poses = append(l.poses, p); l.mu.Unlock() })
	sub(prefix+"/path", func(p *nav_msgs.Path) { l.mu.Lock(); l.path = p; l.mu.Unlock() })
	sub(prefix+"/cloud", func(p *sensor_msgs.PointCloud2) { l.mu.Lock(); l.cloud = p; l.mu.Unlock() })
	sub(prefix+"/map", func(p *sensor_msgs.PointCloud2) { l.mu.Lock(); l.mapPC = p; l.mu.Unlock() })
	sub("/diagnostics", func(p *diagnostic_msgs.DiagnosticArray) { l.mu.Lock(); l.diag = p; l.mu.Unlock() })
	return l
}

func (l *listener) count() int { l.mu.Lock(); defer l.mu.Unlock(); return len(l.poses) }

func (l *listener) diagValue(key string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.diag == nil || len(l.diag.Status) == 0 {
		return ""
	}
	for _, kv := range l.diag.Status[0].Values {
		if kv.Key == key {
			return kv.Value
		}
	}
	return ""
}

// checkPoses compares the received poses with the replayed reference.
func (l *listener) checkPoses(t *testing.T, n int) {
	t.Helper()
	ref, err := replay.New(golden(t))
	if err != nil {
		t.Fatal(err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.poses) != n {
		t.Fatalf("%d poses, want %d", len(l.poses), n)
	}
	// in the z-up map frame: the first camera's body frame (REP 103/105)
	frame := mapframe.New()
	frame.FixAt(mapframe.OpticalToBody(), ref.Reference(0).CamToWorld)
	for i, p := range l.poses {
		want := poseOf(t, frame.CamPose(ref.Reference(i).CamToWorld))
		if !p.Header.Stamp.Equal(rostest.StampOf(i)) || p.Header.FrameId != "map" || p.Pose != want {
			t.Fatalf("pose %d: %v %q %+v; want %v map %+v", i, p.Header.Stamp, p.Header.FrameId, p.Pose, rostest.StampOf(i), want)
		}
	}
}

// writeBag writes the 16 real frames on /camera/image_raw plus a corrupt
// compressed image.
func writeBag(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "frames.bag")
	msgs := rostest.FrameMsgs("/camera/image_raw", rostest.Frames(t, 16))
	msgs = append(msgs, rostest.BagMsg{Topic: "/camera/image_raw/compressed", Time: rostest.StampOf(16), Msg: &sensor_msgs.CompressedImage{
		Header: std_msgs.Header{Stamp: rostest.StampOf(16), FrameId: "camera_optical"},
		Format: "png", Data: []byte("\x89PNG\r\n\x1a\n truncated"),
	}})
	rostest.WriteBag(t, path, msgs)
	return path
}

// TestBinaryReplaysBagAndStopsOnSIGINT runs the real binary as a node,
// plays a bag of real frames into it with rosbag play, checks the outputs
// with a Go subscriber and rostopic echo, then ends it with SIGINT.
func TestBinaryReplaysBagAndStopsOnSIGINT(t *testing.T) {
	m := rostest.StartMaster(t)
	bag := writeBag(t)
	out := m.Run(t, 30*time.Second, "rosbag", "info", bag)
	if !strings.Contains(out, "sensor_msgs/Image") || !strings.Contains(out, "16 msgs") {
		t.Fatalf("rosbag info does not show 16 images:\n%s", out)
	}
	p := startNode(t, m, "--replay", golden(t), "--queue-policy=all", "--image-transport=both",
		"--diagnostics-rate=10", "image:=/camera/image_raw", "__name:=mapper")
	waitFor(t, "the node to register", 20*time.Second, func() bool { return m.Knows("/mapper") })
	l := listen(t, m, "/mapper")
	m.WaitSubscribed(t, "/camera/image_raw", "/mapper", 10*time.Second)
	m.WaitSubscribed(t, "/camera/image_raw/compressed", "/mapper", 10*time.Second)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	echo := m.Command(ctx, "rostopic", "echo", "-n", "1", "/mapper/pose")
	var echoOut bytes.Buffer
	echo.Stdout, echo.Stderr = &echoOut, &echoOut
	if err := echo.Start(); err != nil {
		t.Fatal(err)
	}
	m.WaitSubscribed(t, "/mapper/pose", "/rostopic", 15*time.Second)
	m.WaitSubscribed(t, "/mapper/pose", "/e2e_listener", 15*time.Second)

	m.Run(t, 60*time.Second, "rosbag", "play", "-q", "--wait-for-subscribers", bag)
	waitFor(t, "16 poses from the node", 30*time.Second, func() bool { return l.count() >= 16 })
	l.checkPoses(t, 16)
	if err := echo.Wait(); err != nil {
		t.Fatalf("rostopic echo: %v\n%s", err, echoOut.String())
	}
	if s := echoOut.String(); !strings.Contains(s, "frame_id: \"map\"") || !strings.Contains(s, "secs: 1700000000") {
		t.Fatalf("rostopic echo -n 1 /mapper/pose printed:\n%s", s)
	}
	// ~map is rate-limited (1 Hz by default); the last frames' points still
	// arrive without further input.
	waitFor(t, "a ~map that includes the last frame", 5*time.Second, func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.mapPC != nil && l.mapPC.Header.Stamp.Equal(rostest.StampOf(15)) && l.mapPC.Width > 0
	})
	waitFor(t, "the corrupt image in /diagnostics", 10*time.Second, func() bool { return l.diagValue("skipped_corrupt") == "1" })
	if got := l.diagValue("frames_processed"); got != "16" {
		t.Errorf("diagnostics frames_processed = %q, want 16", got)
	}

	if err := p.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if err := p.wait(t, 10*time.Second); err != nil {
		t.Fatalf("after SIGINT the node exited with %v, want status 0", err)
	}
	if m.Knows("/mapper") {
		t.Error("the node is still registered with the master after SIGINT")
	}
}

// TestBinaryEndsOnRosnodeKill checks that `rosnode kill` ends the process,
// which goroslib alone does not do.
func TestBinaryEndsOnRosnodeKill(t *testing.T) {
	m := rostest.StartMaster(t)
	p := startNode(t, m, "--replay", golden(t), "__name:=victim")
	waitFor(t, "the node to register", 20*time.Second, func() bool { return m.Knows("/victim") })
	out := m.Run(t, 30*time.Second, "rosnode", "kill", "/victim")
	if !strings.Contains(out, "killed") {
		t.Fatalf("rosnode kill printed:\n%s", out)
	}
	if err := p.wait(t, 10*time.Second); err != nil {
		t.Fatalf("after rosnode kill the node exited with %v, want status 0", err)
	}
}

// TestBinaryRejectsBadSettings checks that a wrong value stops the node at
// start with a message naming the setting, from a flag and from a ROS parameter.
func TestBinaryRejectsBadSettings(t *testing.T) {
	m := rostest.StartMaster(t)
	p := startNode(t, m, "--queue-policy=sometimes")
	err := p.wait(t, 20*time.Second)
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(p.out.String(), "'queue_policy'") {
		t.Fatalf("a bad flag: exit %v, output:\n%s", err, p.out.String())
	}
	m.Run(t, 20*time.Second, "rosparam", "set", "/strict/map_voxel", "-1.0")
	p = startNode(t, m, "--replay", golden(t), "__name:=strict")
	err = p.wait(t, 20*time.Second)
	if err == nil || !strings.Contains(p.out.String(), "'map_voxel'") {
		t.Fatalf("a bad ROS parameter: exit %v, output:\n%s", err, p.out.String())
	}
}

// TestBinaryFlushesOnSIGTERM gives the node fewer frames than the scale
// frames the engine buffers; SIGTERM must flush them out as poses before the
// node unregisters and exits 0.
func TestBinaryFlushesOnSIGTERM(t *testing.T) {
	m := rostest.StartMaster(t)
	path := filepath.Join(t.TempDir(), "two.bag")
	rostest.WriteBag(t, path, rostest.FrameMsgs("/camera/image_raw", rostest.Frames(t, 2)))
	p := startNode(t, m, "--replay", golden(t), "--queue-policy=all", "--diagnostics-rate=20", "image:=/camera/image_raw")
	waitFor(t, "the node to register", 20*time.Second, func() bool { return m.Knows("/lingbotmap") })
	l := listen(t, m, "/lingbotmap")
	m.WaitSubscribed(t, "/lingbotmap/pose", "/e2e_listener", 15*time.Second)
	m.Run(t, 60*time.Second, "rosbag", "play", "-q", "--wait-for-subscribers", path)
	waitFor(t, "both frames to reach the engine", 10*time.Second, func() bool { return l.diagValue("engine_frames_in") == "2" })
	if n := l.count(); n != 0 {
		t.Fatalf("%d poses before the scale frames were complete, want 0", n)
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := p.wait(t, 10*time.Second); err != nil {
		t.Fatalf("after SIGTERM the node exited with %v, want status 0", err)
	}
	waitFor(t, "the flushed poses", 5*time.Second, func() bool { return l.count() >= 2 })
	l.checkPoses(t, 2)
}
