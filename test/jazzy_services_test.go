//go:build ros2

package test

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/lingbotmap/lingbotmap/node"
	"github.com/lingbotmap/lingbotmap/node/ros2/dds"
	"github.com/lingbotmap/lingbotmap/node/ros2/fastdds"
)

// rmwFastDDSDynamic is rmw_fastrtps's other flavour (type support by
// introspection); it shares rmw_fastrtps_shared_cpp's service code.
const rmwFastDDSDynamic = "rmw_fastrtps_dynamic_cpp"

// triggerReplies are the node's std_srvs/srv/Trigger services (node/services.go)
// and what each replies on a node that has seen no frames; save_dir is dir.
func triggerReplies(dir string) []struct{ name, reply string } {
	return []struct{ name, reply string }{
		{"pause", `success=True, message='paused: incoming images are ignored'`},
		{"resume", `success=True, message='resumed'`},
		{"reset", `success=True, message='map reset'`},
		{"save_map", fmt.Sprintf(`success=True, message='wrote 0 points to %s and 0 poses to %s and a `,
			filepath.Join(dir, "map.ply"), filepath.Join(dir, "trajectory.tum"))},
		{"save_session", fmt.Sprintf(`success=True, message='wrote the session (0 poses, 0 map points, the engine state) to %s'`,
			filepath.Join(dir, node.SessionDir, node.SessionFile))},
		// the session save_session just wrote
		{"load_map", fmt.Sprintf(`success=True, message='loaded %s: 0 poses, 0 map points, 0 frames in the engine cache, unscaled; mapping on'`,
			filepath.Join(dir, node.SessionDir, node.SessionFile))},
	}
}

// TestJazzyServices calls every std_srvs/srv/Trigger service of the node
// with the real `ros2 service call` of Jazzy under each of its RMWs and
// checks each reply, then a parameter service and `ros2 param
// list/describe/set/get` (list_parameters, describe_parameters,
// set_parameters, get_parameters) the same way.
// rmw_cyclonedds clients are answered by the node's Cyclone DDS side,
// rmw_fastrtps ones (Jazzy's default RMW) by its Fast DDS side: their
// clients keep only replies whose related sample identity names their
// request (rmw_fastrtps 8.4.1, rmw_fastrtps_shared_cpp/src/rmw_response.cpp
// lines 71-74), so a reply without one would never arrive.
func TestJazzyServices(t *testing.T) {
	if !inNetns(t) {
		return
	}
	dir := t.TempDir()
	startROS2Node(t, ros2NodeArgs(t, "srvnode", 154, "-p", "save_dir:="+dir)...)
	for _, rmw := range []string{rmwFastDDS, rmwFastDDSDynamic, rmwCyclone} {
		j := jazzyEnv(t, rmw)
		j.ros2Until(60*time.Second, "/srvnode/save_map", "service", "list", "--no-daemon")
		for _, s := range triggerReplies(dir) {
			name := "/srvnode/" + s.name
			out := j.ros2(60*time.Second, "service", "call", name, "std_srvs/srv/Trigger")
			want := "response:\nstd_srvs.srv.Trigger_Response(" + s.reply
			if !strings.Contains(out, want) {
				t.Errorf("%s: ros2 service call %s: want %q in:\n%s", rmw, name, want, out)
			} else {
				t.Logf("%s: ros2 service call %s: replied", rmw, name)
			}
		}
		// The rcl_interfaces parameter services go the same way.
		out := j.ros2(60*time.Second, "service", "call", "/srvnode/get_parameters", "rcl_interfaces/srv/GetParameters", "{names: [save_dir]}")
		if want := "string_value='" + dir + "'"; !strings.Contains(out, want) {
			t.Errorf("%s: ros2 service call /srvnode/get_parameters: want %q in:\n%s", rmw, want, out)
		}
		for _, c := range []struct {
			args []string
			want string
		}{
			{[]string{"param", "list", "/srvnode"}, "  save_dir\n"},
			{[]string{"param", "describe", "/srvnode", "save_dir"}, "Type: string"},
			{[]string{"param", "set", "/srvnode", "save_dir", dir}, "Set parameter successful"},
			{[]string{"param", "get", "/srvnode", "save_dir"}, "String value is: " + dir},
		} {
			// ros2 param finds the node in the graph first, which a new
			// process may not know yet ("Node not found"): it is retried.
			j.ros2Until(60*time.Second, c.want, c.args...)
			t.Logf("%s: ros2 %s: answered", rmw, strings.Join(c.args, " "))
		}
	}
}

// concurrentCalls is an rclpy program: one client per service named on its
// command line, each with several calls in flight at once (all sent before
// any reply is taken); it prints every reply with the service it came from.
const concurrentCalls = `
import sys
import rclpy
from std_srvs.srv import Trigger

rounds = int(sys.argv[1])
names = sys.argv[2:]
rclpy.init()
node = rclpy.create_node('concurrent_caller')
clients = {n: node.create_client(Trigger, n) for n in names}
for n, c in clients.items():
    if not c.wait_for_service(timeout_sec=60.0):
        print('NO SERVICE', n, flush=True)
        sys.exit(1)
calls = [(n, c.call_async(Trigger.Request())) for _ in range(rounds) for n, c in clients.items()]
print('SENT', len(calls), flush=True)
for n, f in calls:
    rclpy.spin_until_future_complete(node, f, timeout_sec=60.0)
    if not f.done():
        print('NO REPLY', n, flush=True)
        sys.exit(1)
    r = f.result()
    print('REPLY', n, r.success, r.message, flush=True)
node.destroy_node()
rclpy.shutdown()
`

// TestJazzyServiceConcurrentFastDDS has one rclpy process on rmw_fastrtps_cpp
// keep several calls to each of three services in flight at once: every call
// gets its own service's reply. The client pairs replies with calls by the
// sequence number of the reply's related sample identity
// (rmw_fastrtps 8.4.1, rmw_fastrtps_shared_cpp/src/rmw_response.cpp lines
// 86-88), which the node copies from each request's sample identity
// (rmw_request.cpp lines 111-117, 134-136 on the server side of
// rmw_fastrtps).
func TestJazzyServiceConcurrentFastDDS(t *testing.T) {
	if !inNetns(t) {
		return
	}
	startROS2Node(t, ros2NodeArgs(t, "ccnode", 154)...)
	j := jazzyEnv(t, rmwFastDDS)
	// The graph knows the services first (a call made while discovery is
	// still half-way is lost for any DDS server: a volatile reader skips
	// what its writer sent before the reader knew it).
	j.ros2Until(60*time.Second, "/ccnode/reset", "service", "list", "--no-daemon")
	const rounds = 4
	want := map[string]string{
		"/ccnode/pause":  "True paused: incoming images are ignored",
		"/ccnode/resume": "True resumed",
		"/ccnode/reset":  "True map reset",
	}
	script := filepath.Join(j.dir, "trigger_calls.py")
	if err := os.WriteFile(script, []byte(concurrentCalls), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := j.run(120*time.Second, j.Python(), script, fmt.Sprint(rounds), "/ccnode/pause", "/ccnode/resume", "/ccnode/reset")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if !strings.Contains(out, fmt.Sprintf("SENT %d", rounds*len(want))) {
		t.Fatalf("the client did not send its calls:\n%s", out)
	}
	got := map[string]int{}
	for _, line := range strings.Split(out, "\n") {
		rest, ok := strings.CutPrefix(line, "REPLY ")
		if !ok {
			continue
		}
		name, reply, _ := strings.Cut(rest, " ")
		if want[name] != reply {
			t.Errorf("call to %s got the reply %q, want %q", name, reply, want[name])
		}
		got[name]++
	}
	for name := range want {
		if got[name] != rounds {
			t.Errorf("%s: %d replies to %d calls:\n%s", name, got[name], rounds, out)
		}
	}
}

// TestJazzyServiceBadRequests sends malformed requests to the node's pause
// service from a Fast DDS writer (a body too short for
// std_srvs/srv/Trigger_Request) and a Cyclone DDS writer (shorter than
// rmw_cyclonedds's request header), and one well-formed request from a
// DDS vendor that is neither (a Fast DDS participant whose GUID prefix
// names RTI): each is rejected, counted on /diagnostics as
// service_requests_rejected, and the service still answers `ros2 service
// call` under rmw_fastrtps_cpp.
func TestJazzyServiceBadRequests(t *testing.T) {
	if !inNetns(t) {
		return
	}
	nodeP := startROS2Node(t, ros2NodeArgs(t, "badnode", 154)...)
	j := jazzyEnv(t, rmwFastDDS)
	j.ros2Until(60*time.Second, "/badnode/pause", "service", "list", "--no-daemon")
	const topic, typ = "rq/badnode/pauseRequest", "std_srvs::srv::dds_::Trigger_Request_"

	fp, err := fastdds.NewParticipant(fastdds.ParticipantConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer fp.Close()
	fw, err := fp.NewWriter(topic, typ, fastdds.QoS{Reliable: true, Depth: 10})
	if err != nil {
		t.Fatal(err)
	}
	// RTI's vendor id (01.01) starts the prefix of this one.
	rp, err := fastdds.NewParticipant(fastdds.ParticipantConfig{GUIDPrefix: []byte{1, 1, 0xaa, 0xbb, 1, 2, 3, 4, 5, 6, 7, 8}})
	if err != nil {
		t.Fatal(err)
	}
	defer rp.Close()
	rw, err := rp.NewWriter(topic, typ, fastdds.QoS{Reliable: true, Depth: 10})
	if err != nil {
		t.Fatal(err)
	}
	cp, err := dds.NewParticipant(dds.ParticipantConfig{XML: cycloneURI})
	if err != nil {
		t.Fatal(err)
	}
	defer cp.Close()
	cw, err := cp.NewWriter(topic, typ, dds.QoS{Reliable: true, Depth: 10})
	if err != nil {
		t.Fatal(err)
	}
	// The node has two readers on the topic, its Cyclone and Fast DDS sides.
	matched := func(m func() (int, error)) func() bool {
		return func() bool { n, _ := m(); return n >= 2 }
	}
	for what, ok := range map[string]func() bool{"Fast DDS": matched(fw.Matched), "RTI-prefixed": matched(rw.Matched), "Cyclone": matched(cw.Matched)} {
		waitUntil(t, 30*time.Second, what+" request writer matched with both of the node's readers", ok)
	}
	if err := fw.Write([]byte{0, 1, 0, 0}, fastdds.Identity{}); err != nil {
		t.Fatal(err)
	}
	if err := rw.Write([]byte{0, 1, 0, 0, 0, 0, 0, 0}, fastdds.Identity{}); err != nil {
		t.Fatal(err)
	}
	if err := cw.Write([]byte{0, 1, 0, 0, 0, 0, 0, 0}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 30*time.Second, "the node's log line on the RTI-prefixed request", func() bool {
		return strings.Contains(nodeP.out.String(), "DDS vendor 01.01")
	})
	re := regexp.MustCompile(`key: service_requests_rejected\s+value: '(\d+)'`)
	deadline := time.Now().Add(60 * time.Second)
	for {
		out := j.ros2(30*time.Second, "topic", "echo", "--once", "/diagnostics", "diagnostic_msgs/msg/DiagnosticArray")
		m := re.FindStringSubmatch(out)
		if m != nil && m[1] == "3" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/diagnostics service_requests_rejected: want 3, last:\n%s", out)
		}
	}
	for _, want := range []string{"client_rmw=rmw_fastrtps", "client_rmw=rmw_cyclonedds", "client_rmw=unknown"} {
		if !strings.Contains(nodeP.out.String(), want) {
			t.Errorf("no log line with %s:\n%s", want, nodeP.out.String())
		}
	}
	out := j.ros2(60*time.Second, "service", "call", "/badnode/pause", "std_srvs/srv/Trigger")
	if !strings.Contains(out, "success=True, message='paused: incoming images are ignored'") {
		t.Errorf("after the bad requests, ros2 service call got:\n%s", out)
	}
}

func waitUntil(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	end := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(end) {
			t.Fatalf("timed out waiting: %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
