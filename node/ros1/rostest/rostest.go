// Package rostest runs the real Debian ROS 1 tools for the integration tests:
// a private rosmaster per test on a free port, command-line tools with the
// right environment, and bags of real frames. A missing tool fails the test
// with the apt line that provides it (ros-notes.md §6); nothing is skipped.
package rostest

import (
	"bytes"
	"context"
	"fmt"
	"image"
	"image/draw"
	_ "image/png" // the sample frames are PNG
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bluenviron/goroslib/v2/pkg/apimaster"
	"github.com/bluenviron/goroslib/v2/pkg/msgs/sensor_msgs"
	"github.com/bluenviron/goroslib/v2/pkg/msgs/std_msgs"

	"github.com/lingbotmap/lingbotmap/internal/shared"
	"github.com/lingbotmap/lingbotmap/msgs/bag"
)

// AptHeadless and AptViz are the CI's install lines (ros-notes.md §6).
const (
	AptHeadless = "apt-get install -y --no-install-recommends python3-roslaunch python3-rostopic python3-rosbag python3-rosparam python3-rosnode python3-rosservice python3-std-msgs python3-std-srvs python3-sensor-msgs python3-geometry-msgs python3-nav-msgs python3-tf2-msgs python3-pil"
	AptViz      = "apt-get install -y --no-install-recommends rviz xvfb xauth x11-apps imagemagick libgl1-mesa-dri"
)

// RequireTools fails the test when a command is not on PATH.
func RequireTools(t testing.TB, aptLine string, tools ...string) {
	t.Helper()
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is not installed; this test runs the real ROS tools. Install them with: %s", tool, aptLine)
		}
	}
}

// Master is a private rosmaster on a free loopback port.
type Master struct {
	Addr string   // 127.0.0.1:port
	URI  string   // http://127.0.0.1:port
	Env  []string // environment for ROS tools and nodes
	port int
	cmd  *exec.Cmd
	t    testing.TB
}

// StartMaster starts `rosmaster --core` and stops it when the test ends.
func StartMaster(t testing.TB) *Master {
	t.Helper()
	RequireTools(t, AptHeadless, "rosmaster", "rostopic", "rosbag", "rosparam", "rosservice", "rosnode")
	// goroslib nodes created in the test process read ROS_NAMESPACE themselves.
	t.Setenv("ROS_NAMESPACE", "")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	m := &Master{port: port, Addr: fmt.Sprintf("127.0.0.1:%d", port), t: t}
	m.URI = "http://" + m.Addr
	m.Env = append(os.Environ(), "ROS_MASTER_URI="+m.URI, "ROS_HOSTNAME=localhost", "ROS_HOME="+t.TempDir(), "ROS_NAMESPACE=")
	m.Start()
	t.Cleanup(m.Stop)
	return m
}

// Start (re)starts the master on its port and waits until it answers.
func (m *Master) Start() {
	m.t.Helper()
	m.cmd = exec.Command("rosmaster", "--core", "-p", fmt.Sprint(m.port))
	m.cmd.Env = m.Env
	m.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := m.cmd.Start(); err != nil {
		m.t.Fatalf("starting rosmaster: %v", err)
	}
	client := apimaster.NewClient(m.Addr, "/rostest", &http.Client{Timeout: time.Second})
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if _, err := client.GetURI(); err == nil {
			return
		}
		if time.Now().After(deadline) {
			m.t.Fatalf("rosmaster on port %d did not answer within 15 s", m.port)
		}
	}
}

// Stop ends the master with SIGTERM (a background Python ignores SIGINT).
func (m *Master) Stop() {
	if m.cmd == nil || m.cmd.Process == nil {
		return
	}
	_ = syscall.Kill(-m.cmd.Process.Pid, syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = m.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		_ = syscall.Kill(-m.cmd.Process.Pid, syscall.SIGKILL)
		<-done
	}
	m.cmd = nil
}

// Knows reports whether the master has a node of that name registered.
func (m *Master) Knows(node string) bool {
	client := apimaster.NewClient(m.Addr, "/rostest", &http.Client{Timeout: time.Second})
	_, err := client.LookupNode(node)
	return err == nil
}

// WaitSubscribed waits until topic has a subscriber whose name has the prefix.
func (m *Master) WaitSubscribed(t testing.TB, topic, nodePrefix string, timeout time.Duration) {
	t.Helper()
	for deadline := time.Now().Add(timeout); !m.Subscribed(topic, nodePrefix); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no subscriber %s* on %s after %v", nodePrefix, topic, timeout)
		}
	}
}

// Subscribed says whether the master lists a node named nodePrefix* as a
// subscriber of topic now.
func (m *Master) Subscribed(topic, nodePrefix string) bool {
	client := apimaster.NewClient(m.Addr, "/rostest", &http.Client{Timeout: time.Second})
	st, err := client.GetSystemState()
	if err != nil {
		return false
	}
	for _, e := range st.SubscribedTopics {
		if e.Name != topic {
			continue
		}
		for _, n := range e.Nodes {
			if strings.HasPrefix(n, nodePrefix) {
				return true
			}
		}
	}
	return false
}

// Command prepares a ROS tool with the master's environment.
func (m *Master) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = m.Env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM) }
	cmd.WaitDelay = 3 * time.Second
	return cmd
}

// Run runs a ROS tool to completion and returns its combined output.
func (m *Master) Run(t testing.TB, timeout time.Duration, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var out bytes.Buffer
	cmd := m.Command(ctx, name, args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out.String())
	}
	return out.String()
}

// Frames loads the first n real frames of ../shared/data/courthouse as RGBA.
func Frames(t testing.TB, n int) []*image.RGBA {
	t.Helper()
	dir, err := shared.Path("data", "courthouse")
	if err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob(filepath.Join(dir, "*.png"))
	if err != nil || len(files) < n {
		t.Fatalf("want %d PNG frames in %s, found %d (%v)", n, dir, len(files), err)
	}
	sort.Strings(files)
	var out []*image.RGBA
	for _, f := range files[:n] {
		fh, err := os.Open(f)
		if err != nil {
			t.Fatal(err)
		}
		img, _, err := image.Decode(fh)
		fh.Close()
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		rgba := image.NewRGBA(img.Bounds())
		draw.Draw(rgba, rgba.Bounds(), img, img.Bounds().Min, draw.Src)
		out = append(out, rgba)
	}
	return out
}

// ImageMsg packs an RGBA image as an rgb8 sensor_msgs/Image.
func ImageMsg(img *image.RGBA, h std_msgs.Header) *sensor_msgs.Image {
	w, ht := img.Bounds().Dx(), img.Bounds().Dy()
	data := make([]byte, 0, 3*w*ht)
	for y := 0; y < ht; y++ {
		row := img.Pix[y*img.Stride:]
		for x := 0; x < w; x++ {
			data = append(data, row[4*x], row[4*x+1], row[4*x+2])
		}
	}
	return &sensor_msgs.Image{Header: h, Height: uint32(ht), Width: uint32(w), Encoding: "rgb8", Step: uint32(3 * w), Data: data}
}

// Stamp0 is the first frame's stamp in the test bags; frames are 0.1 s apart.
var Stamp0 = time.Unix(1700000000, 0)

// StampOf is the stamp of frame i.
func StampOf(i int) time.Time { return Stamp0.Add(time.Duration(i) * 100 * time.Millisecond) }

// BagMsg is one message of a test bag.
type BagMsg struct {
	Topic string
	Time  time.Time
	Msg   any
}

// FrameMsgs makes rgb8 images of frames on topic with frame_id
// "camera_optical", seq i and stamp (and record time) StampOf(i).
func FrameMsgs(topic string, frames []*image.RGBA) []BagMsg {
	var out []BagMsg
	for i, f := range frames {
		h := std_msgs.Header{Seq: uint32(i), Stamp: StampOf(i), FrameId: "camera_optical"}
		out = append(out, BagMsg{Topic: topic, Time: StampOf(i), Msg: ImageMsg(f, h)})
	}
	return out
}

// WriteBag writes the messages, in order, with the Go bag writer (msgs/bag);
// rosbag info and rosbag play read it back in the tests.
func WriteBag(t testing.TB, path string, msgs []BagMsg) {
	t.Helper()
	w, err := bag.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range msgs {
		if err := w.Write(m.Topic, m.Time, m.Msg); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}
