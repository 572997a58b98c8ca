package test

import (
	"context"
	"math"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/bluenviron/goroslib/v2/pkg/msgs/geometry_msgs"

	"github.com/lingbotmap/lingbotmap/engine"
	"github.com/lingbotmap/lingbotmap/engine/backend"
	"github.com/lingbotmap/lingbotmap/engine/cpu"
	"github.com/lingbotmap/lingbotmap/engine/geom"
	"github.com/lingbotmap/lingbotmap/engine/mapframe"
	"github.com/lingbotmap/lingbotmap/msgs"
	"github.com/lingbotmap/lingbotmap/node/ros1/rostest"
)

// TestBinaryRunsTheRealEngine replays real frames through the binary running
// the actual model (the tiny random-weight model, on the CPU) and checks that
// every published pose equals what the engine computes for that frame when it
// is driven directly with the same images and settings.
func TestBinaryRunsTheRealEngine(t *testing.T) {
	const n = 8
	frames := rostest.Frames(t, n)
	m := rostest.StartMaster(t)
	bag := filepath.Join(t.TempDir(), "frames.bag")
	rostest.WriteBag(t, bag, rostest.FrameMsgs("/camera/image_raw", frames))

	// the node's default, live windows: 8 frames are inside the first
	// window, whose poses are the streaming engine's, published at once
	p := startNode(t, m, "--queue-policy=all", "--model-size=tiny", "--seed=7",
		"--image-width=140", "--scale-frames=3", "--sliding-window=4",
		"--threads=2", "image:=/camera/image_raw", "__name:=realmapper")
	waitFor(t, "the node to register", 30*time.Second, func() bool { return m.Knows("/realmapper") })
	l := listen(t, m, "/realmapper")
	m.WaitSubscribed(t, "/camera/image_raw", "/realmapper", 20*time.Second)
	m.WaitSubscribed(t, "/realmapper/pose", "/e2e_listener", 20*time.Second)
	m.Run(t, 60*time.Second, "rosbag", "play", "-q", "--wait-for-subscribers", bag)
	waitFor(t, "poses for every frame", 60*time.Second, func() bool { return l.count() >= n })

	// the same frames through the engine directly
	cfg := engine.DefaultConfig()
	cfg.ModelSize, cfg.Seed, cfg.ImageWidth, cfg.ScaleFrames, cfg.SlidingWindow, cfg.Threads = "tiny", 7, 140, 3, 4, 2
	st, err := engine.New(context.Background(), cfg, cpuBackend, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var want []engine.Result
	for i, f := range frames {
		res, err := st.Push(context.Background(), engine.Frame{Seq: uint64(i), Stamp: rostest.StampOf(i), Image: f})
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, res...)
	}
	if len(want) != n {
		t.Fatalf("engine gave %d results", len(want))
	}
	// the node publishes them in the z-up map frame (REP 103/105)
	want = inMapFrame(t, want, mapframe.OpticalToBody())
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.poses) != n {
		t.Fatalf("node published %d poses, want %d", len(l.poses), n)
	}
	for i, got := range l.poses {
		w := poseOf(t, want[i].CamToWorld)
		if !got.Header.Stamp.Equal(rostest.StampOf(i)) {
			t.Fatalf("pose %d stamp %v, want %v", i, got.Header.Stamp, rostest.StampOf(i))
		}
		g := got.Pose
		d := math.Max(math.Max(math.Abs(g.Position.X-w.Position.X), math.Abs(g.Position.Y-w.Position.Y)), math.Abs(g.Position.Z-w.Position.Z))
		d = math.Max(d, math.Abs(g.Orientation.X-w.Orientation.X)+math.Abs(g.Orientation.Y-w.Orientation.Y)+
			math.Abs(g.Orientation.Z-w.Orientation.Z)+math.Abs(g.Orientation.W-w.Orientation.W))
		if d > 1e-9 {
			t.Fatalf("pose %d: node %+v, engine %+v (diff %g)", i, g, w, d)
		}
	}
	if err := p.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if err := p.wait(t, 15*time.Second); err != nil {
		t.Fatalf("after SIGINT: %v", err)
	}
}

// poseOf is the pose message of a camera→world matrix, as the node builds it.
func poseOf(t *testing.T, m geom.Mat4) geometry_msgs.Pose {
	t.Helper()
	tr, q, err := geom.Decompose(m)
	if err != nil {
		t.Fatal(err)
	}
	return msgs.Pose(tr, q)
}

// cpuBackend is the engine's backend in these tests: the float32 CPU one.
func cpuBackend(cfg engine.Config) (backend.Backend, error) {
	return cpu.New(cpu.Config{Threads: cfg.Threads}), nil
}
