//go:build cuda

package cuda

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/lingbotmap/lingbotmap/engine"
	"github.com/lingbotmap/lingbotmap/engine/backend"
	"github.com/lingbotmap/lingbotmap/engine/geom"
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
// cuda.async_page_table, with both, and with both and encode_beside_heads
// gives the results it gives with none, bit for bit, in fp32, bf16 and fp8
// with graphs on; with overlap_frames the held frames' copies went through
// the download slots, and with encode_beside_heads the side stream ran as
// many branches as without (the camera head's, the next frame's encoder
// now in them) and ended no more of them on the host's side.
func TestOverlapFramesMatchSerial(t *testing.T) {
	for _, prec := range []string{"fp32", "bf16", "fp8"} {
		for _, interval := range []int{1, 2} {
			t.Run(fmt.Sprintf("%s/interval %d", prec, interval), func(t *testing.T) {
				cfg := goldenEngineConfig(t, prec)
				cfg.KeyframeInterval = interval
				frames := goldenFramesTwice(t, "stream_kf1")
				type sideStream struct{ branches, onHost int64 }
				run := func(overlap, asyncTable, beside bool) ([]engine.Result, bool, sideStream) {
					var g *gpu
					c := cfg
					c.OverlapFrames, c.EncodeBesideHeads = overlap, beside
					set := func(c *Config) { c.FixedGEMMAlgo, c.AsyncPageTable = true, asyncTable }
					st, err := engine.New(context.Background(), c, keptFactory(set, &g), nil)
					if err != nil {
						t.Fatal(err)
					}
					res := pushAll(t, st, frames, true)
					slots := false
					var side sideStream
					_ = g.own.do(func() error {
						slots = g.down.slot[0].p != nil
						side = sideStream{g.br.branches, g.br.serial}
						return nil
					})
					if err := st.Close(); err != nil {
						t.Fatal(err)
					}
					return res, slots, side
				}
				want, _, plain := run(false, false, false)
				for _, v := range []struct{ overlap, asyncTable, beside bool }{{true, false, false}, {false, true, false}, {true, true, false}, {true, true, true}} {
					name := fmt.Sprintf("overlap_frames %v, async_page_table %v, encode_beside_heads %v", v.overlap, v.asyncTable, v.beside)
					got, slots, side := run(v.overlap, v.asyncTable, v.beside)
					if slots != v.overlap {
						t.Fatalf("%s: download slots used %v", name, slots)
					}
					if v.beside && (side.branches != plain.branches || side.onHost > plain.onHost) {
						t.Fatalf("%s: %d branches, %d of them ended on the host's side; without overlap %d and %d", name, side.branches, side.onHost, plain.branches, plain.onHost)
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
							if !equalBits(f.x, f.y) {
								t.Fatalf("%s: frame %d: %s differs (relative %.3g)", name, a.Seq, f.name, relDiff(f.x, f.y))
							}
						}
					}
				}
			})
		}
	}
}

// TestStartUnprojectMatchesUnproject: points queued by StartUnproject (all
// of a run's frames queued before the first is waited for, more than there
// are download slots, so that the copy at Wait is taken too) are
// Unproject's points bit for bit, golden and synthetic frames, strides 1
// and 3, depth scales 1 and 1.37; a refused frame's Wait gives its error.
func TestStartUnprojectMatchesUnproject(t *testing.T) {
	cases := goldenCases(t, "stream_kf1")
	for i, sz := range [][2]int{{37, 23}, {1, 1}, {257, 1}, {518, 392}} {
		cases = append(cases, syntheticCase(sz[0], sz[1], uint64(10+i)))
	}
	g := fx.fp32
	type queued struct {
		what        string
		depth, conf backend.Tensor
		u           backend.Unprojection
		p           backend.PendingPoints
	}
	var qs []queued
	for _, c := range cases {
		depth, conf := g.FromHost(c.depth, c.h, c.w), g.FromHost(c.conf, c.h, c.w)
		for _, filt := range []geom.PointFilter{{ConfThreshold: 1.5, Stride: 1}, {ConfThreshold: 2, Stride: 3}} {
			for _, scale := range []float32{1, 1.37} {
				u := backend.Unprojection{Width: c.w, Height: c.h, Intrinsics: c.k, CamToWorld: c.pose,
					DepthScale: scale, ConfThreshold: filt.ConfThreshold, Stride: filt.Stride}
				qs = append(qs, queued{what: fmt.Sprintf("%s, threshold %g, stride %d, scale %g", c.name, filt.ConfThreshold, filt.Stride, scale),
					depth: depth, conf: conf, u: u, p: g.(backend.AsyncUnprojector).StartUnproject(depth, conf, u)})
			}
		}
	}
	if len(qs) <= downSlots {
		t.Fatalf("%d frames queued: the copy without a slot is not exercised", len(qs))
	}
	total := 0
	for _, q := range qs {
		gx, gp, err := q.p.Wait()
		if err != nil {
			t.Fatalf("%s: %v", q.what, err)
		}
		wx, wp, err := g.(backend.Unprojector).Unproject(q.depth, q.conf, q.u)
		if err != nil {
			t.Fatalf("%s: %v", q.what, err)
		}
		if !equalBits(gx, wx) || !slices.Equal(gp, wp) {
			t.Fatalf("%s: %d points queued, %d by Unproject, or their values differ", q.what, len(gp), len(wp))
		}
		total += len(wp)
	}
	if total == 0 {
		t.Fatal("no point kept in any case: the test compares nothing")
	}
	freed := map[backend.Tensor]bool{}
	for _, q := range qs {
		for _, x := range []backend.Tensor{q.depth, q.conf} {
			if !freed[x] {
				freed[x] = true
				g.Free(x)
			}
		}
	}
	d := g.FromHost(make([]float32, 6), 2, 3)
	defer g.Free(d)
	if _, _, err := g.(backend.AsyncUnprojector).StartUnproject(d, d, backend.Unprojection{Width: 3, Height: 2, Stride: 0}).Wait(); err == nil {
		t.Fatal("stride 0 accepted")
	}
	if err := g.(backend.ErrorReporter).Err(); err != nil {
		t.Fatalf("a refused call broke the backend: %v", err)
	}
	t.Logf("%d frames queued, %d points", len(qs), total)
}

// TestOverlapFramesDevicePointsMatchSerial: a golden stream asked for
// every frame's device points (run's request) gives, with overlap_frames,
// the results and points it gives without, bit for bit, in fp32 and fp8;
// with it the frames' points were queued (StartUnproject) through the
// download slots.
func TestOverlapFramesDevicePointsMatchSerial(t *testing.T) {
	for _, prec := range []string{"fp32", "fp8"} {
		t.Run(prec, func(t *testing.T) {
			cfg := goldenEngineConfig(t, prec)
			frames := goldenFramesTwice(t, "stream_kf1")
			filt := geom.PointFilter{ConfThreshold: 1.5, Stride: 2}
			run := func(overlap bool) []engine.Result {
				var g *gpu
				c := cfg
				c.OverlapFrames = overlap
				st, err := engine.New(context.Background(), c, keptFactory(func(c *Config) { c.FixedGEMMAlgo = true }, &g), nil)
				if err != nil {
					t.Fatal(err)
				}
				defer st.Close()
				if on, err := st.(engine.PointMaker).MakePoints(filt, false); err != nil || !on {
					t.Fatalf("MakePoints: %v, %v", on, err)
				}
				res := pushAll(t, st, frames, true)
				if n := st.Stats().PointsOnDevice; n != int64(len(frames)) {
					t.Fatalf("overlap_frames %v: %d frames with device points, want %d", overlap, n, len(frames))
				}
				return res
			}
			want, got := run(false), run(true)
			if len(got) != len(want) || len(got) != len(frames) {
				t.Fatalf("%d results, %d without overlap, for %d frames", len(got), len(want), len(frames))
			}
			for i := range want {
				a, b := got[i], want[i]
				switch {
				case a.Seq != b.Seq || a.Kind != b.Kind:
					t.Fatalf("result %d is frame %d (%v), %d (%v) without", i, a.Seq, a.Kind, b.Seq, b.Kind)
				case a.PoseEnc != b.PoseEnc || !equalBits(a.Depth, b.Depth) || !equalBits(a.Conf, b.Conf):
					t.Fatalf("frame %d: pose or depth differs with overlap_frames", a.Seq)
				case a.Kept == nil || b.Kept == nil:
					t.Fatalf("frame %d: device points %v with overlap_frames, %v without", a.Seq, a.Kept != nil, b.Kept != nil)
				case !equalBits(a.Kept.XYZ, b.Kept.XYZ) || !slices.Equal(a.Kept.Pixel, b.Kept.Pixel):
					t.Fatalf("frame %d: device points differ with overlap_frames (%d, %d without)", a.Seq, len(a.Kept.Pixel), len(b.Kept.Pixel))
				}
			}
		})
	}
}
