package test

import (
	"math"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lingbotmap/lingbotmap/engine/golden/synthrobot"
	"github.com/lingbotmap/lingbotmap/internal/shared"
	"github.com/lingbotmap/lingbotmap/node/ros1/rostest"
)

// The metric scale through the node on a real ROS 1 graph: the synthetic
// robot's bag (the golden frames, /tf_static base → camera, /tf odom →
// base = the engine's trajectory × 0.45 moved rigidly) played by rosbag
// into the binary; /diagnostics then says the scale is known and within
// 1 % of 0.45.
func TestBinaryMetricScaleFromBagTF(t *testing.T) {
	const s = 0.45
	frames, err := shared.Path("data", "courthouse")
	if err != nil {
		t.Fatal(err)
	}
	robot, _, err := synthrobot.FromGolden(golden(t), frames, s)
	if err != nil {
		t.Fatal(err)
	}
	robot.Depth = nil
	bag := filepath.Join(t.TempDir(), "robot.bag")
	if err := robot.WriteBag(bag); err != nil {
		t.Fatal(err)
	}
	m := rostest.StartMaster(t)
	if out := m.Run(t, 30*time.Second, "rosbag", "info", bag); !strings.Contains(out, "tf2_msgs/TFMessage") || !strings.Contains(out, "nav_msgs/Odometry") {
		t.Fatalf("rosbag info:\n%s", out)
	}
	startNode(t, m, "--replay", golden(t), "--queue-policy=all", "--image-transport=compressed",
		"--diagnostics-rate=10", "--base-frame=base_link", "--odom-frame=odom", "--scale-source=odometry",
		"image:=/camera/image_raw", "__name:=mapper")
	waitFor(t, "the node to register", 20*time.Second, func() bool { return m.Knows("/mapper") })
	l := listen(t, m, "/mapper")
	m.WaitSubscribed(t, "/camera/image_raw/compressed", "/mapper", 10*time.Second)
	m.WaitSubscribed(t, "/tf", "/mapper", 10*time.Second)
	m.WaitSubscribed(t, "/tf_static", "/mapper", 10*time.Second)
	m.Run(t, 60*time.Second, "rosbag", "play", "-q", "--wait-for-subscribers", bag,
		"--topics", "/tf", "/tf_static", synthrobot.ImageTopic)
	waitFor(t, "16 frames and a known scale in /diagnostics", 30*time.Second, func() bool {
		return l.diagValue("frames_processed") == "16" && l.diagValue("scale_state") == "known"
	})
	got, err := strconv.ParseFloat(l.diagValue("scale"), 64)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("node over ROS 1, odometry from the bag's /tf: scale %.8g, error %+.5f %% (confidence %s, %s keyframes, %s skipped)",
		got, 100*(got/s-1), l.diagValue("scale_confidence"), l.diagValue("scale_keyframes"), l.diagValue("scale_skipped"))
	if math.Abs(got/s-1) > 0.01 {
		t.Errorf("scale %g, want %g within 1 %%", got, s)
	}
}
