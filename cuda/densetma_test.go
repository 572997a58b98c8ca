//go:build cuda

package cuda

import (
	"fmt"
	"testing"

	"github.com/lingbotmap/lingbotmap/engine/backend"
)

// TestDenseTMA: with Config.DenseTMA a frame's dense attention (one image,
// heads of 64, BF16 mode, Hopper) runs the TMA paged kernel through tensor
// maps of the split's bf16 k and v, queued into the graph segments like
// any launch. Each shape runs two q/k/v splits and attentions between
// flush points, three times, with graphs on and off: the passes give the same
// bits, graphs replay, every attention call queued its maps (none with
// the setting off), and the result matches the CPU and the cp.async kernel
// within bf16's tolerance. Shapes: a frame (1005 tokens × 16 heads), keys of
// exactly one tile, one key over a tile, and keys that end inside a tile.
func TestDenseTMA(t *testing.T) {
	g := fx.bf16.(*gpu)
	if !g.kernels.hopper() {
		t.Skip("the TMA kernels need Hopper (sm_90); this GPU runs the portable kernel")
	}
	defer func() { g.denseTMA = g.cfg.DenseTMA }()
	const d = 64
	for _, c := range []struct{ n, h int }{{1005, 16}, {128, 3}, {129, 1}, {300, 2}} {
		p := pairs(t, 41)[1]
		what := fmt.Sprintf("dense attention %d tokens × %d heads", c.n, c.h)
		cqkv, gqkv := p.in(p.randn(c.n*3*c.h*d, 1), 1, c.n, 3*c.h*d)
		qp := backend.QKVParams{Heads: c.h, HeadDim: d, KVUse: backend.KVAttention}
		cq, ck, cv := fx.cpu.SplitQKV(cqkv, qp)
		want := fx.cpu.ToHost(fx.cpu.Attention(cq, ck, cv, 0.125))
		run := func(tma, graphs bool) ([][]float32, GraphStats, GraphStats) {
			g.denseTMA = tma
			enabled := g.batch.enabled
			_ = g.own.do(func() error { g.batch.enabled = graphs && enabled; return nil })
			defer g.own.do(func() error { g.batch.enabled = enabled; return nil })
			before := g.GraphStats()
			var outs [][]float32
			for range 3 {
				// Two blocks' worth, so that the segment is long enough
				// for a graph.
				var a backend.Tensor
				for j := range 2 {
					q, k, v := g.SplitQKV(gqkv, qp)
					if j > 0 {
						g.Free(a)
					}
					a = g.Attention(q, k, v, 0.125)
					g.Free(q)
					g.Free(k)
					g.Free(v)
				}
				// The flush point a frame would reach next.
				if err := g.own.do(g.flush); err != nil {
					t.Fatal(err)
				}
				if err := g.Err(); err != nil {
					t.Fatalf("%s: device error: %v", what, err)
				}
				out := g.ToHost(a)
				g.Free(a)
				if rel, i := relErr(out, want); !(rel <= p.tol) {
					t.Errorf("%s, dense_tma %v, graphs %v: relative error %.3g from the CPU (element %d)", what, tma, graphs, rel, i)
				}
				outs = append(outs, out)
			}
			return outs, before, g.GraphStats()
		}
		direct, _, _ := run(true, false)
		withGraphs, before, after := run(true, true)
		cpAsync, offBefore, offAfter := run(false, true)
		if n := after.MapLaunches - before.MapLaunches; n != 6 {
			t.Errorf("%s: %d attention launches queued their tensor maps, want 6", what, n)
		}
		if n := offAfter.MapLaunches - offBefore.MapLaunches; n != 0 {
			t.Errorf("%s: dense_tma off, yet %d launches queued tensor maps", what, n)
		}
		if after.Replayed <= before.Replayed || after.Failures != before.Failures {
			t.Errorf("%s: the segments with tensor maps were not replayed: %+v then %+v", what, before, after)
		}
		for i := range direct {
			if !equalBits(direct[i], withGraphs[i]) || !equalBits(direct[i], direct[0]) {
				t.Errorf("%s: pass %d differs between passes or with graphs", what, i)
			}
		}
		if rel, i := relErr(direct[0], cpAsync[0]); !(rel <= p.tol) {
			t.Errorf("%s: %.3g from the cp.async kernel (element %d)", what, rel, i)
		}
		for _, x := range []backend.Tensor{cqkv, cq, ck, cv} {
			fx.cpu.Free(x)
		}
		g.Free(gqkv)
	}
}
