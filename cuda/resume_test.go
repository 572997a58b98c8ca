//go:build cuda

package cuda

import (
	"bytes"
	"context"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/lingbotmap/lingbotmap/engine"
	"github.com/lingbotmap/lingbotmap/engine/backend"
	goldencase "github.com/lingbotmap/lingbotmap/engine/golden"
	"github.com/lingbotmap/lingbotmap/engine/golden/goldentest"
	"github.com/lingbotmap/lingbotmap/internal/shared/sharedtest"
)

// TestKVSnapshotRoundTrip: pages written on the device, exported, imported
// into a second store and exported again come back bit for bit, in both
// precisions (bf16 pages widen to float32 and round back exactly).
func TestKVSnapshotRoundTrip(t *testing.T) {
	spec := backend.KVSpec{Layers: 2, Pages: 5, PageSize: 3, Heads: 2, HeadDim: 64}
	ld := spec.Heads * spec.HeadDim
	rng := rand.New(rand.NewPCG(7, 8))
	for _, g := range []Backend{fx.fp32, fx.bf16} {
		a, err := g.NewKVStore(spec)
		if err != nil {
			t.Fatal(err)
		}
		b, err := g.NewKVStore(spec)
		if err != nil {
			t.Fatal(err)
		}
		pages := []int32{3, 0, 4}
		for l := 0; l < spec.Layers; l++ {
			for _, p := range pages {
				kv := make([]float32, spec.PageSize*ld)
				vv := make([]float32, len(kv))
				for i := range kv {
					kv[i], vv[i] = float32(rng.NormFloat64()), float32(rng.NormFloat64())
				}
				k, v := g.FromHost(kv, spec.PageSize, ld), g.FromHost(vv, spec.PageSize, ld)
				g.WriteKV(a, l, int(p), 0, k, v, 0, spec.PageSize)
				g.Free(k)
				g.Free(v)
			}
		}
		n := len(pages) * spec.PageSize * ld
		for l := 0; l < spec.Layers; l++ {
			k1, v1 := make([]float32, n), make([]float32, n)
			if err := a.(backend.KVSnapshotter).ExportKV(l, pages, k1, v1); err != nil {
				t.Fatal(err)
			}
			if err := b.(backend.KVSnapshotter).ImportKV(l, pages, k1, v1); err != nil {
				t.Fatal(err)
			}
			k2, v2 := make([]float32, n), make([]float32, n)
			if err := b.(backend.KVSnapshotter).ExportKV(l, pages, k2, v2); err != nil {
				t.Fatal(err)
			}
			for i := range k1 {
				if math.Float32bits(k1[i]) != math.Float32bits(k2[i]) || math.Float32bits(v1[i]) != math.Float32bits(v2[i]) || k1[i] == 0 {
					t.Fatalf("%s layer %d value %d: exported %g/%g, after the round trip %g/%g", g.(*gpu).cfg.Precision, l, i, k1[i], v1[i], k2[i], v2[i])
				}
			}
		}
		a.(interface{ Close() error }).Close()
		b.(interface{ Close() error }).Close()
	}
	if err := fx.bf16.(backend.ErrorReporter).Err(); err != nil {
		t.Fatal(err)
	}
}

// TestResumeEqualsUninterruptedGPU: the engine on the GPU saved after k
// frames and resumed into a new backend continues as the uninterrupted
// stream, in streaming, keyframe-interval, flow-keyframe and windowed modes:
// poses and depths within the precision's tolerance (the KV pages and camera
// caches come back bit for bit; GEMM algorithms are fixed so that both
// streams pick the same ones).
func TestResumeEqualsUninterruptedGPU(t *testing.T) {
	factory := func(cfg engine.Config) (backend.Backend, error) {
		c := testConfig(precisions[cfg.Precision])
		c.FixedGEMMAlgo = true
		return New(c)
	}
	push := func(st engine.Stream, fs []engine.Frame, flush bool) []engine.Result {
		return pushAll(t, st, fs, flush)
	}
	modes := []struct {
		name   string
		golden string
		set    func(*engine.Config)
		cut    int
	}{
		{"streaming", "stream_kf1", func(*engine.Config) {}, 9},
		{"keyframe interval", "stream_kf2", func(c *engine.Config) { c.KeyframeInterval = 2 }, 9},
		{"flow keyframes", "stream_flow", func(c *engine.Config) { c.FlowThreshold = 14 }, 7},
		// the frames played twice: the cut falls in the second window
		{"windowed", "windowed_kf2", func(c *engine.Config) { c.Windowed = true; c.KeyframeInterval = 2 }, 16},
	}
	for _, mode := range modes {
		frames := goldenFrames(t, mode.golden)
		if mode.name == "windowed" {
			frames = goldenFramesTwice(t, mode.golden)
		}
		for _, prec := range []struct {
			name string
			tol  float64
		}{{"fp32", 1e-5}, {"bf16", tolBF16}} {
			t.Run(mode.name+"/"+prec.name, func(t *testing.T) {
				cfg := goldenEngineConfig(t, prec.name)
				mode.set(&cfg)
				ref, err := engine.New(context.Background(), cfg, factory, nil)
				if err != nil {
					t.Fatal(err)
				}
				want := push(ref, frames, true)
				ref.Close()
				k := mode.cut
				first, err := engine.New(context.Background(), cfg, factory, nil)
				if err != nil {
					t.Fatal(err)
				}
				got := push(first, frames[:k], false)
				var buf bytes.Buffer
				if err := first.(engine.Snapshotter).SaveState(&buf); err != nil {
					t.Fatal(err)
				}
				first.Close()
				resumed, err := engine.Resume(context.Background(), cfg, factory, &buf, nil)
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, push(resumed, frames[k:], true)...)
				resumed.Close()
				if len(got) != len(want) {
					t.Fatalf("%d results after resume, %d uninterrupted", len(got), len(want))
				}
				var worst float64
				for i := range want {
					if got[i].Kind != want[i].Kind {
						t.Fatalf("frame %d is a %v after resume, a %v uninterrupted", i, got[i].Kind, want[i].Kind)
					}
					worst = math.Max(worst, relDiff(got[i].PoseEnc[:], want[i].PoseEnc[:]))
					worst = math.Max(worst, relDiff(got[i].Depth, want[i].Depth))
				}
				t.Logf("%s %s: %d results, largest relative difference after resume %.3g", mode.name, prec.name, len(want), worst)
				if worst > prec.tol {
					t.Fatalf("resumed results differ by %g relative (tolerance %g)", worst, prec.tol)
				}
			})
		}
	}
}

// relDiff is ‖a−b‖/‖b‖.
func relDiff(a, b []float32) float64 {
	var num, den float64
	for i := range b {
		d := float64(a[i]) - float64(b[i])
		num += d * d
		den += float64(b[i]) * float64(b[i])
	}
	if den == 0 {
		return math.Sqrt(num)
	}
	return math.Sqrt(num / den)
}

// goldenFrames are a golden case's input images as engine frames.
func goldenFrames(t testing.TB, name string) []engine.Frame {
	in := goldentest.Open(t, name, goldencase.InputsFile)
	imgs, shape, err := goldencase.Tensor(in, "images")
	if err != nil {
		t.Fatal(err)
	}
	per := shape[1] * shape[2] * shape[3]
	var frames []engine.Frame
	for i := 0; i < shape[0]; i++ {
		frames = append(frames, engine.Frame{Seq: uint64(i), Pixels: imgs[i*per : (i+1)*per], Width: shape[3], Height: shape[2]})
	}
	return frames
}

// precisions maps the engine's precision names onto the backend's.
var precisions = map[string]Precision{"fp32": FP32, "bf16": BF16, "fp8": FP8}

// pushAll pushes frames through a stream, then flushes it if flush says so,
// and returns the results in order.
func pushAll(t testing.TB, st engine.Stream, fs []engine.Frame, flush bool) []engine.Result {
	t.Helper()
	var out []engine.Result
	for _, f := range fs {
		res, err := st.Push(context.Background(), f)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, res...)
	}
	if flush {
		res, err := st.Flush(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, res...)
	}
	return out
}

// goldenFramesTwice is a golden case's frames played twice, numbered on.
func goldenFramesTwice(t testing.TB, name string) []engine.Frame {
	frames := goldenFrames(t, name)
	for _, f := range goldenFrames(t, name) {
		f.Seq += uint64(len(frames))
		frames = append(frames, f)
	}
	return frames
}

// goldenEngineConfig runs the golden cases' tiny model on the GPU in a
// precision (with a window of 9 frames, 3 overlapping, when windowed).
func goldenEngineConfig(t testing.TB, precision string) engine.Config {
	cfg := engine.DefaultConfig()
	cfg.Device, cfg.Precision = "cuda", precision
	cfg.Weights = sharedtest.Path(t, "golden", "weights.safetensors")
	cfg.ImageWidth, cfg.ScaleFrames, cfg.SlidingWindow, cfg.MaxFrames = 70, 3, 4, 256
	cfg.SelectedLayers = []int{0, 2, 3, 4}
	cfg.WindowSize, cfg.OverlapSize = 9, 3
	return cfg
}
