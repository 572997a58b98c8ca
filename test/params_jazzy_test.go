//go:build ros2

package test

// The node's parameters and /rosout against the real ROS 2 Jazzy's ros2 CLI
// (issue #34 items 3 and 4): `ros2 param list/get/set/describe/dump`, a
// dump loaded back with --params-file, /parameter_events, /diagnostics
// counting refusals, and /rosout lines with --log-level and
// --disable-rosout-logs.

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lingbotmap/lingbotmap/config"
	"github.com/lingbotmap/lingbotmap/node"
)

// The REP 2011 hashes of rcl_interfaces' ParameterEvent and Log in Jazzy
// (msgs/cdr checks them against the installed type descriptions).
const (
	parameterEventHash = "RIHS01_043e627780fcad87a22d225bc2a037361dba713fca6a6b9f4b869a5aa0393204"
	logHash            = "RIHS01_e28ce254ca8abc06abf92773b74602cdbf116ed34fbaf294fb9f81da9f318eac"
)

// mustContain fails unless out holds every want.
func mustContain(t *testing.T, what, out string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Fatalf("%s: no %q in:\n%s", what, w, out)
		}
	}
}

func TestJazzyParams(t *testing.T) {
	if !inNetns(t) {
		return
	}
	first, second := t.TempDir(), t.TempDir()
	nd := startROS2Node(t, ros2NodeArgs(t, "lingbotmap", 154, "-p", "save_dir:="+first)...)
	j := jazzyEnv(t, rmwCyclone)
	param := func(args ...string) string {
		t.Helper()
		return j.ros2(60*time.Second, append(append([]string{"param"}, args...), "--no-daemon")...)
	}

	// list: every setting of the schema and use_sim_time
	list := j.ros2Until(60*time.Second, "  map_rate\n", "param", "list", "/lingbotmap", "--no-daemon")
	def := node.DefaultConfig()
	for _, k := range append(config.Keys(&def), "use_sim_time") {
		mustContain(t, "ros2 param list", list, "  "+k+"\n")
	}

	// get: the values the node runs with (-p and defaults)
	mustContain(t, "ros2 param get scale_frames", param("get", "/lingbotmap", "scale_frames"), "Integer value is: 3")
	mustContain(t, "ros2 param get save_dir", param("get", "/lingbotmap", "save_dir"), "String value is: "+first)
	mustContain(t, "ros2 param get cuda.pdl", param("get", "/lingbotmap", "cuda.pdl"), "Boolean value is: True")

	// describe: type, the shipped file's description, read-only flag, range
	mustContain(t, "ros2 param describe", param("describe", "/lingbotmap", "queue_size", "map_rate", "queue_policy"),
		"Parameter name: queue_size", "Type: integer", "Description: Frames waiting for the model.",
		"Read only: true", "Min value: 1",
		"Parameter name: map_rate", "Type: double", "Additional constraints: > 0",
		"Parameter name: queue_policy", "Additional constraints: one of latest, all")

	// /parameter_events carries the change
	events := j.start("ros2", "topic", "echo", "/parameter_events", "rcl_interfaces/msg/ParameterEvent")
	j.ros2Until(60*time.Second, "Subscription count: 1", "topic", "info", "/parameter_events", "--no-daemon")

	// set: a dynamic setting changes at once
	mustContain(t, "ros2 param set map_rate", param("set", "/lingbotmap", "map_rate", "4.5"), "Set parameter successful")
	mustContain(t, "ros2 param get map_rate", param("get", "/lingbotmap", "map_rate"), "Double value is: 4.5")
	events.waitOutput(t, "name: map_rate", 30*time.Second)
	events.waitOutput(t, "double_value: 4.5", 30*time.Second)

	// refusals with their reasons: read-only, wrong type, out of range
	mustContain(t, "ros2 param set queue_size", param("set", "/lingbotmap", "queue_size", "8"),
		"Setting parameter failed: parameter 'queue_size' is read-only while the node runs")
	mustContain(t, "ros2 param set map_rate fast", param("set", "/lingbotmap", "map_rate", "fast"),
		"Setting parameter failed: parameter 'map_rate' has type double; a value of type string cannot set it")
	mustContain(t, "ros2 param set map_rate -1.0", param("set", "/lingbotmap", "map_rate", "-1.0"),
		"Setting parameter failed: parameter 'map_rate' must be > 0")
	mustContain(t, "ros2 param set cloud_stride", param("set", "/lingbotmap", "cloud_stride", "0"),
		"Setting parameter failed: parameter 'cloud_stride' is read-only")
	mustContain(t, "ros2 param get map_rate", param("get", "/lingbotmap", "map_rate"), "Double value is: 4.5")
	// ... counted in /diagnostics with the last reason
	deadline := time.Now().Add(60 * time.Second)
	for {
		diag := j.ros2(60*time.Second, "topic", "echo", "--once", "/diagnostics", "diagnostic_msgs/msg/DiagnosticArray")
		if echoedValue(diag, "parameter_changes_refused") == "'4'" {
			mustContain(t, "/diagnostics", echoedValue(diag, "parameter_last_refusal"), "cloud_stride")
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/diagnostics never counted 4 refused parameter changes:\n%s", diag)
		}
	}

	// save_dir applies to the next ~/save_map
	mustContain(t, "ros2 param set save_dir", param("set", "/lingbotmap", "save_dir", second), "Set parameter successful")
	call := j.ros2(60*time.Second, "service", "call", "/lingbotmap/save_map", "std_srvs/srv/Trigger")
	mustContain(t, "ros2 service call save_map", call, "success=True", second)
	if _, err := os.Stat(filepath.Join(second, "trajectory.tum")); err != nil {
		t.Fatalf("~/save_map after save_dir:=%s: %v", second, err)
	}

	// The types on the wire are Jazzy's.
	mustContain(t, "ros2 topic info -v /parameter_events: the node's publisher",
		endpointOf(j.ros2(60*time.Second, "topic", "info", "-v", "/parameter_events", "--no-daemon"), "lingbotmap"),
		"Endpoint type: PUBLISHER", parameterEventHash, "RELIABLE", "VOLATILE", "KEEP_LAST (1000)")

	// dump, then a new node started from the dump has the changed values
	dump := param("dump", "/lingbotmap")
	mustContain(t, "ros2 param dump", dump, "/lingbotmap:", "ros__parameters:", "map_rate: 4.5", "save_dir: "+second,
		"cuda:", "pdl: true", "use_sim_time: false")
	file := filepath.Join(t.TempDir(), "lingbotmap.yaml")
	if err := os.WriteFile(file, []byte(dump), 0o644); err != nil {
		t.Fatal(err)
	}
	// ros2 param load of the dump into the running node: the read-only
	// settings are at their values already, so every set succeeds
	load := param("load", "/lingbotmap", file)
	if strings.Contains(load, "failed") || !strings.Contains(load, "Set parameter map_rate successful") {
		t.Fatalf("ros2 param load of the dump:\n%s", load)
	}
	if err := nd.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-nd.done:
		nd.done <- err
	case <-time.After(30 * time.Second):
		t.Fatal("the node did not stop within 30 s of SIGINT")
	}
	startROS2Node(t, "-r", "__node:=lingbotmap", "-r", "image:=/camera/image_raw", "--params-file", file)
	j.ros2Until(60*time.Second, "Double value is: 4.5", "param", "get", "/lingbotmap", "map_rate", "--no-daemon")
	mustContain(t, "ros2 param get save_dir (reloaded)", param("get", "/lingbotmap", "save_dir"), "String value is: "+second)
	mustContain(t, "ros2 param get image_width (reloaded)", param("get", "/lingbotmap", "image_width"), "Integer value is: 154")

	// Jazzy's default RMW: the same services answer rmw_fastrtps_cpp clients
	f := jazzyEnv(t, rmwFastDDS)
	fparam := func(args ...string) string {
		t.Helper()
		return f.ros2(60*time.Second, append(append([]string{"param"}, args...), "--no-daemon")...)
	}
	mustContain(t, "ros2 param list (Fast DDS)",
		f.ros2Until(60*time.Second, "  map_rate\n", "param", "list", "/lingbotmap", "--no-daemon"), "  use_sim_time\n", "  cuda.pdl\n")
	mustContain(t, "ros2 param get (Fast DDS)", fparam("get", "/lingbotmap", "map_rate"), "Double value is: 4.5")
	mustContain(t, "ros2 param set (Fast DDS)", fparam("set", "/lingbotmap", "map_rate", "5.5"), "Set parameter successful")
	mustContain(t, "ros2 param set queue_size (Fast DDS)", fparam("set", "/lingbotmap", "queue_size", "8"),
		"Setting parameter failed: parameter 'queue_size' is read-only while the node runs")
	mustContain(t, "ros2 param describe (Fast DDS)", fparam("describe", "/lingbotmap", "queue_size"),
		"Type: integer", "Read only: true", "Min value: 1")
	mustContain(t, "ros2 param dump (Fast DDS)", fparam("dump", "/lingbotmap"), "map_rate: 5.5", "save_dir: "+second)
}

func TestJazzyRosout(t *testing.T) {
	if !inNetns(t) {
		return
	}
	j := jazzyEnv(t, rmwCyclone)

	// --log-level warn: the refusal's warning is on /rosout, the info line
	// of the change that came before it is not.
	startROS2Node(t, ros2NodeArgs(t, "lingbotmap", 154, "--log-level", "warn")...)
	j.ros2Until(60*time.Second, "  map_rate\n", "param", "list", "/lingbotmap", "--no-daemon")
	// the node's own endpoint (the CLI's node publishes /rosout too)
	mustContain(t, "ros2 topic info -v /rosout: the node's publisher",
		endpointOf(j.ros2(60*time.Second, "topic", "info", "-v", "/rosout", "--no-daemon"), "lingbotmap"),
		"Endpoint type: PUBLISHER", logHash, "RELIABLE", "TRANSIENT_LOCAL", "KEEP_LAST (1000)", "Lifespan: 10000000000 nanoseconds")
	echo := j.start("ros2", "topic", "echo", "/rosout", "rcl_interfaces/msg/Log")
	j.ros2Until(60*time.Second, "Subscription count: 1", "topic", "info", "/rosout", "--no-daemon")
	j.ros2(60*time.Second, "param", "set", "/lingbotmap", "map_rate", "3.0", "--no-daemon")
	j.ros2(60*time.Second, "param", "set", "/lingbotmap", "queue_size", "3", "--no-daemon")
	echo.waitOutput(t, "parameter=queue_size", 30*time.Second)
	out := echo.out.String()
	mustContain(t, "ros2 topic echo /rosout", out, "level: 30", "name: lingbotmap", "file: ", "params.go", "function: ")
	if strings.Contains(out, "parameters changed") || strings.Contains(out, "level: 20") {
		t.Fatalf("--log-level warn, yet /rosout has info lines:\n%s", out)
	}
	_ = echo.stop(10 * time.Second)

	// the default level: info lines, and the ones before a subscriber came
	// (transient local)
	t.Run("default", func(t *testing.T) {
		startROS2Node(t, ros2NodeArgs(t, "lbm_info", 154)...)
		j.ros2Until(60*time.Second, "  map_rate\n", "param", "list", "/lbm_info", "--no-daemon")
		// Under each RMW a subscriber that is there when the node logs an
		// info line: the lines of its start may have outlived their 10 s
		// lifespan on a slow machine, and another node's kept lines may
		// come first, so neither --once nor the start lines can be relied on.
		for i, rmw := range []string{rmwCyclone, rmwFastDDS} {
			echo := jazzyEnv(t, rmw).start("ros2", "topic", "echo", "/rosout", "rcl_interfaces/msg/Log")
			j.ros2Until(60*time.Second, "Subscription count: 1", "topic", "info", "/rosout", "--no-daemon")
			j.ros2(60*time.Second, "param", "set", "/lbm_info", "map_rate", fmt.Sprintf("%d.0", 3+i), "--no-daemon")
			echo.waitOutput(t, "name: lbm_info", 60*time.Second)
			mustContain(t, rmw+": ros2 topic echo /rosout", echo.out.String(), "level: 20", "parameters changed")
			_ = echo.stop(10 * time.Second)
		}
	})

	// --disable-rosout-logs: the node publishes nothing on /rosout
	t.Run("disabled", func(t *testing.T) {
		startROS2Node(t, ros2NodeArgs(t, "lbm_quiet", 154, "--disable-rosout-logs")...)
		j.ros2Until(60*time.Second, "  map_rate\n", "param", "list", "/lbm_quiet", "--no-daemon")
		info := j.ros2(60*time.Second, "topic", "info", "-v", "/rosout", "--no-daemon")
		if strings.Contains(info, "Node name: lbm_quiet") {
			t.Fatalf("--disable-rosout-logs, yet lbm_quiet publishes /rosout:\n%s", info)
		}
		mustContain(t, "ros2 topic info -v /parameter_events",
			j.ros2(60*time.Second, "topic", "info", "-v", "/parameter_events", "--no-daemon"), "Node name: lbm_quiet")
	})
}

// echoedValue is the value of key in a diagnostic_msgs/KeyValue list as
// `ros2 topic echo` prints it ("" when absent).
func echoedValue(echo, key string) string {
	lines := strings.Split(echo, "\n")
	for i, l := range lines {
		if strings.TrimSpace(l) == "- key: "+key && i+1 < len(lines) {
			return strings.TrimPrefix(strings.TrimSpace(lines[i+1]), "value: ")
		}
	}
	return ""
}

// endpointOf is the part of `ros2 topic info -v` that describes the
// endpoints of node (from its "Node name:" line to the next one).
func endpointOf(info, node string) string {
	var out []string
	for _, block := range strings.Split(info, "Node name: ")[1:] {
		if strings.HasPrefix(block, node+"\n") {
			out = append(out, block)
		}
	}
	return strings.Join(out, "")
}
