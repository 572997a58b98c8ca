//go:build ros2

package test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lingbotmap/lingbotmap/engine/mapframe"
	"github.com/lingbotmap/lingbotmap/internal/shared"
	"github.com/lingbotmap/lingbotmap/node/ros1/rostest"
)

// The node as the real ROS 2 Jazzy sees it: its graph (ros2 node list/info)
// and every output topic (ros2 topic echo, ros2 topic hz, an rclpy
// subscriber), under both of Jazzy's RMWs.

// nodeOutputs are the node's output topics with their types, for
// /lingbotmap with base_frame set (so that /tf_static carries a message).
var nodeOutputs = []struct {
	topic, typ string
	latched    bool   // reliable + transient-local
	field      string // a line of ros2 topic echo's YAML that only this type has
}{
	{"/lingbotmap/pose", "geometry_msgs/msg/PoseStamped", false, "  orientation:"},
	{"/lingbotmap/path", "nav_msgs/msg/Path", true, "poses:"},
	{"/lingbotmap/odom", "nav_msgs/msg/Odometry", false, "child_frame_id: base_link"},
	{"/lingbotmap/cloud", "sensor_msgs/msg/PointCloud2", false, "point_step: 16"},
	{"/lingbotmap/map", "sensor_msgs/msg/PointCloud2", true, "point_step: 16"},
	{"/lingbotmap/depth", "sensor_msgs/msg/Image", false, "encoding: 32FC1"},
	{"/lingbotmap/depth/camera_info", "sensor_msgs/msg/CameraInfo", false, "distortion_model: plumb_bob"},
	{"/map", "nav_msgs/msg/OccupancyGrid", true, "  map_load_time:"},
	{"/tf", "tf2_msgs/msg/TFMessage", false, "child_frame_id: base_link"},
	{"/tf_static", "tf2_msgs/msg/TFMessage", true, "child_frame_id: camera"},
	{"/diagnostics", "diagnostic_msgs/msg/DiagnosticArray", false, "key: frames_received"},
}

// manyParticipantsURI is cycloneURI with room for more participants.
var manyParticipantsURI = strings.Replace(cycloneURI, "<MaxAutoParticipantIndex>20<", "<MaxAutoParticipantIndex>60<", 1)

// nodeServices are the node's services.
var nodeServices = []string{"pause", "reset", "resume", "save_map", "save_session", "load_map"}

// TestJazzyNodeGraph: `ros2 node list` lists /lingbotmap and `ros2 node
// info /lingbotmap` its publishers, subscriber and services, with the CLI
// on rmw_cyclonedds_cpp and on rmw_fastrtps_cpp (Jazzy's default). A node
// told to write Humble's 24-byte Gid is not listed by Jazzy's CLI (which is
// why the size follows ROS_DISTRO) and logs the CLI's participants as peers
// of the other size. With cloud_reliability best_effort, ~/cloud and ~/map
// are offered best effort.
func TestJazzyNodeGraph(t *testing.T) {
	if !inNetns(t) {
		return
	}
	node := startROS2Node(t, ros2NodeArgs(t, "lingbotmap", 154, "-p", "base_frame:=base_link",
		"-p", "base_to_camera:=0 0 0 -0.5 0.5 -0.5 0.5")...)
	humble := startROS2Node(t, ros2NodeArgs(t, "humble_mapper", 154, "-p", "ros2_gid_size:=24",
		"-p", "cloud_reliability:=best_effort")...)
	for _, rmw := range []string{rmwCyclone, rmwFastDDS} {
		j := jazzyEnv(t, rmw)
		list := j.ros2Until(60*time.Second, "/lingbotmap\n", "node", "list", "--no-daemon")
		// Both nodes joined before; their topics show that the CLI found
		// the Humble one's participant, yet it has no node for it.
		j.ros2Until(30*time.Second, "/humble_mapper/pose", "topic", "list", "--no-daemon")
		list = j.ros2(30*time.Second, "node", "list", "--no-daemon")
		if strings.Contains(list, "humble_mapper") {
			t.Errorf("%s: Jazzy's ros2 node list decoded a 24-byte Gid:\n%s", rmw, list)
		}
		// Each --no-daemon run discovers the graph anew: until it has.
		info := j.ros2Until(60*time.Second, "/lingbotmap/save_session: std_srvs/srv/Trigger", "node", "info", "/lingbotmap", "--no-daemon")
		sections := map[string]string{} // "  Service Servers:" heads "    /x: type" lines
		section := ""
		for _, line := range strings.Split(info, "\n") {
			if strings.HasPrefix(line, "  ") && !strings.HasPrefix(line, "    ") && strings.HasSuffix(line, ":") {
				section = strings.TrimSuffix(strings.TrimSpace(line), ":")
				continue
			}
			sections[section] += strings.TrimSpace(line) + "\n"
		}
		for _, o := range nodeOutputs {
			if want := o.topic + ": " + o.typ + "\n"; !strings.Contains(sections["Publishers"], want) {
				t.Errorf("%s: ros2 node info lists no publisher %q:\n%s", rmw, want, info)
			}
		}
		if want := "/camera/image_raw: sensor_msgs/msg/Image\n"; !strings.Contains(sections["Subscribers"], want) {
			t.Errorf("%s: ros2 node info lists no subscriber %q:\n%s", rmw, want, info)
		}
		for _, s := range nodeServices {
			if want := "/lingbotmap/" + s + ": std_srvs/srv/Trigger\n"; !strings.Contains(sections["Service Servers"], want) {
				t.Errorf("%s: ros2 node info lists no service %q:\n%s", rmw, want, info)
			}
		}
		// best effort where asked, reliable by default
		for topic, want := range map[string]string{"/humble_mapper/cloud": "BEST_EFFORT", "/humble_mapper/map": "BEST_EFFORT",
			"/lingbotmap/cloud": "RELIABLE", "/lingbotmap/map": "RELIABLE"} {
			j.ros2Until(60*time.Second, "Reliability: "+want, "topic", "info", "-v", topic, "--no-daemon")
		}
	}
	if out := node.out.String(); !strings.Contains(out, `gid_bytes=16 gid_from="ROS_DISTRO`) {
		t.Errorf("the node's log does not name its Gid size:\n%s", out)
	}
	if out := humble.out.String(); !strings.Contains(out, "gid_bytes=24 gid_from=") ||
		!strings.Contains(out, "peer_gid_bytes=16") || strings.Contains(out, "panic") {
		t.Errorf("the 24-byte node did not log Jazzy's 16-byte participants:\n%s", out)
	}
}

// poseSubscriberPy is an rclpy subscriber of a PoseStamped topic that prints
// "ready" once it sees the topic's publisher, then each pose as a JSON line
// (the fields of peerEvent), until it has n of them.
const poseSubscriberPy = `
import json, sys
import rclpy
from rclpy.node import Node
from rclpy.qos import QoSProfile, ReliabilityPolicy
from geometry_msgs.msg import PoseStamped

topic, n = sys.argv[1], int(sys.argv[2])
rclpy.init()
node = Node('pose_check')
got = []

def on_pose(m):
    p, q = m.pose.position, m.pose.orientation
    print(json.dumps({"event": "msg", "n": len(got),
                      "stamp": {"sec": m.header.stamp.sec, "nanosec": m.header.stamp.nanosec},
                      "frame_id": m.header.frame_id,
                      "position": [p.x, p.y, p.z], "orientation": [q.x, q.y, q.z, q.w]}), flush=True)
    got.append(m)

node.create_subscription(PoseStamped, topic, on_pose, QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE))
while rclpy.ok() and node.count_publishers(topic) < 1:
    rclpy.spin_once(node, timeout_sec=0.1)
print(json.dumps({"event": "ready"}), flush=True)
while rclpy.ok() and len(got) < n:
    rclpy.spin_once(node, timeout_sec=0.5)
node.destroy_node()
rclpy.shutdown()
`

// TestJazzyTopics plays an MCAP of real frames (lingbotmap bag, played by
// lingbotmap bag play) into the node and reads every output with the real
// Jazzy: `ros2 topic echo --once TOPIC TYPE` of each output topic under both
// RMWs, `ros2 topic hz` of the pose while the bag plays, and an rclpy
// subscriber per RMW whose poses must equal the engine's on the same frames
// to 1e-6. A second node with cloud_reliability best_effort delivers its
// ~/cloud and ~/map to best-effort readers.
func TestJazzyTopics(t *testing.T) {
	if !inNetns(t) {
		return
	}
	const width, n = 154, 10
	bag, script := framesAndScript(t, n, "pose_check.py", poseSubscriberPy)

	node := startROS2Node(t, ros2NodeArgs(t, "lingbotmap", width, "-p", "base_frame:=base_link",
		"-p", "base_to_camera:=0 0 0 -0.5 0.5 -0.5 0.5", "-p", "map_rate:=20.0")...)
	// A second node on the same frames offers its clouds best effort. They
	// are kept small (every 4th pixel, coarse voxels): a best-effort sample
	// of hundreds of fragments is lost whole when one fragment is, and the
	// Fast DDS CLI's default socket buffer drops fragments of a burst that
	// large (launch/README.md, big messages).
	beNode := startROS2Node(t, ros2NodeArgs(t, "be_mapper", width, "-p", "cloud_reliability:=best_effort", "-p", "publish_tf:=false",
		"-p", "map_rate:=20.0", "-p", "cloud_stride:=4", "-p", "map_voxel:=0.5")...)
	type echo struct {
		rmw, topic, field string
		p                 *jazzyProc
	}
	var echoes []echo
	var subs []*jazzyProc
	hz := map[string]*jazzyProc{}
	for _, rmw := range []string{rmwCyclone, rmwFastDDS} {
		j := jazzyEnv(t, rmw)
		// About 25 participants at once, Cyclone's and Fast DDS's sharing
		// one range of participant indices (ports).
		j.env = append(j.env, "CYCLONEDDS_URI="+manyParticipantsURI)
		for _, o := range nodeOutputs {
			args := []string{"topic", "echo", "--once"}
			if o.latched {
				args = append(args, "--qos-durability", "transient_local", "--qos-reliability", "reliable")
			}
			echoes = append(echoes, echo{rmw, o.topic, o.field, j.start("ros2", append(args, o.topic, o.typ)...)})
		}
		for _, be := range []struct{ topic, durability string }{{"/be_mapper/cloud", "volatile"}, {"/be_mapper/map", "transient_local"}} {
			echoes = append(echoes, echo{rmw, be.topic, "point_step: 16", j.start("ros2", "topic", "echo", "--once",
				"--qos-reliability", "best_effort", "--qos-durability", be.durability, be.topic, "sensor_msgs/msg/PointCloud2")})
		}
		subs = append(subs, j.start(j.Python(), script, "/lingbotmap/pose", strconv.Itoa(n)))
		hz[rmw] = j.start("ros2", "topic", "hz", "--window", "5", "/lingbotmap/pose")
	}
	for _, s := range subs {
		s.waitOutput(t, `"event": "ready"`, 90*time.Second)
	}
	play := runOK(t, 120*time.Second, ros2Binary(t), "bag", "play", "--delay", "2s", "--rate", "0.3", bag,
		"--ros-args", "-r", "__node:=player")
	t.Logf("bag play: %s", strings.TrimSpace(play))

	frames := rostest.Frames(t, n)
	// in the node's z-up map frame (base_to_camera is the optical-to-body rotation)
	want := inMapFrame(t, engineResults(t, frames, width), mapframe.OpticalToBody())
	for i, s := range subs {
		s.waitOutput(t, fmt.Sprintf(`"n": %d,`, n-1), 90*time.Second)
		var got []peerEvent
		for _, line := range strings.Split(s.out.String(), "\n") {
			var e peerEvent
			if strings.HasPrefix(line, "{") && json.Unmarshal([]byte(line), &e) == nil && e.Event == "msg" {
				got = append(got, e)
			}
		}
		if len(got) != n {
			t.Fatalf("rclpy subscriber %d got %d poses, want %d:\n%s", i, len(got), n, s.out.String())
		}
		for k, e := range got {
			checkPose(t, "rclpy ("+[]string{rmwCyclone, rmwFastDDS}[i]+")", e, want[k])
		}
	}
	for rmw, p := range hz {
		if err := p.stop(10 * time.Second); err != nil {
			t.Logf("%s: ros2 topic hz after SIGINT: %v", rmw, err) // its output is what counts
		}
		rates := regexp.MustCompile(`average rate: ([0-9.]+)`).FindAllStringSubmatch(p.out.String(), -1)
		if len(rates) == 0 {
			t.Errorf("%s: ros2 topic hz printed no rate while the bag played:\n%s", rmw, p.out.String())
		}
		for _, r := range rates {
			if v, err := strconv.ParseFloat(r[1], 64); err != nil || !(v > 0) {
				t.Errorf("%s: ros2 topic hz: rate %q", rmw, r[1])
			}
		}
		t.Logf("%s: ros2 topic hz of the pose while the bag played at 3 frames/s: %q", rmw, rates)
	}
	for _, e := range echoes {
		select {
		case err := <-e.p.done:
			e.p.done <- err
			if err != nil {
				t.Errorf("%s: ros2 topic echo --once %s: %v\n%s", e.rmw, e.topic, err, e.p.out.String())
			}
		case <-time.After(60 * time.Second):
			t.Errorf("%s: ros2 topic echo --once %s got nothing:\n%s", e.rmw, e.topic, e.p.out.String())
			continue
		}
		if !strings.Contains(e.p.out.String(), e.field) {
			t.Errorf("%s: ros2 topic echo --once %s printed no %q:\n%s", e.rmw, e.topic, e.field, e.p.out.String())
		}
	}
	for _, p := range []*nodeProc{node, beNode} {
		if strings.Contains(p.out.String(), "level=ERROR") {
			t.Errorf("a node logged errors:\n%s", p.out.String())
		}
	}
}

// runOK runs a program to its end within timeout and returns its output,
// failing the test unless it succeeds.
func runOK(t *testing.T, timeout time.Duration, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(os.Environ(), "CYCLONEDDS_URI="+manyParticipantsURI)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// framesAndScript writes, in a fresh temp dir, an MCAP of the first n
// courthouse frames at 10 Hz stamped from rostest.Stamp0 (made by
// lingbotmap bag) and the Python script src as name; it returns both paths.
func framesAndScript(t *testing.T, n int, name, src string) (bag, script string) {
	t.Helper()
	dir := t.TempDir()
	courthouse, err := shared.Path("data", "courthouse")
	if err != nil {
		t.Fatal(err)
	}
	bag = filepath.Join(dir, "frames.mcap")
	runOK(t, 60*time.Second, ros2Binary(t), "bag", "--format", "mcap", "--images", courthouse, "--first-k", strconv.Itoa(n),
		"--rate", "10", "--start", strconv.FormatInt(rostest.Stamp0.Unix(), 10), "--out", bag)
	script = filepath.Join(dir, name)
	if err := os.WriteFile(script, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	return bag, script
}
