//go:build ros2

package test

// The ROS 2 tests' environment: every test that starts a DDS participant runs
// inside ../shared/tools/netns-run.sh (a private network namespace with only
// loopback), the independent peers of test/ros2peers, and the binary built
// with -tags ros2.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/lingbotmap/lingbotmap/internal/shared"
	"github.com/lingbotmap/lingbotmap/internal/syncbuf"
)

const (
	// envNetns marks the test process that runs inside netns-run.sh.
	envNetns = "LINGBOTMAP_TEST_NETNS"
	// envPeers names the peers' build directory (test/ros2peers/build.sh).
	envPeers = "LINGBOTMAP_ROS2PEERS"
	// envBin names the lingbotmap binary built with -tags ros2 (set it to
	// use a binary built elsewhere).
	envBin = "LINGBOTMAP_ROS2_BIN"
	// cycloneURI keeps Cyclone DDS on loopback and lists 127.0.0.1 as a peer,
	// so that the Fast DDS peer (unicast only) and Cyclone find each other.
	cycloneURI = `<CycloneDDS><Domain id="any"><General><Interfaces><NetworkInterface name="lo"/></Interfaces></General>` +
		`<Discovery><ParticipantIndex>auto</ParticipantIndex><MaxAutoParticipantIndex>20</MaxAutoParticipantIndex>` +
		`<Peers><Peer address="127.0.0.1"/></Peers></Discovery></Domain></CycloneDDS>`
)

var (
	ros2BuildOnce sync.Once
	ros2Bin       string
	ros2BuildErr  error
)

// inNetns reports whether the test body should run in this process. Outside
// the namespace it builds the peers and the binary, runs this one test again
// inside netns-run.sh, fails with the child's output if the child failed, and
// returns false. Inside it checks that loopback is the only interface.
func inNetns(t *testing.T) bool {
	t.Helper()
	if os.Getenv(envNetns) == "1" {
		// net.Interfaces asks the kernel over netlink, which answers for
		// this namespace (/sys/class/net would show the host's).
		ifaces, err := net.Interfaces()
		if err != nil {
			t.Fatalf("listing network interfaces: %v", err)
		}
		for _, i := range ifaces {
			if i.Name != "lo" {
				t.Fatalf("interface %s exists: DDS tests must run in netns-run.sh's loopback-only namespace", i.Name)
			}
		}
		return true
	}
	script, err := shared.Path("tools", "netns-run.sh")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(script); err != nil {
		t.Fatalf("the DDS tests run inside %s: %v", script, err)
	}
	if os.Geteuid() != 0 {
		t.Fatal("the DDS tests need root: netns-run.sh makes a private network namespace (unshare --net)")
	}
	// The peers' npm packages may need the network, so they are built out
	// here, and the binary once for every test of this process.
	peers := ros2Peers(t)
	bin := ros2Binary(t)
	args := []string{os.Args[0], "-test.run", "^" + t.Name() + "$", "-test.count=1", "-test.v"}
	if dl, ok := t.Deadline(); ok {
		args = append(args, "-test.timeout", time.Until(dl).Round(time.Second).String())
	}
	cmd := exec.Command(script, args...)
	cmd.Env = append(os.Environ(), envNetns+"=1", envPeers+"="+peers, envBin+"="+bin, "CYCLONEDDS_URI="+cycloneURI)
	out, err := cmd.CombinedOutput()
	if err != nil || !bytes.Contains(out, []byte("--- PASS: "+t.Name())) {
		t.Fatalf("%s inside netns-run.sh: %v\n%s", t.Name(), err, out)
	}
	t.Logf("inside netns-run.sh:\n%s", out)
	return false
}

// ros2Peers builds test/ros2peers (cached between runs) and returns its directory.
func ros2Peers(t *testing.T) string {
	t.Helper()
	if d := os.Getenv(envPeers); d != "" {
		return d
	}
	cmd := exec.Command("bash", "ros2peers/build.sh")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("building the ROS 2 peers (test/ros2peers/build.sh; needs test/install-deps.sh): %v\n%s%s", err, out, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return lines[len(lines)-1]
}

// ros2Binary builds ./cmd/lingbotmap with -tags ros2 once per test process,
// into a directory of this process's own under the user's cache directory
// (outside the checkout; removed by TestMain): test processes of other
// packages or checkouts that build at the same time never write or run each
// other's binary.
func ros2Binary(t *testing.T) string {
	t.Helper()
	if b := os.Getenv(envBin); b != "" {
		return b
	}
	ros2BuildOnce.Do(func() {
		cache, err := os.UserCacheDir()
		if err != nil {
			ros2BuildErr = err
			return
		}
		parent := filepath.Join(cache, "lingbotmap", "ros2bin")
		if ros2BuildErr = os.MkdirAll(parent, 0o755); ros2BuildErr != nil {
			return
		}
		dir, err := os.MkdirTemp(parent, "build-")
		if err != nil {
			ros2BuildErr = err
			return
		}
		atExit = append(atExit, func() { os.RemoveAll(dir) })
		ros2Bin = filepath.Join(dir, "lingbotmap")
		out, err := exec.Command("go", "build", "-tags", "ros2", "-o", ros2Bin, "../cmd/lingbotmap").CombinedOutput()
		if err != nil {
			ros2BuildErr = fmt.Errorf("%v\n%s", err, out)
		}
	})
	if ros2BuildErr != nil {
		t.Fatalf("building lingbotmap -tags ros2: %v", ros2BuildErr)
	}
	return ros2Bin
}

// peerEvent is one JSON line of a peer (README.md in test/ros2peers); the
// fields a line lacks stay zero.
type peerEvent struct {
	Event        string           `json:"event"`
	Kind         string           `json:"kind"`
	Topic        string           `json:"topic"`
	N            int              `json:"n"`
	Index        int              `json:"index"`
	Stamp        peerStamp        `json:"stamp"`
	FrameID      string           `json:"frame_id"`
	ChildFrameID string           `json:"child_frame_id"`
	Position     [3]float64       `json:"position"`
	Orientation  [4]float64       `json:"orientation"`
	Poses        []peerEvent      `json:"poses"`
	Height       uint32           `json:"height"`
	Width        uint32           `json:"width"`
	Encoding     string           `json:"encoding"`
	Step         uint32           `json:"step"`
	PointStep    uint32           `json:"point_step"`
	RowStep      uint32           `json:"row_step"`
	IsDense      bool             `json:"is_dense"`
	Fields       json.RawMessage  `json:"fields"`
	DataLen      int              `json:"data_len"`
	FNV1a        string           `json:"fnv1a"`
	SHA256       string           `json:"sha256"`
	First        [][3]float64     `json:"first"`
	File         string           `json:"file"`
	Transforms   []peerTransform  `json:"transforms"`
	Status       []peerDiagStatus `json:"status"`
	GID          string           `json:"gid"`
	Nodes        []peerNodeEntity `json:"nodes"`
	Writers      int              `json:"writers"`
	Endpoints    []peerEndpoint   `json:"endpoints"`
	OK           bool             `json:"ok"`
	Success      bool             `json:"success"`
	Message      string           `json:"message"`
	Bytes        int              `json:"bytes"`
	RC           int              `json:"rc"`
	Count        int              `json:"count"`
	What         string           `json:"what"`
	Counts       map[string]int   `json:"counts"`
}

// peerEndpoint is a writer matched with a Cyclone listener's reader.
type peerEndpoint struct {
	GUID                string  `json:"guid"`
	Type                string  `json:"type"`
	UserData            string  `json:"userdata"`
	ParticipantUserData *string `json:"participant_userdata"`
}

type peerStamp struct {
	Sec     int32  `json:"sec"`
	Nanosec uint32 `json:"nanosec"`
}

func (s peerStamp) Time() time.Time { return time.Unix(int64(s.Sec), int64(s.Nanosec)) }

type peerTransform struct {
	Stamp        peerStamp  `json:"stamp"`
	FrameID      string     `json:"frame_id"`
	ChildFrameID string     `json:"child_frame_id"`
	Translation  [3]float64 `json:"translation"`
	Rotation     [4]float64 `json:"rotation"`
}

type peerDiagStatus struct {
	Level   int               `json:"level"`
	Name    string            `json:"name"`
	Message string            `json:"message"`
	Values  map[string]string `json:"values"`
}

type peerNodeEntity struct {
	Namespace string   `json:"namespace"`
	Name      string   `json:"name"`
	Readers   []string `json:"readers"`
	Writers   []string `json:"writers"`
}

// peer is a running peer process whose stdout is read as JSON lines.
type peer struct {
	name   string
	cmd    *exec.Cmd
	stdin  io.WriteCloser // set by startPeerStdin
	mu     sync.Mutex
	events []peerEvent
	log    bytes.Buffer // everything it printed, for failure messages
	done   chan error
}

// startPeer runs a program of the peers' directory (a .js file through node).
func startPeer(t *testing.T, prog string, args ...string) *peer {
	t.Helper()
	return startPeerWith(t, false, prog, args...)
}

// startPeerStdin is startPeer with a pipe to the peer's stdin (p.stdin), for
// the publishers' --stdin.
func startPeerStdin(t *testing.T, prog string, args ...string) *peer {
	t.Helper()
	return startPeerWith(t, true, prog, args...)
}

func startPeerWith(t *testing.T, withStdin bool, prog string, args ...string) *peer {
	t.Helper()
	dir := ros2Peers(t)
	var cmd *exec.Cmd
	if strings.HasSuffix(prog, ".js") || strings.HasSuffix(prog, ".mjs") {
		cmd = exec.Command("node", append([]string{prog}, args...)...)
	} else {
		cmd = exec.Command(filepath.Join(dir, prog), args...)
	}
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CYCLONEDDS_URI="+cycloneURI)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p := &peer{name: prog + " " + strings.Join(args, " "), cmd: cmd, done: make(chan error, 1)}
	cmd.Stderr = lockedWriter{p}
	if withStdin {
		if p.stdin, err = cmd.StdinPipe(); err != nil {
			t.Fatal(err)
		}
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", p.name, err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<20), 64<<20)
		for sc.Scan() {
			line := sc.Bytes()
			var ev peerEvent
			jerr := json.Unmarshal(line, &ev)
			p.mu.Lock()
			p.log.Write(line)
			p.log.WriteByte('\n')
			if jerr == nil {
				p.events = append(p.events, ev)
			}
			p.mu.Unlock()
		}
		p.done <- cmd.Wait()
	}()
	t.Cleanup(func() {
		p.stop()
		if t.Failed() {
			t.Logf("%s printed:\n%s", p.name, p.output())
		}
	})
	return p
}

type lockedWriter struct{ p *peer }

func (w lockedWriter) Write(b []byte) (int, error) {
	w.p.mu.Lock()
	defer w.p.mu.Unlock()
	return w.p.log.Write(b)
}

func (p *peer) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.log.String()
	if len(s) > 20000 {
		s = "...\n" + s[len(s)-20000:]
	}
	return s
}

// find returns the events that match.
func (p *peer) find(match func(e peerEvent) bool) []peerEvent {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []peerEvent
	for _, e := range p.events {
		if match(e) {
			out = append(out, e)
		}
	}
	return out
}

// msgs returns the messages received on topic.
func (p *peer) msgs(topic string) []peerEvent {
	return p.find(func(e peerEvent) bool { return e.Event == "msg" && (topic == "" || e.Topic == topic) })
}

// waitFor waits until at least n events match, failing after timeout.
func (p *peer) waitFor(t *testing.T, what string, n int, timeout time.Duration, match func(e peerEvent) bool) []peerEvent {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		evs := p.find(match)
		if len(evs) >= n {
			return evs
		}
		select {
		case err := <-p.done:
			p.done <- err
			if evs = p.find(match); len(evs) >= n {
				return evs
			}
			t.Fatalf("%s ended (%v) before %s (%d of %d)", p.name, err, what, len(evs), n)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s (%d of %d) from %s", timeout, what, len(evs), n, p.name)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// wait waits for the peer to exit and fails the test unless it exits 0.
func (p *peer) wait(t *testing.T, timeout time.Duration) {
	t.Helper()
	select {
	case err := <-p.done:
		p.done <- err
		if err != nil {
			t.Fatalf("%s: %v\n%s", p.name, err, p.output())
		}
	case <-time.After(timeout):
		t.Fatalf("%s did not end within %v", p.name, timeout)
	}
}

// run starts a peer and waits for it to succeed.
func runPeer(t *testing.T, timeout time.Duration, prog string, args ...string) *peer {
	t.Helper()
	p := startPeer(t, prog, args...)
	p.wait(t, timeout)
	return p
}

// stop ends the peer with SIGINT (SIGKILL if it does not go) and waits.
func (p *peer) stop() {
	select {
	case err := <-p.done:
		p.done <- err
		return
	default:
	}
	if p.stdin != nil {
		p.stdin.Close()
	}
	_ = p.cmd.Process.Signal(syscall.SIGINT)
	select {
	case err := <-p.done:
		p.done <- err
	case <-time.After(5 * time.Second):
		_ = p.cmd.Process.Kill()
		err := <-p.done
		p.done <- err
	}
}

// readDump reads a file a listener wrote with --dump.
func readDump(t *testing.T, e peerEvent) []byte {
	t.Helper()
	if e.File == "" {
		t.Fatalf("message %d on %s has no dump file", e.N, e.Topic)
	}
	b, err := os.ReadFile(e.File)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) != e.DataLen {
		t.Fatalf("%s: %d bytes, the message had %d", e.File, len(b), e.DataLen)
	}
	return b
}

// startROS2Node runs `lingbotmap node --ros=2 --ros-args ARGS...`.
func startROS2Node(t *testing.T, rosArgs ...string) *nodeProc {
	t.Helper()
	args := append([]string{"node", "--ros=2", "--ros-args"}, rosArgs...)
	p := &nodeProc{cmd: exec.Command(ros2Binary(t), args...), out: &syncbuf.Buffer{}, done: make(chan error, 1)}
	p.cmd.Env = append(os.Environ(), "CYCLONEDDS_URI="+cycloneURI)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.done <- p.cmd.Wait() }()
	t.Cleanup(func() {
		select {
		case err := <-p.done:
			p.done <- err
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

// exitedCleanly fails unless err is a clean exit.
func exitedCleanly(t *testing.T, what string, err error) {
	t.Helper()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		t.Fatalf("after %s the node exited with status %d, want 0", what, ee.ExitCode())
	}
	if err != nil {
		t.Fatalf("after %s: %v", what, err)
	}
}
