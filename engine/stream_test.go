package engine

import (
	"context"
	"errors"
	"image"
	"image/color"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lingbotmap/lingbotmap/engine/backend"
	"github.com/lingbotmap/lingbotmap/engine/cpu"
	"github.com/lingbotmap/lingbotmap/engine/model"
	"github.com/lingbotmap/lingbotmap/engine/weights"
)

func tinyConfig() Config {
	cfg := DefaultConfig()
	cfg.ModelSize = "tiny"
	cfg.ImageWidth = 70
	cfg.ScaleFrames = 3
	cfg.SlidingWindow = 4
	cfg.Threads = 2
	return cfg
}

func testImage(w, h int, seed uint8) image.Image {
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for y := 0; y < h; y++ {
		for x := 0; x < w; x++ {
			img.Set(x, y, color.RGBA{uint8(x*3) + seed, uint8(y*5) ^ seed, seed * 7, 255})
		}
	}
	return img
}

func pushAll(t *testing.T, st Stream, frames []Frame) []Result {
	t.Helper()
	ctx := context.Background()
	var out []Result
	for _, f := range frames {
		res, err := st.Push(ctx, f)
		if err != nil {
			t.Fatalf("push %d: %v", f.Seq, err)
		}
		out = append(out, res...)
	}
	res, err := st.Flush(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return append(out, res...)
}

func TestStreamScheduleAndResults(t *testing.T) {
	st, err := New(context.Background(), tinyConfig(), cpuBackend, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var frames []Frame
	for i := 0; i < 7; i++ {
		frames = append(frames, Frame{Seq: uint64(100 + i), Stamp: time.Unix(1700000000+int64(i), 0), Image: testImage(140, 84, uint8(i))})
	}
	// phase 1 buffers the scale frames: no result until the third
	for i := 0; i < 2; i++ {
		res, err := st.Push(context.Background(), frames[i])
		if err != nil || len(res) != 0 {
			t.Fatalf("frame %d: %d results, %v; want none while buffering", i, len(res), err)
		}
	}
	res := pushAll(t, st, frames[2:])
	if len(res) != 7 {
		t.Fatalf("%d results for 7 frames", len(res))
	}
	for i, r := range res {
		if r.Seq != uint64(100+i) || !r.Stamp.Equal(frames[i].Stamp) {
			t.Fatalf("result %d is seq %d stamp %v", i, r.Seq, r.Stamp)
		}
		want := Keyframe
		if i < 3 {
			want = Scale
		}
		if r.Kind != want {
			t.Errorf("result %d kind %v, want %v", i, r.Kind, want)
		}
		if r.Width != 70 || r.Height != 42 || len(r.Depth) != 70*42 || len(r.Conf) != 70*42 || len(r.RGB) != 3*70*42 {
			t.Fatalf("result %d: %dx%d, %d depths, %d rgb", i, r.Width, r.Height, len(r.Depth), len(r.RGB))
		}
		for _, d := range r.Depth {
			if !(d > 0) || math.IsInf(float64(d), 0) {
				t.Fatalf("result %d: depth %v", i, d)
			}
		}
		// CamToWorld is a rigid transform: orthonormal rotation, last row 0 0 0 1
		m := r.CamToWorld
		for a := 0; a < 3; a++ {
			for b := 0; b < 3; b++ {
				var dot float64
				for k := 0; k < 3; k++ {
					dot += m[a][k] * m[b][k]
				}
				want := 0.0
				if a == b {
					want = 1
				}
				if math.Abs(dot-want) > 1e-9 {
					t.Fatalf("result %d: rotation rows %d,%d dot %v", i, a, b, dot)
				}
			}
		}
		if m[3] != [4]float64{0, 0, 0, 1} {
			t.Fatalf("result %d: last row %v", i, m[3])
		}
		if r.Intrinsics[2] != 35 || r.Intrinsics[3] != 21 || !(r.Intrinsics[0] > 0) {
			t.Fatalf("result %d: intrinsics %v", i, r.Intrinsics)
		}
	}
	s := st.Stats()
	if s.FrameCount != 7 || s.ScalePages != 3 || s.LivePages != 4 || s.FramesIn != 7 || s.CameraFrames != 7 {
		t.Fatalf("stats %+v", s)
	}
	// Reset starts a new map with a fresh phase 1.
	if err := st.Reset(); err != nil {
		t.Fatal(err)
	}
	if s := st.Stats(); s.FrameCount != 0 {
		t.Fatalf("after reset: %+v", s)
	}
	res = pushAll(t, st, frames[:2])
	if len(res) != 2 || res[0].Kind != Scale || res[1].Kind != Scale {
		t.Fatalf("a short input is flushed as scale frames: %+v", res)
	}
}

func TestStreamRejectsBadInput(t *testing.T) {
	ctx := context.Background()
	st, err := New(ctx, tinyConfig(), cpuBackend, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := st.Push(ctx, Frame{Seq: 1}); err == nil || !strings.Contains(err.Error(), "no image") {
		t.Fatalf("empty frame: %v", err)
	}
	nan := make([]float32, 3*70*42)
	nan[5] = float32(math.NaN())
	if _, err := st.Push(ctx, Frame{Seq: 2, Pixels: nan, Width: 70, Height: 42}); err == nil || !strings.Contains(err.Error(), "NaN") {
		t.Fatalf("NaN pixels: %v", err)
	}
	if _, err := st.Push(ctx, Frame{Seq: 3, Pixels: make([]float32, 10), Width: 70, Height: 42}); err == nil {
		t.Fatal("short pixel buffer accepted")
	}
	// Prepare's frame skips the scan (its pixels come from bytes); the same
	// pixels handed in as a caller's are scanned
	pf, err := st.(Preparer).Prepare(Frame{Seq: 2, Image: testImage(140, 84, 1)})
	if err != nil || !pf.prepared || pf.RGB == nil {
		t.Fatalf("Prepare: %v, prepared %v", err, pf.prepared)
	}
	own := Frame{Seq: 2, Pixels: slices.Clone(pf.Pixels), Width: pf.Width, Height: pf.Height}
	own.Pixels[7] = float32(math.Inf(1))
	if _, err := st.Push(ctx, own); err == nil || !strings.Contains(err.Error(), "Inf") {
		t.Fatalf("Inf pixels: %v", err)
	}
	if _, err := st.Push(ctx, Frame{Seq: 4, Image: testImage(140, 84, 1)}); err != nil {
		t.Fatal(err)
	}
	// a different aspect ratio changes the model resolution mid-stream
	_, err = st.Push(ctx, Frame{Seq: 5, Image: testImage(140, 140, 1)})
	if err == nil || !strings.Contains(err.Error(), "size changed") {
		t.Fatalf("size change: %v", err)
	}
	st.Close()
	if _, err := st.Push(ctx, Frame{Seq: 6, Image: testImage(140, 84, 1)}); err == nil {
		t.Fatal("push after close accepted")
	}
}

func TestStreamCacheFull(t *testing.T) {
	ctx := context.Background()
	cfg := tinyConfig()
	cfg.MaxFrames = 5
	st, err := New(ctx, cfg, cpuBackend, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var last error
	for i := 0; i < 8 && last == nil; i++ {
		_, last = st.Push(ctx, Frame{Seq: uint64(i), Image: testImage(70, 42, uint8(i))})
	}
	if !errors.Is(last, ErrCacheFull) {
		t.Fatalf("got %v, want ErrCacheFull", last)
	}
}

func TestStreamWindowedReleasesEveryFrame(t *testing.T) {
	ctx := context.Background()
	cfg := tinyConfig()
	cfg.Windowed, cfg.WindowSize, cfg.OverlapSize, cfg.KeyframeInterval = true, 6, 3, 2
	st, err := New(ctx, cfg, cpuBackend, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var frames []Frame
	for i := 0; i < 20; i++ {
		frames = append(frames, Frame{Seq: uint64(i), Image: testImage(70, 42, uint8(i))})
	}
	res := pushAll(t, st, frames)
	if len(res) != 20 {
		t.Fatalf("%d results for 20 frames", len(res))
	}
	windows := map[int]bool{}
	for i, r := range res {
		if r.Seq != uint64(i) {
			t.Fatalf("result %d is frame %d", i, r.Seq)
		}
		windows[r.Window] = true
		// windowed output is re-encoded as unit quaternions once there are two windows
		q := r.PoseEnc[3:7]
		n := math.Sqrt(float64(q[0]*q[0] + q[1]*q[1] + q[2]*q[2] + q[3]*q[3]))
		if math.Abs(n-1) > 1e-5 || q[3] < 0 {
			t.Fatalf("result %d: quaternion %v", i, q)
		}
	}
	// window = 3 + (6-3)·2 = 9 frames, step 6: windows start at 0, 6, 12
	if len(windows) != 3 {
		t.Fatalf("results came from windows %v, want 3 windows", windows)
	}
	sims := st.(Aligner).Alignments()
	if len(sims) != 3 || sims[0].Scale != 1 || sims[0].T != [3]float64{} {
		t.Fatalf("alignments %+v, want 3 starting with the identity", sims)
	}
	for i, s := range sims[1:] {
		if !(s.Scale >= 1e-3 && s.Scale <= 1e3) {
			t.Fatalf("window %d scale %v outside the reference's clamp", i+1, s.Scale)
		}
	}
}

func TestConfigValidateNamesTheKey(t *testing.T) {
	cfg := DefaultConfig()
	cfg.KeyframeInterval = 0
	cfg.Device = "tpu"
	err := cfg.Validate()
	if err == nil || !strings.Contains(err.Error(), "'keyframe_interval'") || !strings.Contains(err.Error(), "'device'") {
		t.Fatalf("Validate: %v", err)
	}
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatalf("defaults invalid: %v", err)
	}
}

// A checkpoint with a missing and a mis-shaped tensor is refused before the
// model is built, naming both; a truncated file is a clear error too.
func TestStreamRejectsBadCheckpoints(t *testing.T) {
	ctx := context.Background()
	m := weights.Random(weights.TinyArch(), 3)
	m.Delete("aggregator.frame_blocks.1.mlp.fc2.bias")
	if err := m.Put("aggregator.global_blocks.2.attn.proj.weight", []int{7, 7}, make([]float32, 49)); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.safetensors")
	f, err := os.Create(bad)
	if err != nil {
		t.Fatal(err)
	}
	if err := weights.WriteSafeTensors(f, m); err != nil {
		t.Fatal(err)
	}
	f.Close()
	cfg := tinyConfig()
	cfg.Weights = bad
	_, err = New(ctx, cfg, cpuBackend, nil)
	if err == nil || !strings.Contains(err.Error(), "aggregator.frame_blocks.1.mlp.fc2.bias") || !strings.Contains(err.Error(), "aggregator.global_blocks.2.attn.proj.weight") {
		t.Fatalf("bad checkpoint: %v", err)
	}
	// truncate a good file
	good, err := os.ReadFile(bad)
	if err != nil {
		t.Fatal(err)
	}
	trunc := filepath.Join(dir, "trunc.safetensors")
	if err := os.WriteFile(trunc, good[:len(good)/2], 0o644); err != nil {
		t.Fatal(err)
	}
	cfg.Weights = trunc
	if _, err := New(ctx, cfg, cpuBackend, nil); err == nil || !strings.Contains(err.Error(), "trunc.safetensors") {
		t.Fatalf("truncated checkpoint: %v", err)
	}
}

// TestStreamDecideOverridesFlowDecisions: a huge threshold makes every
// streamed frame a non-keyframe; Decide sees each decision in order with its
// flow and turns the second one into a keyframe.
func TestStreamDecideOverridesFlowDecisions(t *testing.T) {
	cfg := tinyConfig()
	cfg.FlowThreshold = 1e9
	var seen []int
	var flows []float64
	cfg.Decide = func(i int, flow float64, kf bool) bool {
		seen = append(seen, i)
		flows = append(flows, flow)
		if i == 0 && !kf {
			t.Errorf("decision 0 (the window's first keyframe) came in as a non-keyframe")
		}
		if i > 0 && kf {
			t.Errorf("decision %d came in as a keyframe at flow %g under threshold 1e9", i, flow)
		}
		return kf || i == 2
	}
	var trace []TraceEvent
	cfg.Trace = func(ev TraceEvent) { trace = append(trace, ev) }
	st, err := New(context.Background(), cfg, cpuBackend, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var frames []Frame
	for i := 0; i < 7; i++ {
		frames = append(frames, Frame{Seq: uint64(i), Image: testImage(140, 84, uint8(9*i))})
	}
	res := pushAll(t, st, frames)
	if len(seen) != 4 || seen[0] != 0 || seen[3] != 3 {
		t.Fatalf("decisions seen %v, want 0..3 for the 4 streamed frames", seen)
	}
	var kinds []FrameKind
	for _, r := range res {
		kinds = append(kinds, r.Kind)
	}
	want := []FrameKind{Scale, Scale, Scale, Keyframe, NonKeyframe, Keyframe, NonKeyframe}
	if !slices.Equal(kinds, want) {
		t.Fatalf("frame kinds %v, want %v", kinds, want)
	}
	var events []string
	for _, ev := range trace {
		if ev.Event == "commit" || ev.Event == "rollback" {
			events = append(events, ev.Event)
			if ev.Flow != flows[len(events)-1] {
				t.Errorf("traced flow %g, Decide saw %g", ev.Flow, flows[len(events)-1])
			}
		}
	}
	if !slices.Equal(events, []string{"commit", "rollback", "commit", "rollback"}) {
		t.Fatalf("traced decisions %v", events)
	}
}

// cpuBackend is the engine tests' backend factory.
func cpuBackend(cfg Config) (backend.Backend, error) {
	return cpu.New(cpu.Config{Threads: cfg.Threads}), nil
}

// wrappedStream is a stream on the tiny model whose backend wrap puts a
// test double around, returned with it; everything is closed when the test
// ends.
func wrappedStream[B backend.Backend](t *testing.T, cfg Config, wrap func(backend.Backend) B) (*stream, *model.Model, B) {
	t.Helper()
	store, err := openWeights(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	inner, err := cpuBackend(cfg)
	if err != nil {
		t.Fatal(err)
	}
	be := wrap(inner)
	m, err := model.Load(be, store, model.Options{ScaleFrames: cfg.ScaleFrames, SlidingWindow: cfg.SlidingWindow, MaxFrames: cfg.MaxFrames})
	if err != nil {
		t.Fatal(err)
	}
	st := newStream(cfg, slog.New(slog.DiscardHandler), be, m)
	t.Cleanup(func() { st.Close() })
	return st, m, be
}

// pushFrames feeds n test frames and returns how many results came out.
func pushFrames(t *testing.T, st *stream, n int) int {
	t.Helper()
	results := 0
	for i := 0; i < n; i++ {
		res, err := st.Push(context.Background(), Frame{Seq: uint64(i), Image: testImage(70, 42, uint8(i))})
		if err != nil {
			t.Fatal(err)
		}
		results += len(res)
	}
	return results
}

// trimCounter is a backend that can give cached device memory back; it
// counts when the stream asks it to.
type trimCounter struct {
	backend.Backend
	trims int
}

func (t *trimCounter) Trim() { t.trims++ }

// releaseCounter is a backend whose KV stores can give their memory back;
// it counts when the model asks them to.
type releaseCounter struct {
	backend.Backend
	releases int
}

type countedStore struct {
	backend.KVStore
	owner *releaseCounter
}

func (s countedStore) Release() error {
	s.owner.releases++
	return nil
}

func (b *releaseCounter) NewKVStore(spec backend.KVSpec) (backend.KVStore, error) {
	st, err := b.Backend.NewKVStore(spec)
	if err != nil {
		return nil, err
	}
	return countedStore{st, b}, nil
}

func (b *releaseCounter) WriteKV(s backend.KVStore, layer, page, dstRow int, k, v backend.Tensor, srcRow, n int) {
	b.Backend.WriteKV(s.(countedStore).KVStore, layer, page, dstRow, k, v, srcRow, n)
}

func (b *releaseCounter) PagedAttention(q backend.Tensor, s backend.KVStore, layer int, pages []int32, lastPageLen int, scale float32) backend.Tensor {
	return b.Backend.PagedAttention(q, s.(countedStore).KVStore, layer, pages, lastPageLen, scale)
}

// TestStreamReleasesKVAtReset: a reset (a new map) lets the KV store give
// its pages' memory back, and the stream carries on after it; frames alone
// never do.
func TestStreamReleasesKVAtReset(t *testing.T) {
	cfg := tinyConfig()
	st, m, be := wrappedStream(t, cfg, func(inner backend.Backend) *releaseCounter { return &releaseCounter{Backend: inner} })
	results := 0
	push := func(n int) { results += pushFrames(t, st, n) }
	push(cfg.ScaleFrames + 3)
	if be.releases != 0 {
		t.Fatalf("%d releases while streaming, want 0", be.releases)
	}
	if err := m.ReleaseCache(); err == nil {
		t.Fatal("ReleaseCache with frames in the cache did not fail")
	}
	if err := st.Reset(); err != nil {
		t.Fatal(err)
	}
	if be.releases != 1 {
		t.Fatalf("%d releases after a reset, want 1", be.releases)
	}
	before := results
	push(cfg.ScaleFrames + 2)
	if results-before != cfg.ScaleFrames+2 {
		t.Fatalf("%d results after the reset, want %d", results-before, cfg.ScaleFrames+2)
	}
}

// TestStreamTrimsTheBackend: the stream lets a GPU backend drop its cached
// buffers after phase 1 (whose shapes do not come again) and at a reset
// (before the next phase 1 comes on top of them), and not on other frames.
func TestStreamTrimsTheBackend(t *testing.T) {
	cfg := tinyConfig()
	st, _, be := wrappedStream(t, cfg, func(inner backend.Backend) *trimCounter { return &trimCounter{Backend: inner} })
	push := func(n int) { pushFrames(t, st, n) }
	push(cfg.ScaleFrames - 1)
	if be.trims != 0 {
		t.Fatalf("%d trims before phase 1 ran", be.trims)
	}
	push(1)
	if be.trims != 1 {
		t.Fatalf("%d trims after phase 1, want 1", be.trims)
	}
	push(3)
	if be.trims != 1 {
		t.Fatalf("%d trims after 3 streaming frames, want still 1", be.trims)
	}
	if err := st.Reset(); err != nil {
		t.Fatal(err)
	}
	if be.trims != 2 {
		t.Fatalf("%d trims after a reset, want 2", be.trims)
	}
	push(cfg.ScaleFrames)
	if be.trims != 3 {
		t.Fatalf("%d trims after the next phase 1, want 3", be.trims)
	}
}

// hookCounter is a backend with the measuring hooks bench uses (a device
// backend's operation profile and memory peak); it counts the calls.
type hookCounter struct {
	backend.Backend
	profileRestarts, peakResets int
}

func (h *hookCounter) RestartProfile()                    { h.profileRestarts++ }
func (h *hookCounter) ResetMemoryPeak()                   { h.peakResets++ }
func (h *hookCounter) MemoryUsage() (current, peak int64) { return 1, 2 }

// TestStreamForwardsMeasuringHooks: bench reaches the backend's hooks
// through the stream, and a backend without them is no error.
func TestStreamForwardsMeasuringHooks(t *testing.T) {
	cfg := tinyConfig()
	st, _, be := wrappedStream(t, cfg, func(inner backend.Backend) *hookCounter { return &hookCounter{Backend: inner} })
	st.RestartProfile()
	st.ResetMemoryPeak()
	st.RestartProfile()
	if be.profileRestarts != 2 || be.peakResets != 1 {
		t.Fatalf("backend saw %d profile restarts and %d peak resets, want 2 and 1", be.profileRestarts, be.peakResets)
	}
	if cur, peak := st.MemoryUsage(); cur != 1 || peak != 2 {
		t.Fatalf("stream reports memory (%d, %d), want the backend's (1, 2)", cur, peak)
	}
	plain, _, _ := wrappedStream(t, cfg, func(inner backend.Backend) backend.Backend { return inner })
	plain.RestartProfile()
	plain.ResetMemoryPeak()
	if n := pushFrames(t, plain, cfg.ScaleFrames+1); n == 0 {
		t.Fatal("no results after the hooks on a backend without them")
	}
}
