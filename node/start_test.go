package node_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/lingbotmap/lingbotmap/engine"
	"github.com/lingbotmap/lingbotmap/internal/syncbuf"
	"github.com/lingbotmap/lingbotmap/node"
	"github.com/lingbotmap/lingbotmap/node/nodetest"
)

// The engine starts before the transport connects: an engine that cannot
// start (bad weights) is the error even when no ROS graph answers, and a
// ROS parameter that changes an engine setting restarts the engine with it.
func TestCoreStartsEngineBeforeConnect(t *testing.T) {
	ref := goldenReplay(t)
	badWeights := errors.New("weights: cannot open checkpoint /x.safetensors")
	var built []node.Config
	run := func(tr *nodetest.Transport, ctx context.Context, fail bool) error {
		built = nil
		n, err := node.New(node.Options{Config: fastConfig(t), Transport: tr, Log: slog.New(slog.NewTextHandler(&syncbuf.Buffer{}, nil)),
			NewStream: func(_ context.Context, cfg node.Config) (engine.Stream, error) {
				built = append(built, cfg)
				if fail {
					return nil, badWeights
				}
				return ref, nil
			}})
		if err != nil {
			t.Fatal(err)
		}
		return n.Run(ctx)
	}
	down := nodetest.New("/lbm", nil)
	down.FailConnect(errors.New("connection refused"))
	if err := run(down, context.Background(), true); !errors.Is(err, badWeights) {
		t.Errorf("bad weights and no ROS graph: %v, want the weights error", err)
	}

	// parameters: one engine setting restarts the engine once, with it
	tr := nodetest.New("/lbm", nil)
	tr.SetParam("keyframe_interval", 3)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(tr, ctx, false) }()
	waitDiag(t, tr, map[string]string{"frames_received": "0"})
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if len(built) != 2 || built[0].Engine.KeyframeInterval != 1 || built[1].Engine.KeyframeInterval != 3 {
		t.Errorf("engines built with keyframe intervals %v, want [1 3]", intervals(built))
	}
	// a parameter that is not the engine's does not restart it
	tr = nodetest.New("/lbm", nil)
	tr.SetParam("queue_size", 5)
	ctx, cancel = context.WithCancel(context.Background())
	go func() { done <- run(tr, ctx, false) }()
	waitDiag(t, tr, map[string]string{"queue_capacity": "5"})
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if len(built) != 1 {
		t.Errorf("%d engines built for a queue_size parameter, want 1", len(built))
	}
}

func intervals(cs []node.Config) []int {
	var out []int
	for _, c := range cs {
		out = append(out, c.Engine.KeyframeInterval)
	}
	return out
}

// A first frame the model cannot take is skipped and counted as "size",
// before it reaches the engine.
func TestCoreSkipsOversizedFrame(t *testing.T) {
	cfg := fastConfig(t)
	cfg.Engine.ImageWidth = 2800
	tr := nodetest.New("/lbm", nil)
	startCore(t, cfg, goldenReplay(t), tr, "/image")
	if err := tr.Deliver("/image", frame(0, 4000, 3000, "cam"), nil); err != nil {
		t.Fatal(err)
	}
	d := waitDiag(t, tr, map[string]string{"skipped_size": "1", "frames_processed": "0"})
	if r := diagValue(d, "skip_reason_size"); !strings.Contains(r, "model input size out of range") {
		t.Errorf("skip reason %q", r)
	}
}
