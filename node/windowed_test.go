package node_test

import (
	"context"
	"log/slog"
	"sync"
	"testing"

	"github.com/lingbotmap/lingbotmap/engine"
	"github.com/lingbotmap/lingbotmap/node"
	"github.com/lingbotmap/lingbotmap/node/nodetest"
)

// The node's windowed default on the real engine (small windows, so that 20
// frames cross several): every frame comes out once, in order, across window
// changes, and Observe reports each with its window and timing.
func TestNodeWindowedAcrossWindows(t *testing.T) {
	cfg := goldenNodeConfig(t)
	e := &cfg.Engine
	e.Windowed, e.WindowSize, e.OverlapSize, e.KeyframeInterval = true, 6, 2, 1
	if !node.DefaultConfig().Engine.Windowed {
		t.Fatal("the node's default is not windowed")
	}
	tr := nodetest.New("/lbm", nil)
	var mu sync.Mutex
	var reps []node.FrameReport
	n, err := node.New(node.Options{Config: cfg, Transport: tr, Log: slog.New(slog.DiscardHandler),
		NewStream: func(ctx context.Context, c node.Config) (engine.Stream, error) {
			return engine.New(ctx, c.Engine, cpuFactory, nil)
		},
		Observe: func(r node.FrameReport) {
			mu.Lock()
			defer mu.Unlock()
			reps = append(reps, r)
		}})
	if err != nil {
		t.Fatal(err)
	}
	stop := runNode(t, n, tr)
	const total = 20
	for i := range total {
		if err := tr.Deliver("/image", frame(i, 70, 42, "cam"), nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if idx := checkPoseOrder(t, tr.Messages("/lbm/pose")); len(idx) != total {
		t.Fatalf("%d poses for %d frames", len(idx), total)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(reps) != total {
		t.Fatalf("%d frame reports for %d frames", len(reps), total)
	}
	for i, r := range reps {
		if r.Seq != uint64(i) || r.Err != nil || r.PoseWritten.Before(r.Timing.Arrived) || r.Timing.Latency <= 0 || r.Timing.Model <= 0 {
			t.Fatalf("report %d: %+v", i, r)
		}
		if i > 0 && r.Window < reps[i-1].Window {
			t.Fatalf("frame %d is of window %d, after window %d", i, r.Window, reps[i-1].Window)
		}
	}
	if last := reps[total-1].Window; last < 3 {
		t.Fatalf("20 frames in windows of 6 slots (2 shared) reached window %d only", last)
	}
}
