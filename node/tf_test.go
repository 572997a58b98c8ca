package node_test

import (
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/bluenviron/goroslib/v2/pkg/msgs/geometry_msgs"
	"github.com/bluenviron/goroslib/v2/pkg/msgs/nav_msgs"
	"github.com/bluenviron/goroslib/v2/pkg/msgs/std_msgs"
	"github.com/bluenviron/goroslib/v2/pkg/msgs/tf2_msgs"

	"github.com/lingbotmap/lingbotmap/engine/geom"
	"github.com/lingbotmap/lingbotmap/engine/mapframe"
	"github.com/lingbotmap/lingbotmap/msgs"
	"github.com/lingbotmap/lingbotmap/node/nodetest"
)

// tfMsg is a TF message with one transform.
func tfMsg(parent, child string, stamp time.Time, m geom.Mat4) *tf2_msgs.TFMessage {
	t, q, err := geom.Decompose(m)
	if err != nil {
		panic(err)
	}
	return &tf2_msgs.TFMessage{Transforms: []geometry_msgs.TransformStamped{{
		Header:       std_msgs.Header{Stamp: stamp, FrameId: parent},
		ChildFrameId: child,
		Transform:    msgs.Transform(t, q),
	}}}
}

func matOfTF(t *testing.T, tr geometry_msgs.Transform) geom.Mat4 {
	t.Helper()
	m, err := geom.Compose([3]float64{tr.Translation.X, tr.Translation.Y, tr.Translation.Z},
		geom.Quat{tr.Rotation.X, tr.Rotation.Y, tr.Rotation.Z, tr.Rotation.W})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func maxDiff4(a, b geom.Mat4) float64 {
	var d float64
	for i := range 3 {
		for j := range 4 {
			d = math.Max(d, math.Abs(a[i][j]-b[i][j]))
		}
	}
	return d
}

// transformsTo are the transforms the node published on topic with child.
func transformsTo(tr *nodetest.Transport, topic, child string) []geometry_msgs.TransformStamped {
	var out []geometry_msgs.TransformStamped
	for _, m := range tr.Messages(topic) {
		for _, ts := range m.(*tf2_msgs.TFMessage).Transforms {
			if ts.ChildFrameId == child {
				out = append(out, ts)
			}
		}
	}
	return out
}

// REP 105 with odometry: the robot's tree gives base_link → camera
// (/tf_static) and odom → base_link (/tf) at each image's stamp; the node
// publishes map → odom only, never a second parent of base_link or the
// camera, and map → odom · odom → base_link is the engine's base pose in the
// z-up map (map_T_base(t0) = identity). The node's own transforms coming back
// on /tf are not taken for another node's. Odometry older than the image by
// more than tf_tolerance gives a diagnostic and no map → odom for that frame;
// its pose still goes out.
func TestCoreMapToOdom(t *testing.T) {
	ref := goldenReplay(t)
	w, h := ref.Size()
	cfg := fastConfig(t)
	cfg.BaseFrame, cfg.OdomFrame, cfg.TFTolerance = "base_link", "odom", 0.05
	cfg.TFPublishRate = 0 // per image only: one transform per frame is counted below
	// a camera 0.2 m ahead and 0.5 m up, tilted 10° down, looking along x
	tilt := 10 * math.Pi / 180
	pitch := geom.Rigid(geom.Mat3{{math.Cos(tilt), 0, math.Sin(tilt)}, {0, 1, 0}, {-math.Sin(tilt), 0, math.Cos(tilt)}}, [3]float64{0.2, 0, 0.5})
	baseCam := geom.Mul4(pitch, geom.Rigid(geom.Mat3{{0, 0, 1}, {-1, 0, 0}, {0, -1, 0}}, [3]float64{}))
	// odom's origin: where the robot started, 3 m east, turned 30°
	yaw := 30 * math.Pi / 180
	odomMap := geom.Rigid(geom.Mat3{{math.Cos(yaw), -math.Sin(yaw), 0}, {math.Sin(yaw), math.Cos(yaw), 0}, {0, 0, 1}}, [3]float64{3, 0, 0})

	tr := nodetest.New("/lbm", nil)
	c := startCore(t, cfg, ref, tr, "/tf_static")
	if err := tr.Deliver("/tf_static", tfMsg("base_link", "cam_optical", stampOf(0), baseCam), nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the camera subscription", 5*time.Second, func() bool { return tr.Subscribed("/image") })

	// the engine's base pose in the z-up map, worked out here:
	// base_T_cam · world_T_cam(0)⁻¹ · world_T_cam(i) · cam_T_base
	first := ref.Reference(0).CamToWorld
	mapBase := func(i int) geom.Mat4 {
		return geom.Mul4(geom.Mul4(baseCam, geom.Mul4(geom.InvertRigid(first), ref.Reference(i).CamToWorld)), geom.InvertRigid(baseCam))
	}
	// odometry for every frame but the last, whose newest odometry is then
	// a frame period (more than tf_tolerance) older than the image
	const n, stale = 12, 11
	for i := range stale {
		if err := tr.Deliver("/tf", tfMsg("odom", "base_link", stampOf(i), geom.Mul4(odomMap, mapBase(i))), nil); err != nil {
			t.Fatal(err)
		}
	}
	for i := range n {
		if err := tr.Deliver("/image", frame(i, w, h, "cam_optical"), nil); err != nil {
			t.Fatal(err)
		}
		if i == n/2 {
			// the node's own output comes back on /tf, as DDS and ROS 1
			// deliver it: map → odom must go on after it
			waitDiag(t, tr, map[string]string{"frames_processed": strconv.Itoa(i + 1)})
			for _, m := range tr.Messages("/tf") {
				if err := tr.Deliver("/tf", m, nil); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	waitDiag(t, tr, map[string]string{"frames_processed": strconv.Itoa(n), "tf_odom_stale": "1", "tf_problems": "1"})
	if got := transformsTo(tr, "/tf", "base_link"); len(got) != 0 {
		t.Fatalf("the node published %d transforms to base_link, which has odom as its parent", len(got))
	}
	if got := tr.Messages("/tf_static"); len(got) != 0 {
		t.Fatalf("the node published %d static transforms; the robot's tree has base_link → cam_optical", len(got))
	}
	mo := transformsTo(tr, "/tf", "odom")
	if len(mo) != n-1 {
		t.Fatalf("%d map → odom transforms for %d frames, one of them with stale odometry", len(mo), n)
	}
	odoms := tr.Messages("/lbm/odom")
	k := 0
	for i := range n {
		if i == stale {
			continue
		}
		ts := mo[k]
		k++
		if ts.Header.FrameId != "map" || !ts.Header.Stamp.Equal(stampOf(i)) {
			t.Fatalf("map → odom %d: %q at %v", i, ts.Header.FrameId, ts.Header.Stamp)
		}
		mapOdom := matOfTF(t, ts.Transform)
		odomBase := geom.Mul4(odomMap, mapBase(i))
		if d := maxDiff4(geom.Mul4(mapOdom, odomBase), mapBase(i)); d > 1e-5 {
			t.Fatalf("frame %d: map → odom · odom → base_link is %g off the engine's base pose", i, d)
		}
		if d := maxDiff4(mapOdom, geom.InvertRigid(odomMap)); d > 1e-5 {
			t.Fatalf("frame %d: map → odom %v, want the odometry's origin %v", i, mapOdom, geom.InvertRigid(odomMap))
		}
		o := odoms[i].(*nav_msgs.Odometry)
		op, err := geom.Compose([3]float64{o.Pose.Pose.Position.X, o.Pose.Pose.Position.Y, o.Pose.Pose.Position.Z},
			geom.Quat{o.Pose.Pose.Orientation.X, o.Pose.Pose.Orientation.Y, o.Pose.Pose.Orientation.Z, o.Pose.Pose.Orientation.W})
		if err != nil {
			t.Fatal(err)
		}
		if o.ChildFrameId != "base_link" || maxDiff4(op, mapBase(i)) > 1e-5 {
			t.Fatalf("odometry %d: %q %v, want base_link %v", i, o.ChildFrameId, op, mapBase(i))
		}
	}
	id := geom.Rigid(geom.Mat3{{1, 0, 0}, {0, 1, 0}, {0, 0, 1}}, [3]float64{})
	if d := maxDiff4(mapBase(0), id); d > 1e-9 {
		t.Fatalf("map_T_base(t0) is %g off the identity", d)
	}
	if len(tr.Messages("/lbm/pose")) != n {
		t.Fatal("a frame was lost")
	}
	_ = c
}

// Without odom_frame, a base_link that has a parent from another node (an
// odometry node's odom → base_link) gets no map → base_link from us: the
// node counts it instead; a NaN transform and a base → camera that never
// comes are counted too, and every frame still gives its pose.
func TestCoreNoSecondParent(t *testing.T) {
	ref := goldenReplay(t)
	w, h := ref.Size()
	cfg := fastConfig(t)
	cfg.BaseFrame, cfg.TFWait = "base_link", 0.1
	tr := nodetest.New("/lbm", nil)
	startCore(t, cfg, ref, tr, "/image")
	odom := geom.Rigid(geom.Mat3{{1, 0, 0}, {0, 1, 0}, {0, 0, 1}}, [3]float64{1, 2, 0})
	if err := tr.Deliver("/tf", tfMsg("odom", "base_link", stampOf(0), odom), nil); err != nil {
		t.Fatal(err)
	}
	bad := tfMsg("world", "thing", stampOf(0), odom)
	bad.Transforms[0].Transform.Translation.X = math.NaN()
	if err := tr.Deliver("/tf", bad, nil); err != nil {
		t.Fatal(err)
	}
	const n = 4
	for i := range n {
		if err := tr.Deliver("/image", frame(i, w, h, "cam_optical"), nil); err != nil {
			t.Fatal(err)
		}
	}
	d := waitDiag(t, tr, map[string]string{"frames_processed": strconv.Itoa(n), "tf_second_parent_withheld": strconv.Itoa(n), "tf_bad_transform": "1"})
	if diagValue(d, "tf_base_camera_missing") == "" {
		t.Error("a base → camera transform that never came is not in /diagnostics")
	}
	if got := transformsTo(tr, "/tf", "base_link"); len(got) != 0 {
		t.Fatalf("the node published %d transforms to base_link, which has odom as its parent", len(got))
	}
	if len(tr.Messages("/lbm/pose")) != n || len(tr.Messages("/lbm/odom")) != n {
		t.Fatal("a frame was lost")
	}
}

// mapOdomRun feeds n frames with odometry for each to a node with odometry
// and returns its transport once all are processed.
func mapOdomRun(t *testing.T, rate float64) (*nodetest.Transport, int) {
	t.Helper()
	ref := goldenReplay(t)
	w, h := ref.Size()
	cfg := fastConfig(t)
	cfg.BaseFrame, cfg.OdomFrame = "base_link", "odom"
	cfg.TFPublishRate, cfg.TransformTolerance = rate, 0.25
	baseCam := geom.Mul4(geom.Rigid(geom.Mat3{{1, 0, 0}, {0, 1, 0}, {0, 0, 1}}, [3]float64{0.2, 0, 0.5}), mapframe.OpticalToBody())
	odomMap := geom.Rigid(geom.Mat3{{0, -1, 0}, {1, 0, 0}, {0, 0, 1}}, [3]float64{3, 0, 0})
	first := ref.Reference(0).CamToWorld
	tr := nodetest.New("/lbm", nil)
	startCore(t, cfg, ref, tr, "/tf_static")
	if err := tr.Deliver("/tf_static", tfMsg("base_link", "cam_optical", stampOf(0), baseCam), nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the camera subscription", 5*time.Second, func() bool { return tr.Subscribed("/image") })
	const n = 6
	for i := range n {
		mapBase := geom.Mul4(geom.Mul4(baseCam, geom.Mul4(geom.InvertRigid(first), ref.Reference(i).CamToWorld)), geom.InvertRigid(baseCam))
		if err := tr.Deliver("/tf", tfMsg("odom", "base_link", stampOf(i), geom.Mul4(odomMap, mapBase)), nil); err != nil {
			t.Fatal(err)
		}
		if err := tr.Deliver("/image", frame(i, w, h, "cam_optical"), nil); err != nil {
			t.Fatal(err)
		}
	}
	waitDiag(t, tr, map[string]string{"frames_processed": strconv.Itoa(n)})
	return tr, n
}

// After the last image, map → odom keeps coming at tf_publish_rate (AMCL's
// and slam_toolbox's way, so tf2 lookups at the current time resolve when
// the camera stops): the last image's transform, stamped on the images'
// clock (the last image's stamp + the time since + transform_tolerance),
// the stamps increasing by about the period.
func TestCoreMapToOdomRepublished(t *testing.T) {
	const rate, tol = 50.0, 250 * time.Millisecond
	tr, n := mapOdomRun(t, rate)
	var last *geometry_msgs.TransformStamped
	for _, ts := range transformsTo(tr, "/tf", "odom") {
		if ts.Header.Stamp.Equal(stampOf(n - 1)) {
			last = &ts
		}
	}
	if last == nil {
		t.Fatalf("no map → odom at the last image's stamp")
	}
	k0 := len(transformsTo(tr, "/tf", "odom"))
	began := time.Now()
	const more = 15
	waitFor(t, "re-published map → odom", 10*time.Second, func() bool { return len(transformsTo(tr, "/tf", "odom")) >= k0+more })
	elapsed := time.Since(began)
	got := transformsTo(tr, "/tf", "odom")[k0:]
	want := matOfTF(t, last.Transform)
	prev := stampOf(n - 1).Add(tol)
	period := time.Duration(float64(time.Second) / rate)
	for i, ts := range got {
		if ts.Header.FrameId != "map" {
			t.Fatalf("re-published transform %d has the parent %q", i, ts.Header.FrameId)
		}
		if d := maxDiff4(matOfTF(t, ts.Transform), want); d > 1e-12 {
			t.Errorf("re-published map → odom %d differs from the last image's by %g", i, d)
		}
		st := ts.Header.Stamp
		if i == 0 && st.Before(prev) {
			t.Errorf("first re-published stamp %v is before the last image's stamp + transform_tolerance %v", st, prev)
		}
		if i > 0 && st.Sub(prev) < period/2 {
			t.Errorf("re-published stamp %d is %v after the one before; the period is %v", i, st.Sub(prev), period)
		}
		prev = st
	}
	// the ticker may drop ticks on a loaded machine, never add them
	if max := int(elapsed/period) + 2; len(got) > max {
		t.Errorf("%d re-published transforms in %v at %g Hz (at most %d)", len(got), elapsed, rate, max)
	}
	t.Logf("%d re-published in %v; stamps %v to %v", len(got), elapsed, got[0].Header.Stamp.Sub(stampOf(n-1)), got[len(got)-1].Header.Stamp.Sub(stampOf(n-1)))
}

// tf_publish_rate 0: map → odom once per image, none after the last, over
// as many diagnostics periods as the test above saw re-published transforms.
func TestCoreMapToOdomPerImageOnly(t *testing.T) {
	tr, n := mapOdomRun(t, 0)
	d0 := len(tr.Messages("/diagnostics"))
	waitFor(t, "15 more diagnostics", 10*time.Second, func() bool { return len(tr.Messages("/diagnostics")) >= d0+15 })
	if got := transformsTo(tr, "/tf", "odom"); len(got) != n {
		t.Fatalf("%d map → odom transforms for %d images with tf_publish_rate 0", len(got), n)
	}
}
