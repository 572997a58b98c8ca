//go:build ros2

package ros2

import (
	"bufio"
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bluenviron/goroslib/v2/pkg/msgs/geometry_msgs"
	"github.com/bluenviron/goroslib/v2/pkg/msgs/sensor_msgs"
	"github.com/bluenviron/goroslib/v2/pkg/msgs/std_msgs"

	"github.com/lingbotmap/lingbotmap/msgs"
	"github.com/lingbotmap/lingbotmap/node"
	"github.com/lingbotmap/lingbotmap/node/ros2/dds"
	"github.com/lingbotmap/lingbotmap/node/ros2/fastdds"
	"github.com/lingbotmap/lingbotmap/node/ros2/ros2test"
)

func TestMain(m *testing.M) { ros2test.InNetns(m) }

// poseHash is REP 2011's hash of geometry_msgs/msg/PoseStamped (../shared/docs/ros2-notes.md).
const poseHash = "RIHS01_10f3786d7d40fd2b54367835614bff85d4ad3b5dab62bf8bca0cc232d73b4cd8"

func peers(t *testing.T) ros2test.Peers {
	t.Helper()
	p, err := ros2test.BuildPeers()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// connected starts a transport for node /lingbotmap with extra ROS args.
func connected(t *testing.T, rosArgs ...string) *Transport {
	t.Helper()
	return connectedEnv(t, nil, rosArgs...)
}

// connectedEnv is connected with ROS_* variables from env.
func connectedEnv(t *testing.T, env map[string]string, rosArgs ...string) *Transport {
	t.Helper()
	a, _, err := ParseArgs(append([]string{"--ros-args"}, rosArgs...), func(k string) string { return env[k] }, "lingbotmap")
	if err != nil {
		t.Fatal(err)
	}
	tr, err := New(a, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Connect(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := tr.Close(); err != nil {
			t.Error(err)
		}
	})
	return tr
}

// peerProc is a C peer running in the background; its output lines arrive on lines.
type peerProc struct {
	cmd   *exec.Cmd
	lines chan string
	done  chan struct{} // closed when the peer exited, err set
	err   error
	out   strings.Builder
	mu    sync.Mutex
}

func startPeer(t *testing.T, bin string, args ...string) *peerProc {
	t.Helper()
	return startPeerEnv(t, nil, 40*time.Second, bin, args...)
}

// startPeerEnv starts a peer with extra environment variables, killed after timeout.
func startPeerEnv(t *testing.T, env []string, timeout time.Duration, bin string, args ...string) *peerProc {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	p := &peerProc{cmd: exec.CommandContext(ctx, bin, args...), lines: make(chan string, 100), done: make(chan struct{})}
	p.cmd.Env = append(os.Environ(), env...)
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p.cmd.Stderr = p.cmd.Stdout
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			p.mu.Lock()
			p.out.WriteString(sc.Text() + "\n")
			p.mu.Unlock()
			select {
			case p.lines <- sc.Text():
			default:
			}
		}
		p.err = p.cmd.Wait()
		close(p.done)
		cancel()
	}()
	t.Cleanup(func() {
		cancel()
		<-p.done
	})
	return p
}

func (p *peerProc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

// waitLine waits for an output line that contains want.
func (p *peerProc) waitLine(t *testing.T, want string) string {
	t.Helper()
	timeout := time.After(20 * time.Second)
	for {
		select {
		case l := <-p.lines:
			if strings.Contains(l, want) {
				return l
			}
		case <-timeout:
			t.Fatalf("peer never printed %q; it said:\n%s", want, p.output())
		}
	}
}

func (p *peerProc) wait(t *testing.T) {
	t.Helper()
	select {
	case <-p.done:
		if p.err != nil {
			t.Fatalf("peer failed: %v\n%s", p.err, p.output())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("peer did not finish; it said:\n%s", p.output())
	}
}

// The Cyclone C peer's images (idlc types, best effort) reach Subscribe decoded.
func TestPeerImagesReachSubscribe(t *testing.T) {
	pe := peers(t)
	tr := connected(t)
	got := make(chan *sensor_msgs.Image, 10)
	sub, err := tr.Subscribe(node.TopicSpec{Name: tr.Resolve("/camera/image_raw"), Type: &sensor_msgs.Image{}, Role: node.RoleSensor},
		func(msg any, err error) {
			if err != nil {
				t.Errorf("decoding the peer's image: %v", err)
				return
			}
			got <- msg.(*sensor_msgs.Image)
		})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	const w, h = 64, 48
	p := startPeer(t, pe.CyclonePeer, "pub-image", "3", "64", "48")
	for i := range 3 {
		select {
		case m := <-got:
			if m.Width != w || m.Height != h || m.Encoding != "rgb8" || m.Step != 3*w || m.Header.FrameId != "camera" || len(m.Data) != w*h*3 {
				t.Fatalf("image %d: %dx%d %s step %d frame %q, %d bytes", i, m.Width, m.Height, m.Encoding, m.Step, m.Header.FrameId, len(m.Data))
			}
			for j, b := range m.Data {
				if b != byte((j*7+i)&0xff) {
					t.Fatalf("image %d byte %d = %d", i, j, b)
				}
			}
			if time.Since(m.Header.Stamp) > time.Minute || time.Since(m.Header.Stamp) < 0 {
				t.Errorf("image %d stamp %v", i, m.Header.Stamp)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("got %d of 3 images; peer said:\n%s", i, p.output())
		}
	}
	p.wait(t)
}

func testPose(x float64) *geometry_msgs.PoseStamped {
	return &geometry_msgs.PoseStamped{
		Header: std_msgs.Header{Stamp: time.Unix(1700000000, 250000000), FrameId: "map"},
		Pose: geometry_msgs.Pose{
			Position:    geometry_msgs.Point{X: x, Y: 2, Z: -3.5},
			Orientation: geometry_msgs.Quaternion{X: 0, Y: 0, Z: 0.6, W: 0.8},
		},
	}
}

// Our PoseStamped reaches the Cyclone C peer's idlc-typed reader.
func TestPoseReachesPeer(t *testing.T) {
	pe := peers(t)
	tr := connected(t)
	pub, err := tr.Advertise(node.TopicSpec{Name: tr.Resolve("~/pose"), Type: &geometry_msgs.PoseStamped{}, Role: node.RoleOutput})
	if err != nil {
		t.Fatal(err)
	}
	p := startPeer(t, pe.CyclonePeer, "sub-pose", "2")
	// The peer exits after two poses; publish until it has them.
	for i := 0; ; i++ {
		if err := pub.Write(testPose(1.25)); err != nil {
			t.Fatal(err)
		}
		select {
		case <-p.done:
			out := p.output()
			if p.err != nil {
				t.Fatalf("peer: %v\n%s", p.err, out)
			}
			want := "stamp=1700000000.250000000 frame=map p=(1.250,2.000,-3.500) q=(0.0000,0.0000,0.6000,0.8000)"
			if strings.Count(out, want) != 2 {
				t.Fatalf("peer did not print %q twice:\n%s", want, out)
			}
			return
		case <-time.After(100 * time.Millisecond):
		}
		if i > 200 {
			t.Fatalf("peer never got two poses:\n%s", p.output())
		}
	}
}

func TestWrongTypeRejected(t *testing.T) {
	tr := connected(t)
	pub, err := tr.Advertise(node.TopicSpec{Name: "/lingbotmap/pose", Type: &geometry_msgs.PoseStamped{}, Role: node.RoleOutput})
	if err != nil {
		t.Fatal(err)
	}
	if err := pub.Write(&sensor_msgs.Image{}); err == nil {
		t.Error("an Image was published on a PoseStamped topic")
	}
	if _, err := tr.Advertise(node.TopicSpec{Name: "/x", Type: &geometry_msgs.PoseStamped{}, Role: node.Role(99)}); err == nil {
		t.Error("an unknown role was accepted")
	}
}

// A client on the C API (its own request header, idlc types) calls our
// Trigger services and gets their replies.
func TestTriggerService(t *testing.T) {
	pe := peers(t)
	tr := connected(t, "-r", "__ns:=/robot")
	var calls atomic.Int32
	save, err := tr.ServeTrigger(tr.Resolve("~/save_map"), func(ctx context.Context) (string, error) {
		calls.Add(1)
		return "saved 3 points", nil
	})
	if err != nil {
		t.Fatal(err)
	}
	defer save.Close()
	if _, err := tr.ServeTrigger(tr.Resolve("~/reset"), func(ctx context.Context) (string, error) {
		return "", errors.New("engine busy")
	}); err != nil {
		t.Fatal(err)
	}
	p := startPeer(t, pe.Client, "trigger", "/robot/lingbotmap/save_map")
	p.waitLine(t, "trigger reply: mine=1 success=1 message=saved 3 points")
	p.wait(t)
	if n := calls.Load(); n != 1 {
		t.Errorf("handler called %d times, want 1", n)
	}
	p = startPeer(t, pe.Client, "trigger", "/robot/lingbotmap/reset")
	p.waitLine(t, "trigger reply: mine=1 success=0 message=engine busy")
	p.wait(t)
}

// A latched topic hands its last message to a reader that joins later.
func TestLatchedLateJoiner(t *testing.T) {
	pe := peers(t)
	tr := connected(t)
	pub, err := tr.Advertise(node.TopicSpec{Name: tr.Resolve("~/latched_pose"), Type: &geometry_msgs.PoseStamped{}, Role: node.RoleLatched})
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range []float64{1, 7} {
		if err := pub.Write(testPose(x)); err != nil {
			t.Fatal(err)
		}
	}
	p := startPeer(t, pe.Client, "latched-pose", "/lingbotmap/latched_pose")
	p.waitLine(t, "latched pose: stamp=1700000000.250000000 frame=map p=(7.000,2.000,-3.500)")
	p.wait(t)
}

// A writer carries its type hash in USER_DATA, and peers see it go when the
// transport closes.
func TestTypeHashAndLeave(t *testing.T) {
	pe := peers(t)
	a, _, err := ParseArgs(nil, func(string) string { return "" }, "lingbotmap")
	if err != nil {
		t.Fatal(err)
	}
	tr, err := New(a, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Connect(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := tr.Advertise(node.TopicSpec{Name: "/lingbotmap/pose", Type: &geometry_msgs.PoseStamped{}, Role: node.RoleOutput}); err != nil {
		t.Fatal(err)
	}
	p := startPeer(t, pe.Client, "watch-pose", "/lingbotmap/pose")
	ud := p.waitLine(t, "writer user_data:")
	if !strings.Contains(ud, "typehash="+poseHash+";") {
		t.Errorf("USER_DATA %q lacks the PoseStamped type hash", ud)
	}
	q := p.waitLine(t, "writer qos:")
	if !strings.Contains(q, "reliable=1 transient_local=0 type=geometry_msgs::msg::dds_::PoseStamped_") {
		t.Errorf("writer %s", q)
	}
	if err := tr.Close(); err != nil {
		t.Fatal(err)
	}
	p.waitLine(t, "writer gone")
	p.wait(t)
}

// ros_discovery_info, decoded by the C client with idlc types, lists the
// node with its readers and writers.
func TestDiscoveryInfo(t *testing.T) {
	pe := peers(t)
	// The C client's idlc types have Humble's 24-byte Gid.
	tr := connectedEnv(t, map[string]string{"ROS_DISTRO": "humble"}, "-r", "__node:=mapper", "-r", "__ns:=/robot")
	if _, err := tr.Advertise(node.TopicSpec{Name: tr.Resolve("~/pose"), Type: &geometry_msgs.PoseStamped{}, Role: node.RoleOutput}); err != nil {
		t.Fatal(err)
	}
	if _, err := tr.Subscribe(node.TopicSpec{Name: tr.Resolve("image"), Type: &sensor_msgs.Image{}, Role: node.RoleSensor}, func(any, error) {}); err != nil {
		t.Fatal(err)
	}
	if _, err := tr.ServeTrigger(tr.Resolve("~/save_map"), func(context.Context) (string, error) { return "", nil }); err != nil {
		t.Fatal(err)
	}
	p := startPeer(t, pe.Client, "discovery", "/robot/mapper")
	p.waitLine(t, "node /robot/mapper readers=2 writers=2")
	p.wait(t)
	// The gid is the GUID, zero padded to Humble's 24 bytes.
	want := "participant " + hexGUID(tr.pp.GUID()) + "0000000000000000\n"
	if !strings.Contains(p.output(), want) {
		t.Errorf("participant gid is not %s:\n%s", want, p.output())
	}
}

func hexGUID(g dds.GUID) string {
	const digits = "0123456789abcdef"
	var b strings.Builder
	for _, x := range g {
		b.WriteByte(digits[x>>4])
		b.WriteByte(digits[x&15])
	}
	return b.String()
}

// Corrupt samples reach the handler as *msgs.DecodeError; good ones after
// them still arrive.
func TestCorruptCDR(t *testing.T) {
	tr := connected(t)
	type result struct {
		msg any
		err error
	}
	got := make(chan result, 10)
	// Reliable with depth 10, so the burst below cannot overwrite itself in the history.
	sub, err := tr.Subscribe(node.TopicSpec{Name: "/lingbotmap/in", Type: &geometry_msgs.PoseStamped{}, Role: node.RoleOutput},
		func(msg any, err error) { got <- result{msg, err} })
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	pp, err := dds.NewParticipant(dds.ParticipantConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer pp.Close()
	w, err := pp.NewWriter("rt/lingbotmap/in", "geometry_msgs::msg::dds_::PoseStamped_", dds.QoS{Reliable: true, Depth: 10})
	if err != nil {
		t.Fatal(err)
	}
	good, err := marshal(testPose(4))
	if err != nil {
		t.Fatal(err)
	}
	bad := [][]byte{
		{},                 // empty
		{0, 1, 0, 0, 1, 2}, // truncated
		{0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0x7f}, // frame id length far past the end
		append([]byte{0, 1, 0, 0}, good[4:20]...),                    // cut in the middle
		append([]byte{0, 9, 0, 0}, good[4:]...),                      // unknown encapsulation
	}
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if m, _ := w.Matched(); m > 0 {
			break
		}
		if time.Now().After(end) {
			t.Fatal("the subscription never matched the writer")
		}
	}
	for _, b := range bad {
		if err := w.Write(b); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Write(good); err != nil {
		t.Fatal(err)
	}
	for i := range len(bad) + 1 {
		select {
		case r := <-got:
			if i < len(bad) {
				var de *msgs.DecodeError
				if r.msg != nil || !errors.As(r.err, &de) {
					t.Errorf("corrupt sample %d: msg %v, err %v; want nil and a *msgs.DecodeError", i, r.msg, r.err)
				}
				continue
			}
			pose, ok := r.msg.(*geometry_msgs.PoseStamped)
			if r.err != nil || !ok || pose.Pose.Position.X != 4 || pose.Header.FrameId != "map" {
				t.Errorf("good sample after corrupt ones: %+v, %v", r.msg, r.err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("got %d of %d samples", i, len(bad)+1)
		}
	}
}

// With ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST (no multicast, loopback only)
// the node still meets a peer configured the same way; with OFF it meets
// no one.
func TestDiscoveryRanges(t *testing.T) {
	pe := peers(t)
	publish := func(tr *Transport) {
		t.Helper()
		pub, err := tr.Advertise(node.TopicSpec{Name: "/lingbotmap/latched_pose", Type: &geometry_msgs.PoseStamped{}, Role: node.RoleLatched})
		if err != nil {
			t.Fatal(err)
		}
		if err := pub.Write(testPose(5)); err != nil {
			t.Fatal(err)
		}
	}
	t.Run("localhost", func(t *testing.T) {
		tr := connectedEnv(t, map[string]string{"ROS_AUTOMATIC_DISCOVERY_RANGE": "LOCALHOST"})
		publish(tr)
		uri := "CYCLONEDDS_URI=" + cycloneConfig(DiscoveryLocalhost, nil, 0, "")
		p := startPeerEnv(t, []string{uri}, 40*time.Second, pe.Client, "latched-pose", "/lingbotmap/latched_pose")
		p.waitLine(t, "latched pose: stamp=1700000000.250000000 frame=map p=(5.000,2.000,-3.500)")
		p.wait(t)
	})
	t.Run("off", func(t *testing.T) {
		tr := connectedEnv(t, map[string]string{"ROS_AUTOMATIC_DISCOVERY_RANGE": "OFF"})
		publish(tr)
		p := startPeerEnv(t, nil, 3*time.Second, pe.Client, "latched-pose", "/lingbotmap/latched_pose")
		<-p.done
		if out := p.output(); strings.Contains(out, "latched pose") {
			t.Fatalf("a peer found the node with discovery OFF:\n%s", out)
		}
	})
}

// Malformed requests are dropped and counted; the service keeps answering.
// They come from a Fast DDS writer of this process (samples of a second
// Cyclone participant of this process did not reach the service's Fast DDS
// readers here); test/jazzy_services_test.go sends malformed requests from
// Cyclone and Fast DDS writers of another process.
func TestTriggerServiceSurvivesBadRequests(t *testing.T) {
	pe := peers(t)
	tr := connected(t)
	var calls atomic.Int32
	if _, err := tr.ServeTrigger("/lingbotmap/pause", func(context.Context) (string, error) {
		calls.Add(1)
		return "paused", nil
	}); err != nil {
		t.Fatal(err)
	}
	pp, err := fastdds.NewParticipant(fastdds.ParticipantConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer pp.Close()
	w, err := pp.NewWriter("rq/lingbotmap/pauseRequest", "std_srvs::srv::dds_::Trigger_Request_", fastdds.QoS{Reliable: true, Depth: 10})
	if err != nil {
		t.Fatal(err)
	}
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		// the service's two request readers (service.go)
		if m, _ := w.Matched(); m >= 2 {
			break
		}
		if time.Now().After(end) {
			t.Fatal("the service never matched the writer")
		}
	}
	// No body at all; an unknown encapsulation.
	bad := [][]byte{{0, 1, 0, 0}, {7, 7, 7, 7, 0, 0, 0, 0}}
	for _, b := range bad {
		if err := w.Write(b, fastdds.Identity{}); err != nil {
			t.Fatal(err)
		}
	}
	p := startPeer(t, pe.Client, "trigger", "/lingbotmap/pause")
	p.waitLine(t, "trigger reply: mine=1 success=1 message=paused")
	p.wait(t)
	// Each malformed request is counted once (on /diagnostics), though it
	// reaches both request readers.
	for end := time.Now().Add(10 * time.Second); tr.Stats().BadRequests != int64(len(bad)); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("Stats().BadRequests = %d, want %d (the malformed requests)", tr.Stats().BadRequests, len(bad))
		}
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("handler called %d times; malformed requests must not reach it", n)
	}
}
