package node_test

import (
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bluenviron/goroslib/v2/pkg/msgs/nav_msgs"
	"github.com/bluenviron/goroslib/v2/pkg/msgs/sensor_msgs"
	"github.com/bluenviron/goroslib/v2/pkg/msgs/std_msgs"

	"github.com/lingbotmap/lingbotmap/engine/geom"
	"github.com/lingbotmap/lingbotmap/engine/mapframe"
	"github.com/lingbotmap/lingbotmap/engine/scale"
	"github.com/lingbotmap/lingbotmap/msgs"
	"github.com/lingbotmap/lingbotmap/node/nodetest"
)

const nodeScale = 0.45

// robotOdom is odom_T_base for the golden replay's frame i on a robot whose
// odometry is the camera trajectory × nodeScale, moved rigidly, with the
// camera at baseCam on the base.
func robotOdom(world geom.Mat4, baseCam geom.Mat4) geom.Mat4 {
	yaw := 30 * math.Pi / 180
	g := geom.Rigid(geom.Mat3{{math.Cos(yaw), -math.Sin(yaw), 0}, {math.Sin(yaw), math.Cos(yaw), 0}, {0, 0, 1}}, [3]float64{3, -1, 0})
	for i := range 3 {
		world[i][3] *= nodeScale
	}
	return geom.Mul4(geom.Mul4(g, world), geom.InvertRigid(baseCam))
}

func scaleValue(t *testing.T, tr *nodetest.Transport) float64 {
	t.Helper()
	v, err := strconv.ParseFloat(diagValue(diag(t, tr), "scale"), 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// The node's metric scale from odometry: from /tf (odom_frame → the
// image's frame at its stamp) and from a nav_msgs/Odometry topic. Until the
// robot has moved enough /diagnostics says "estimating" with the reason;
// then "known", the scale within 1 %, and the poses it publishes are in
// metres.
func TestCoreScaleFromOdometry(t *testing.T) {
	for _, viaTopic := range []bool{false, true} {
		name := "tf"
		if viaTopic {
			name = "odom topic"
		}
		t.Run(name, func(t *testing.T) {
			ref := goldenReplay(t)
			w, h := ref.Size()
			cfg := fastConfig(t)
			cfg.BaseFrame, cfg.OdomFrame, cfg.TFTolerance = "base_link", "odom", 0.05
			cfg.TFPublishRate = 0 // per image only: one transform per frame is counted below
			cfg.Scale.Source = scale.SourceOdometry
			if viaTopic {
				cfg.Scale.OdomTopic = "/wheel/odom"
			}
			baseCam := geom.Mul4(geom.Rigid(geom.Mat3{{1, 0, 0}, {0, 1, 0}, {0, 0, 1}}, [3]float64{0.2, 0, 0.5}), mapframe.OpticalToBody())
			tr := nodetest.New("/lbm", nil)
			c := startCore(t, cfg, ref, tr, "/tf_static")
			if err := tr.Deliver("/tf_static", tfMsg("base_link", "cam_optical", stampOf(0), baseCam), nil); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "the camera subscription", 5*time.Second, func() bool { return tr.Subscribed("/image") })
			if viaTopic {
				waitFor(t, "the odometry subscription", 5*time.Second, func() bool { return tr.Subscribed("/wheel/odom") })
			}
			const n = 16
			for i := range n {
				odom := robotOdom(ref.Reference(i).CamToWorld, baseCam)
				if viaTopic {
					tt, q, _ := geom.Decompose(odom)
					m := &nav_msgs.Odometry{Header: std_msgs.Header{Stamp: stampOf(i), FrameId: "odom"}, ChildFrameId: "base_link"}
					m.Pose.Pose = msgs.Pose(tt, q)
					if err := tr.Deliver("/wheel/odom", m, nil); err != nil {
						t.Fatal(err)
					}
				} else if err := tr.Deliver("/tf", tfMsg("odom", "base_link", stampOf(i), odom), nil); err != nil {
					t.Fatal(err)
				}
				if err := tr.Deliver("/image", frame(i, w, h, "cam_optical"), nil); err != nil {
					t.Fatal(err)
				}
				if i == 11 {
					// the frames from here on are published with the scale
					// known (the publisher may run ahead of the estimate)
					waitDiag(t, tr, map[string]string{"frames_processed": "12", "scale_state": scale.StateKnown})
				}
				if i == 3 {
					// the replay's 3 scale frames come together, then one
					d := waitDiag(t, tr, map[string]string{"frames_processed": "4"})
					if diagValue(d, "scale_state") != scale.StateEstimating {
						t.Errorf("after 4 frames: scale_state %q (%s)", diagValue(d, "scale_state"), diagValue(d, "scale_reason"))
					}
				}
			}
			d := waitDiag(t, tr, map[string]string{"frames_processed": strconv.Itoa(n), "scale_state": scale.StateKnown})
			s := scaleValue(t, tr)
			t.Logf("node, odometry from %s: scale %.8g, error %+.5f %% (%s keyframes, confidence %s)", name, s, 100*(s/nodeScale-1),
				diagValue(d, "scale_keyframes"), diagValue(d, "scale_confidence"))
			if math.Abs(s/nodeScale-1) > 0.01 {
				t.Errorf("scale %g, want %g within 1 %%", s, nodeScale)
			}
			// REP 105 in metres: map → odom = map_T_base · odom_T_base⁻¹
			// goes out only once the scale is known (before, model units
			// and metres would mix; /diagnostics counts tf_odom_unscaled),
			// and is then the same rigid transform at every frame
			if !viaTopic {
				var late []geom.Mat4
				first := -1
				for _, ts := range transformsTo(tr, "/tf", "odom") {
					if first < 0 {
						first = int(ts.Header.Stamp.Sub(stampOf(0)) / (100 * time.Millisecond))
					}
					late = append(late, matOfTF(t, ts.Transform))
				}
				if first < 4 || first > 12 || len(late) != n-first {
					t.Fatalf("%d map → odom transforms, the first at frame %d; want one for each frame from the scale on (at frame 4 to 12)", len(late), first)
				}
				for i, m := range late {
					if d := maxDiff4(m, late[len(late)-1]); d > 1e-5 {
						t.Errorf("map → odom at frame %d differs from the last by %g", first+i, d)
					}
				}
				if got := diagValue(d, "tf_odom_unscaled"); got != strconv.Itoa(first) {
					t.Errorf("tf_odom_unscaled %s, want %d (frames 0 to %d)", got, first, first-1)
				}
			}
			// the path published from then on is in metres: its steps are
			// the camera's × the scale
			if err := c.stop(); err != nil {
				t.Fatal(err)
			}
			path, _ := tr.Last("/lbm/path").(*nav_msgs.Path)
			if path == nil || len(path.Poses) != n {
				t.Fatalf("final path: %+v", path)
			}
			for i := 1; i < n; i++ {
				a, b := path.Poses[i-1].Pose.Position, path.Poses[i].Pose.Position
				got := math.Sqrt((a.X-b.X)*(a.X-b.X) + (a.Y-b.Y)*(a.Y-b.Y) + (a.Z-b.Z)*(a.Z-b.Z))
				ca, cb := geom.TranslationOf(ref.Reference(i-1).CamToWorld), geom.TranslationOf(ref.Reference(i).CamToWorld)
				want := s * math.Sqrt((ca[0]-cb[0])*(ca[0]-cb[0])+(ca[1]-cb[1])*(ca[1]-cb[1])+(ca[2]-cb[2])*(ca[2]-cb[2]))
				if math.Abs(got-want) > 1e-4 {
					t.Errorf("path step %d: %g m, want %g m", i, got, want)
				}
			}
		})
	}
}

// The node's metric scale from an aligned depth topic (32FC1, s × the
// model's depth, with holes), matched by stamp; a depth image in another
// encoding is refused and counted, and a frame without depth is left out
// with the reason.
func TestCoreScaleFromDepth(t *testing.T) {
	ref := goldenReplay(t)
	w, h := ref.Size()
	cfg := fastConfig(t)
	cfg.Scale.Source, cfg.Scale.DepthTopic = scale.SourceDepth, "/camera/depth"
	cfg.Scale.MinPixels = 100
	tr := nodetest.New("/lbm", nil)
	startCore(t, cfg, ref, tr, "/camera/depth")
	waitFor(t, "the camera subscription", 5*time.Second, func() bool { return tr.Subscribed("/image") })
	bad := &sensor_msgs.Image{Header: std_msgs.Header{Stamp: stampOf(0)}, Width: 1, Height: 1, Encoding: "rgb8", Step: 3, Data: make([]byte, 3)}
	if err := tr.Deliver("/camera/depth", bad, nil); err != nil {
		t.Fatal(err)
	}
	const n = 8
	for i := range n {
		if i != 3 { // frame 3 has no depth
			pred := ref.Reference(i).Depth
			d := make([]float32, len(pred))
			for p, v := range pred {
				if p%7 != 0 { // holes
					d[p] = float32(nodeScale) * v
				}
			}
			if err := tr.Deliver("/camera/depth", msgs.DepthImage(std_msgs.Header{Stamp: stampOf(i).Add(5 * time.Millisecond)}, w, h, d), nil); err != nil {
				t.Fatal(err)
			}
		}
		if err := tr.Deliver("/image", frame(i, w, h, "cam_optical"), nil); err != nil {
			t.Fatal(err)
		}
		if i >= 2 { // after the replay's 3 scale frames
			waitDiag(t, tr, map[string]string{"frames_processed": strconv.Itoa(i + 1)})
		}
	}
	d := waitDiag(t, tr, map[string]string{"scale_state": scale.StateKnown, "scale_skipped": "1", "scale_messages_refused": "1"})
	s := scaleValue(t, tr)
	t.Logf("node, depth topic: scale %.8g, error %+.5f %%", s, 100*(s/nodeScale-1))
	if math.Abs(s/nodeScale-1) > 0.01 {
		t.Errorf("scale %g, want %g within 1 %%", s, nodeScale)
	}
	if got := diagValue(d, "scale_issue"); got == "" {
		t.Error("no scale_issue for the refused depth image")
	}
}

// Odometry that stops: the frames after it find only odometry older than
// the tolerance, are left out of the estimate with the reason, and are
// still mapped.
func TestCoreScaleStaleOdometry(t *testing.T) {
	ref := goldenReplay(t)
	w, h := ref.Size()
	cfg := fastConfig(t)
	cfg.BaseFrame, cfg.OdomFrame = "base_link", "odom"
	cfg.Scale.Source = scale.SourceOdometry
	baseCam := geom.Mul4(geom.Rigid(geom.Mat3{{1, 0, 0}, {0, 1, 0}, {0, 0, 1}}, [3]float64{0.2, 0, 0.5}), mapframe.OpticalToBody())
	tr := nodetest.New("/lbm", nil)
	startCore(t, cfg, ref, tr, "/tf_static")
	if err := tr.Deliver("/tf_static", tfMsg("base_link", "cam_optical", stampOf(0), baseCam), nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the camera subscription", 5*time.Second, func() bool { return tr.Subscribed("/image") })
	const n, odomUntil = 12, 8
	for i := range n {
		if i < odomUntil {
			if err := tr.Deliver("/tf", tfMsg("odom", "base_link", stampOf(i), robotOdom(ref.Reference(i).CamToWorld, baseCam)), nil); err != nil {
				t.Fatal(err)
			}
		}
		if err := tr.Deliver("/image", frame(i, w, h, "cam_optical"), nil); err != nil {
			t.Fatal(err)
		}
	}
	d := waitDiag(t, tr, map[string]string{"frames_processed": strconv.Itoa(n), "scale_skipped": strconv.Itoa(n - odomUntil)})
	if issue := diagValue(d, "scale_issue"); !strings.Contains(issue, "no odometry odom → cam_optical") || !strings.Contains(issue, "extrapolat") {
		t.Errorf("scale_issue %q", issue)
	}
	if got := diagValue(d, "scale_keyframes"); got != strconv.Itoa(odomUntil) {
		t.Errorf("scale_keyframes %s, want %d", got, odomUntil)
	}
}
