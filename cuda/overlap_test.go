//go:build cuda

package cuda

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/lingbotmap/lingbotmap/engine"
	"github.com/lingbotmap/lingbotmap/engine/backend"
)

// StartDownload's batches hold the tensors' values at the point of the
// work where they were queued, exactly, while later kernels (which write
// into the memory of a downloaded tensor freed meanwhile: the pool hands
// it out again) and later batches are queued behind them and the waits
// come in reverse order; batches beyond the download slots copy at their
// wait.
func TestStartDownloadAhead(t *testing.T) {
	g := fx.fp32
	rng := rand.New(rand.NewPCG(5, 9))
	const n = 300_000
	randn := func() []float32 {
		s := make([]float32, n)
		for i := range s {
			s[i] = float32(rng.NormFloat64())
		}
		return s
	}
	type batch struct {
		p    backend.Pending
		want [][]float32
	}
	var batches []batch
	prev := randn()
	x := g.FromHost(prev, n)
	live := []backend.Tensor{}
	for b := range downSlots + 2 {
		small := []float32{float32(b), 1, 2}
		s := g.FromHost(small, 3)
		batches = append(batches, batch{p: g.(backend.AsyncDownloader).StartDownload(x, s), want: [][]float32{prev, small}})
		live = append(live, s)
		// work queued behind the batch makes the next batch's tensor,
		// likely in x's memory
		host := randn()
		h := g.FromHost(host, n)
		if b < downSlots {
			g.Free(x)
		} else {
			live = append(live, x) // copied at its wait
		}
		x = g.Add(h, h)
		g.Free(h)
		prev = make([]float32, n)
		for i, v := range host {
			prev[i] = v + v
		}
	}
	live = append(live, x)
	for b := len(batches) - 1; b >= 0; b-- {
		got := batches[b].p.Wait()
		for i, want := range batches[b].want {
			if !slices.Equal(got[i], want) {
				t.Fatalf("batch %d, tensor %d: %d values differ from what was queued", b, i, len(want))
			}
		}
	}
	if err := g.(backend.ErrorReporter).Err(); err != nil {
		t.Fatal(err)
	}
	for _, x := range live {
		g.Free(x)
	}
}

// TestOverlapFramesMatchSerial: a golden stream with overlap_frames, with
// cuda.async_page_table, and with both gives the results it gives with
// neither, bit for bit, in fp32, bf16 and fp8 with graphs on; with
// overlap_frames the held frames' copies went through the download slots.
func TestOverlapFramesMatchSerial(t *testing.T) {
	for _, prec := range []string{"fp32", "bf16", "fp8"} {
		for _, interval := range []int{1, 2} {
			t.Run(fmt.Sprintf("%s/interval %d", prec, interval), func(t *testing.T) {
				cfg := goldenEngineConfig(t, prec)
				cfg.KeyframeInterval = interval
				frames := goldenFramesTwice(t, "stream_kf1")
				run := func(overlap, asyncTable bool) ([]engine.Result, bool) {
					var g *gpu
					c := cfg
					c.OverlapFrames = overlap
					set := func(c *Config) { c.FixedGEMMAlgo, c.AsyncPageTable = true, asyncTable }
					st, err := engine.New(context.Background(), c, keptFactory(set, &g), nil)
					if err != nil {
						t.Fatal(err)
					}
					res := pushAll(t, st, frames, true)
					slots := false
					_ = g.own.do(func() error {
						slots = g.down.slot[0].p != nil
						return nil
					})
					if err := st.Close(); err != nil {
						t.Fatal(err)
					}
					return res, slots
				}
				want, _ := run(false, false)
				for _, v := range []struct{ overlap, asyncTable bool }{{true, false}, {false, true}, {true, true}} {
					name := fmt.Sprintf("overlap_frames %v, async_page_table %v", v.overlap, v.asyncTable)
					got, slots := run(v.overlap, v.asyncTable)
					if slots != v.overlap {
						t.Fatalf("%s: download slots used %v", name, slots)
					}
					if len(got) != len(want) || len(got) != len(frames) {
						t.Fatalf("%s: %d results, %d without, for %d frames", name, len(got), len(want), len(frames))
					}
					for i := range want {
						a, b := got[i], want[i]
						if a.Seq != b.Seq || a.Kind != b.Kind {
							t.Fatalf("%s: result %d is frame %d (%v), %d (%v) without", name, i, a.Seq, a.Kind, b.Seq, b.Kind)
						}
						for _, f := range []struct {
							name string
							x, y []float32
						}{{"pose encoding", a.PoseEnc[:], b.PoseEnc[:]}, {"depth", a.Depth, b.Depth}, {"depth confidence", a.Conf, b.Conf},
							{"points", a.Points, b.Points}} {
							if !slices.EqualFunc(f.x, f.y, func(p, q float32) bool { return math.Float32bits(p) == math.Float32bits(q) }) {
								t.Fatalf("%s: frame %d: %s differs (relative %.3g)", name, a.Seq, f.name, relDiff(f.x, f.y))
							}
						}
					}
				}
			})
		}
	}
}
