package node_test

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/bluenviron/goroslib/v2/pkg/msgs/geometry_msgs"
	"github.com/bluenviron/goroslib/v2/pkg/msgs/nav_msgs"

	"github.com/lingbotmap/lingbotmap/engine"
	"github.com/lingbotmap/lingbotmap/engine/golden/replay"
)

// gatedStream holds every Push until open is called, as a model far slower
// than the camera would.
type gatedStream struct {
	*replay.Stream
	gate chan struct{}
	once sync.Once
}

func newGated(t *testing.T) *gatedStream {
	return &gatedStream{Stream: goldenReplay(t), gate: make(chan struct{})}
}

func (g *gatedStream) open() { g.once.Do(func() { close(g.gate) }) }

func (g *gatedStream) Push(ctx context.Context, f engine.Frame) ([]engine.Result, error) {
	select {
	case <-g.gate:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return g.Stream.Push(ctx, f)
}

// checkPoseOrder checks that the poses are stamped in increasing order and
// returns the index of each (stampOf's i).
func checkPoseOrder(t *testing.T, poses []any) []int {
	t.Helper()
	var idx []int
	for k, m := range poses {
		s := m.(*geometry_msgs.PoseStamped).Header.Stamp
		i := int(s.Sub(stamp0) / (100 * time.Millisecond))
		if k > 0 && i <= idx[k-1] {
			t.Fatalf("pose %d is of frame %d, after frame %d", k, i, idx[k-1])
		}
		idx = append(idx, i)
	}
	return idx
}

// queue_policy latest: the callback never waits on a model that does not
// keep up; the oldest waiting frames are dropped and counted, the newest
// reach the map, in order, and every frame is either mapped or dropped.
func TestPolicyLatestDropsOldest(t *testing.T) {
	g := newGated(t)
	w, h := g.Size()
	cfg := fastConfig(t)
	cfg.QueuePolicy, cfg.QueueSize = "latest", 1
	c := startCore(t, cfg, g, nil, "/image")
	t.Cleanup(g.open) // before the node stops, should a check fail
	const n = 16
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range n {
			if err := c.tr.Deliver("/image", frame(i, w, h, "cam"), nil); err != nil {
				t.Error(err)
			}
		}
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		g.open()
		t.Fatal("the callbacks waited for the model under queue_policy latest")
	}
	d := waitDiag(t, c.tr, map[string]string{"frames_received": strconv.Itoa(n), "queue_policy": "latest"})
	if diagValue(d, "frames_dropped") == "0" {
		t.Fatalf("no frame dropped with the model held and a queue of 1: %v", d.Status[0].Values)
	}
	g.open()
	if err := c.stop(); err != nil {
		t.Fatal(err)
	}
	d = diag(t, c.tr)
	dropped, _ := strconv.Atoi(diagValue(d, "frames_dropped"))
	poses := c.tr.Messages("/lbm/pose")
	idx := checkPoseOrder(t, poses)
	if len(poses)+dropped != n || dropped == 0 {
		t.Fatalf("%d poses and %d drops for %d frames", len(poses), dropped, n)
	}
	if idx[len(idx)-1] != n-1 {
		t.Fatalf("the newest frame %d was not mapped (last pose of frame %d)", n-1, idx[len(idx)-1])
	}
}

// queue_policy all: once the pipeline is full, the callback waits for room
// (holding the sender back); nothing is dropped and every frame is mapped
// in order.
func TestPolicyAllBlocksUntilRoom(t *testing.T) {
	g := newGated(t)
	w, h := g.Size()
	cfg := fastConfig(t)
	cfg.QueueSize = 1
	c := startCore(t, cfg, g, nil, "/image")
	t.Cleanup(g.open) // before the node stops, should a check fail
	const n = 16
	var mu sync.Mutex
	sent := 0
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range n {
			if err := c.tr.Deliver("/image", frame(i, w, h, "cam"), nil); err != nil {
				t.Error(err)
			}
			mu.Lock()
			sent++
			mu.Unlock()
		}
	}()
	// the pipeline holds a bounded number of frames: the sender stops
	waitDiag(t, c.tr, map[string]string{"queue_policy": "all"})
	stalled := -1
	waitFor(t, "the sender to stop at a full pipeline", 10*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		if sent == stalled {
			return true
		}
		stalled = sent
		time.Sleep(100 * time.Millisecond)
		return false
	})
	select {
	case <-done:
		t.Fatalf("all %d frames were taken while the model held the first", n)
	default:
	}
	g.open()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("the sender stayed blocked after the model went on")
	}
	waitDiag(t, c.tr, map[string]string{"frames_processed": strconv.Itoa(n), "frames_dropped": "0"})
	if idx := checkPoseOrder(t, c.tr.Messages("/lbm/pose")); len(idx) != n {
		t.Fatalf("%d poses for %d frames", len(idx), n)
	}
}

// ~path and ~map are not built per frame: with a map rate far below the
// frame rate, neither goes out while frames are mapped, and the final
// publication carries every pose.
func TestPathAndMapLeaveTheFramePath(t *testing.T) {
	ref := goldenReplay(t)
	w, h := ref.Size()
	cfg := fastConfig(t)
	cfg.MapRate = 0.001
	c := startCore(t, cfg, ref, nil, "/image")
	const n = 12
	for i := range n {
		if err := c.tr.Deliver("/image", frame(i, w, h, "cam"), nil); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "12 poses", 10*time.Second, func() bool { return len(c.tr.Messages("/lbm/pose")) == n })
	if p, m := len(c.tr.Messages("/lbm/path")), len(c.tr.Messages("/lbm/map")); p != 0 || m != 0 {
		t.Fatalf("%d path and %d map messages while mapping at a map rate of one per 1000 s", p, m)
	}
	if err := c.stop(); err != nil {
		t.Fatal(err)
	}
	paths := c.tr.Messages("/lbm/path")
	if len(paths) != 1 || len(paths[0].(*nav_msgs.Path).Poses) != n || len(c.tr.Messages("/lbm/map")) != 1 {
		t.Fatalf("after the end: %d path messages (want 1 of %d poses), %d maps (want 1)", len(paths), n, len(c.tr.Messages("/lbm/map")))
	}
}
