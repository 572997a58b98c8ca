//go:build ros2

package test

import (
	"encoding/json"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lingbotmap/lingbotmap/engine/geom"
	"github.com/lingbotmap/lingbotmap/node/ros1/rostest"
)

// tfRobotPy is a robot's side of the TF tree, with the real tf2_ros: a
// static base_link → camera (the camera 0.2 m ahead, 0.5 m up, looking
// along x), odometry odom → base_link at stamps every 50 ms from the first
// image on (the robot drives forward, turning), and a tf2_ros.Buffer with
// a TransformListener that looks up map → base_link at the images' stamps
// once the node's ~/odom for them has come. It prints each lookup with the
// node's odometry pose of that stamp and every parent → child pair seen on
// /tf and /tf_static.
const tfRobotPy = `
import json, math, sys
import rclpy
from rclpy.node import Node
from rclpy.time import Time
from rclpy.qos import QoSProfile, ReliabilityPolicy, DurabilityPolicy
from geometry_msgs.msg import TransformStamped
from nav_msgs.msg import Odometry
from tf2_msgs.msg import TFMessage
import tf2_ros

sec0, count, step_ns = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
wanted = [int(a) for a in sys.argv[4:]]   # nanoseconds after sec0
rclpy.init()
node = Node('robot')

def ts(parent, child, ns, t, q):
    m = TransformStamped()
    m.header.frame_id, m.child_frame_id = parent, child
    m.header.stamp.sec, m.header.stamp.nanosec = sec0 + ns // 10**9, ns % 10**9
    m.transform.translation.x, m.transform.translation.y, m.transform.translation.z = t
    m.transform.rotation.x, m.transform.rotation.y, m.transform.rotation.z, m.transform.rotation.w = q
    return m

static = tf2_ros.StaticTransformBroadcaster(node)
static.sendTransform(ts('base_link', 'camera', 0, (0.2, 0.0, 0.5), (-0.5, 0.5, -0.5, 0.5)))
dyn = tf2_ros.TransformBroadcaster(node)
def odom_at(k):
    yaw = 0.05 * k
    return ts('odom', 'base_link', k * step_ns, (1.0 + 0.1 * k, 0.02 * k, 0.0), (0.0, 0.0, math.sin(yaw / 2), math.cos(yaw / 2)))
odoms = [odom_at(k) for k in range(count)]
node.create_timer(0.2, lambda: dyn.sendTransform(odoms))

buf = tf2_ros.Buffer()
listener = tf2_ros.TransformListener(buf, node)
parents = {}
def on_tf(m):
    for t in m.transforms:
        parents.setdefault(t.child_frame_id, set()).add(t.header.frame_id)
node.create_subscription(TFMessage, '/tf', on_tf, QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE))
node.create_subscription(TFMessage, '/tf_static', on_tf, QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE,
                         durability=DurabilityPolicy.TRANSIENT_LOCAL))
got = {}
def on_odom(m):
    got[(m.header.stamp.sec - sec0) * 10**9 + m.header.stamp.nanosec] = m
node.create_subscription(Odometry, '/lingbotmap/odom', on_odom, QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE))
print(json.dumps({"event": "ready"}), flush=True)

for ns in wanted:
    at = Time(seconds=sec0, nanoseconds=ns)
    while rclpy.ok() and not (ns in got and buf.can_transform('map', 'base_link', at)):
        rclpy.spin_once(node, timeout_sec=0.1)
    tr = buf.lookup_transform('map', 'base_link', at)
    for _ in range(5):   # a little more /tf for the parents
        rclpy.spin_once(node, timeout_sec=0.1)
    t, q = tr.transform.translation, tr.transform.rotation
    p, o = got[ns].pose.pose.position, got[ns].pose.pose.orientation
    print(json.dumps({"event": "lookup", "ns": ns, "frame": tr.header.frame_id, "child": tr.child_frame_id,
                      "t": [t.x, t.y, t.z], "q": [q.x, q.y, q.z, q.w],
                      "odom_frame": got[ns].header.frame_id, "odom_child": got[ns].child_frame_id,
                      "odom_t": [p.x, p.y, p.z], "odom_q": [o.x, o.y, o.z, o.w],
                      "parents": {k: sorted(v) for k, v in parents.items()}}), flush=True)
node.destroy_node()
rclpy.shutdown()
`

// TestJazzyTF: REP 105 against the real tf2. A robot (rclpy) publishes
// base_link → camera on /tf_static and odom → base_link on /tf; the node,
// with base_frame and odom_frame, takes base → camera from that tree and
// publishes map → odom. Jazzy's tf2_ros.Buffer + TransformListener resolves
// map → base_link at the images' stamps with no frame having a second
// parent; the result is the node's own base pose (~/odom) to 1e-5, and the
// identity at the first image (the map is the first frame's base).
// `ros2 run tf2_ros tf2_echo map base_link` prints the transform.
func TestJazzyTF(t *testing.T) {
	if !inNetns(t) {
		return
	}
	const width, n = 154, 8
	bag, script := framesAndScript(t, n, "tf_robot.py", tfRobotPy)
	// tf_publish_rate 0: the lookups are at each image's stamp, as soon as
	// its ~/odom came; a post-dated re-published map → odom (from a late
	// frame on a loaded machine) would answer them with the frame before's
	// (node/tf_test.go tests the re-publishing)
	node := startROS2Node(t, ros2NodeArgs(t, "lingbotmap", width, "-p", "base_frame:=base_link", "-p", "odom_frame:=odom",
		"-p", "tf_wait:=60.0", "-p", "tf_publish_rate:=0.0")...)
	j := jazzyEnv(t, rmwCyclone)
	first, last := int64(0), int64((n-1)*100*time.Millisecond)
	robot := j.start(j.Python(), script, strconv.FormatInt(rostest.Stamp0.Unix(), 10), strconv.Itoa(2*n+4),
		strconv.FormatInt(int64(50*time.Millisecond), 10), strconv.FormatInt(first, 10), strconv.FormatInt(last, 10))
	robot.waitOutput(t, `"event": "ready"`, 90*time.Second)
	// tf2_echo listens from before the frames: the node publishes map → odom
	// per image, on /tf (volatile)
	echo := j.start("ros2", "run", "tf2_ros", "tf2_echo", "map", "base_link")
	runOK(t, 180*time.Second, ros2Binary(t), "bag", "play", "--delay", "2s", "--rate", "0.3", bag, "--ros-args", "-r", "__node:=player")
	robot.waitOutput(t, `"ns": `+strconv.FormatInt(last, 10), 120*time.Second)

	var lookups []map[string]any
	for _, line := range strings.Split(robot.out.String(), "\n") {
		if strings.Contains(line, `"event": "lookup"`) {
			var m map[string]any
			if err := json.Unmarshal([]byte(line), &m); err != nil {
				t.Fatalf("%v: %s", err, line)
			}
			lookups = append(lookups, m)
		}
	}
	if len(lookups) != 2 {
		t.Fatalf("%d lookups, want 2:\n%s", len(lookups), robot.out.String())
	}
	vec := func(m map[string]any, k string) []float64 {
		var out []float64
		for _, v := range m[k].([]any) {
			out = append(out, v.(float64))
		}
		return out
	}
	mat := func(tr, q []float64) geom.Mat4 {
		m, err := geom.Compose([3]float64(tr), geom.Quat(q))
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	id := geom.Rigid(geom.Mat3{{1, 0, 0}, {0, 1, 0}, {0, 0, 1}}, [3]float64{})
	for i, l := range lookups {
		if l["frame"] != "map" || l["child"] != "base_link" || l["odom_frame"] != "map" || l["odom_child"] != "base_link" {
			t.Fatalf("lookup %d: %v", i, l)
		}
		got, want := mat(vec(l, "t"), vec(l, "q")), mat(vec(l, "odom_t"), vec(l, "odom_q"))
		var d, di float64
		for a := range 3 {
			for b := range 4 {
				d = math.Max(d, math.Abs(got[a][b]-want[a][b]))
				di = math.Max(di, math.Abs(got[a][b]-id[a][b]))
			}
		}
		t.Logf("tf2 map → base_link at +%v: t %v q %v; the node's base pose differs by %.2g", time.Duration(int64(l["ns"].(float64))), vec(l, "t"), vec(l, "q"), d)
		if d > 1e-5 {
			t.Fatalf("tf2's map → odom → base_link at +%vns is %g off the node's base pose", l["ns"], d)
		}
		if i == 0 && di > 1e-5 {
			t.Fatalf("map → base_link at the first image is %g off the identity", di)
		}
		parents := l["parents"].(map[string]any)
		for child, ps := range parents {
			if len(ps.([]any)) != 1 {
				t.Fatalf("%s has parents %v on /tf and /tf_static", child, ps)
			}
		}
		for child, parent := range map[string]string{"base_link": "odom", "odom": "map", "camera": "base_link"} {
			if ps, ok := parents[child].([]any); !ok || ps[0] != parent {
				t.Fatalf("%s's parents %v, want %s", child, parents[child], parent)
			}
		}
	}
	echo.waitOutput(t, "- Rotation: in Quaternion", 60*time.Second)
	_ = echo.stop(10 * time.Second)
	t.Logf("ros2 run tf2_ros tf2_echo map base_link:\n%s", echo.out.String())
	_ = node
}
