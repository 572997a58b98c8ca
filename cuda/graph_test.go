//go:build cuda

package cuda

import (
	"context"
	"testing"

	"github.com/lingbotmap/lingbotmap/engine"
)

// TestGraphsMatchDirect: golden streams give bit for bit the same results
// with the ops replayed as CUDA graphs as with every kernel launched as it
// comes (the GEMM algorithms fixed, so both backends run the same
// kernels), and the graphs do run: most of the work of the repeated frames
// is replayed, and no capture fails.
func TestGraphsMatchDirect(t *testing.T) {
	modes := []struct {
		name, golden string
		set          func(*engine.Config)
	}{
		{"streaming", "stream_kf1", func(*engine.Config) {}},
		{"flow keyframes", "stream_flow", func(c *engine.Config) { c.FlowThreshold = 14 }},
		{"windowed", "windowed_kf2", func(c *engine.Config) { c.Windowed = true; c.KeyframeInterval = 2 }},
	}
	for _, prec := range []string{"fp32", "bf16", "fp8"} {
		for _, mode := range modes {
			t.Run(prec+"/"+mode.name, func(t *testing.T) {
				cfg := goldenEngineConfig(t, prec)
				mode.set(&cfg)
				frames := goldenFramesTwice(t, mode.golden)
				run := func(graphs bool) ([]engine.Result, GraphStats) {
					var g *gpu
					set := func(c *Config) { c.FixedGEMMAlgo, c.Graphs = true, graphs }
					st, err := engine.New(context.Background(), cfg, keptFactory(set, &g), nil)
					if err != nil {
						t.Fatal(err)
					}
					res := pushAll(t, st, frames, true)
					stats := g.GraphStats()
					if err := st.Close(); err != nil {
						t.Fatal(err)
					}
					return res, stats
				}
				want, off := run(false)
				got, on := run(true)
				if off.Replayed != 0 || off.Captures != 0 {
					t.Fatalf("graphs off, yet %+v", off)
				}
				t.Logf("%d results; graphs: %+v (%.0f%% of the operations replayed)", len(got), on,
					100*float64(on.Replayed)/float64(max(on.Replayed+on.Direct, 1)))
				if on.Failures != 0 || on.Captures == 0 || on.Replayed <= on.Captures {
					t.Fatalf("graphs were not replayed: %+v", on)
				}
				if len(got) != len(want) {
					t.Fatalf("%d results with graphs, %d without", len(got), len(want))
				}
				for i := range want {
					a, b := got[i], want[i]
					if a.Seq != b.Seq || a.Kind != b.Kind {
						t.Fatalf("result %d: frame %d (%v) with graphs, %d (%v) without", i, a.Seq, a.Kind, b.Seq, b.Kind)
					}
					for _, f := range []struct {
						name string
						x, y []float32
					}{{"pose encoding", a.PoseEnc[:], b.PoseEnc[:]}, {"depth", a.Depth, b.Depth}, {"depth confidence", a.Conf, b.Conf},
						{"points", a.Points, b.Points}} {
						if !equalBits(f.x, f.y) {
							t.Fatalf("frame %d: %s differs with graphs (relative %.3g)", a.Seq, f.name, relDiff(f.x, f.y))
						}
					}
				}
			})
		}
	}
}
