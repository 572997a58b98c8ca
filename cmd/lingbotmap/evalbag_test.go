package main

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bluenviron/goroslib/v2/pkg/msgs/geometry_msgs"
	"github.com/bluenviron/goroslib/v2/pkg/msgs/std_msgs"

	"github.com/lingbotmap/lingbotmap/msgs/mcapbag"
)

// writePoseBag writes a rosbag2 bag directory of two MCAP splits holding a
// helix on /lingbotmap/pose (PoseStamped), and the same trajectory as a TUM
// file; it returns both paths.
func writePoseBag(t *testing.T) (bagDir, tum string) {
	t.Helper()
	dir := t.TempDir()
	bagDir = filepath.Join(dir, "rec")
	if err := os.Mkdir(bagDir, 0o755); err != nil {
		t.Fatal(err)
	}
	var rows []string
	meta := "rosbag2_bagfile_information:\n  version: 9\n  storage_identifier: mcap\n  relative_file_paths: [rec_0.mcap, rec_1.mcap]\n"
	for k := range 2 {
		w, err := mcapbag.Create(filepath.Join(bagDir, fmt.Sprintf("rec_%d.mcap", k)))
		if err != nil {
			t.Fatal(err)
		}
		for i := k * 6; i < k*6+6; i++ {
			a := float64(i) * 0.3
			s, c := math.Sin(a/2), math.Cos(a/2)
			at := time.Unix(1700000000, int64(i)*100e6)
			p := &geometry_msgs.PoseStamped{Header: std_msgs.Header{Stamp: at, FrameId: "map"},
				Pose: geometry_msgs.Pose{Position: geometry_msgs.Point{X: math.Cos(a), Y: math.Sin(a), Z: 0.1 * float64(i)},
					Orientation: geometry_msgs.Quaternion{Z: s, W: c}}}
			// logged later than stamped, as a recorder does
			if err := w.Write("/lingbotmap/pose", at.Add(30*time.Millisecond), p); err != nil {
				t.Fatal(err)
			}
			rows = append(rows, fmt.Sprintf("%.9f %.17g %.17g %.17g 0 0 %.17g %.17g", float64(at.UnixNano())/1e9, p.Pose.Position.X, p.Pose.Position.Y, p.Pose.Position.Z, s, c))
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(bagDir, "metadata.yaml"), []byte(meta), 0o644); err != nil {
		t.Fatal(err)
	}
	tum = filepath.Join(dir, "ref.tum")
	if err := os.WriteFile(tum, []byte(strings.Join(rows, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return bagDir, tum
}

// eval reads a bag directory's pose topic as a trajectory, across its
// splits: against the same poses as TUM, the error is zero.
func TestEvalReadsPoseBag(t *testing.T) {
	dir, tum := writePoseBag(t)
	out := filepath.Join(t.TempDir(), "r.json")
	code, msg := runCLI(t, "eval", dir, tum, "--align", "none", "--json", out)
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, msg)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var rep evalJSON
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	if rep.EstPoses != 12 || rep.Pairs != 12 || rep.ATE.RMSE > 1e-9 || rep.RPERot.RMSE > 1e-6 {
		t.Fatalf("report: %s", b)
	}
	// A topic that is not a pose, and one that is not there: usage errors.
	if code, msg := runCLI(t, "eval", dir, tum, "--topic", "/nope"); code != exitUsage || !strings.Contains(msg, "has no topic /nope (pose topics: /lingbotmap/pose)") {
		t.Errorf("missing topic: exit %d, %s", code, msg)
	}
	// A missing split: exit 4, saying which.
	if err := os.Remove(filepath.Join(dir, "rec_1.mcap")); err != nil {
		t.Fatal(err)
	}
	if code, msg := runCLI(t, "eval", dir, tum); code != exitPartial || !strings.Contains(msg, "split file rec_1.mcap is missing") {
		t.Errorf("missing split: exit %d, %s", code, msg)
	}
}
