package engine

import (
	"context"
	"math"
	"testing"
)

// liveConfig is the golden tiny model with windows of 3 + (9−3)·1 = 9
// frames stepping by 6 (overlap 3).
func liveConfig(t *testing.T) Config {
	cfg := goldenConfig(t)
	cfg.Windowed = true
	cfg.WindowMode = WindowLive
	return cfg
}

// liveFrames are the golden frames played twice: 32 frames, 5 windows.
func liveFrames(t *testing.T) []Frame {
	frames := goldenFrames(t, "stream_kf1")
	n := len(frames)
	for _, f := range goldenFrames(t, "stream_kf1") {
		f.Seq += uint64(n)
		frames = append(frames, f)
	}
	return frames
}

// pushCounts pushes every frame and records how many results each Push
// returned.
func pushCounts(t *testing.T, st Stream, frames []Frame) ([]Result, []int) {
	t.Helper()
	var out []Result
	var counts []int
	for _, f := range frames {
		res, err := st.Push(context.Background(), f)
		if err != nil {
			t.Fatalf("push %d: %v", f.Seq, err)
		}
		counts = append(counts, len(res))
		out = append(out, res...)
	}
	return out, counts
}

// TestLiveWindowsEmitAtOnce: in live mode every frame's result comes out of
// the Push that brought it (the scale frames of window 0 with the last of
// them), once and in order; window 0 is the plain stream's output as it is,
// later windows are warped by similarities close to the reference mode's,
// and frames outside the overlaps match the reference mode's results.
func TestLiveWindowsEmitAtOnce(t *testing.T) {
	cfg := liveConfig(t)
	frames := liveFrames(t)
	st, err := New(context.Background(), cfg, cpuBackend, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	got, counts := pushCounts(t, st, frames)
	for i, n := range counts {
		want := 1
		switch {
		case i < cfg.ScaleFrames-1:
			want = 0
		case i == cfg.ScaleFrames-1:
			want = cfg.ScaleFrames
		}
		if n != want {
			t.Fatalf("push %d returned %d results, want %d (all counts %v)", i, n, want, counts)
		}
	}
	if rest, err := st.Flush(context.Background()); err != nil || len(rest) != 0 {
		t.Fatalf("flush: %d results, %v; want none left", len(rest), err)
	}
	if len(got) != len(frames) {
		t.Fatalf("%d results for %d frames", len(got), len(frames))
	}
	for i, r := range got {
		if r.Seq != uint64(i) {
			t.Fatalf("result %d is frame %d (counts %v) %v", i, r.Seq, counts, seqs(got))
		}
	}
	if w := got[len(got)-1].Window; w != 4 {
		t.Fatalf("last result from window %d, want 4", w)
	}

	// window 0 (frames 0–8) is the plain stream's output, unwarped
	plainCfg := cfg
	plainCfg.Windowed = false
	plain, err := New(context.Background(), plainCfg, cpuBackend, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	want := runFrames(t, plain, frames[:9], true)
	for i := range want {
		if got[i].Window != 0 || got[i].PoseEnc != want[i].PoseEnc || !equalF32(got[i].Depth, want[i].Depth) {
			t.Fatalf("frame %d (window %d): live %v, plain stream %v", i, got[i].Window, got[i].PoseEnc, want[i].PoseEnc)
		}
	}

	// the reference mode on the same frames: the same windows, similarities
	// computed against the same tails (window 0's quaternions aside)
	refCfg := cfg
	refCfg.WindowMode = WindowReference
	ref, err := New(context.Background(), refCfg, cpuBackend, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()
	refRes := runFrames(t, ref, frames, true)
	ls, rs := st.(Aligner).Alignments(), ref.(Aligner).Alignments()
	if len(ls) != len(rs) || len(ls) != 5 {
		t.Fatalf("%d live alignments, %d reference, want 5", len(ls), len(rs))
	}
	for k := range ls {
		if d := math.Abs(ls[k].Scale-rs[k].Scale) / rs[k].Scale; d > 1e-5 {
			t.Errorf("window %d: scale %v live, %v reference", k, ls[k].Scale, rs[k].Scale)
		}
	}
	// windows start at 0, 6, 12, 18, 24: the overlaps are frames 6–8,
	// 12–14, 18–20 and 24–26, which the reference takes from the later window
	for i, r := range refRes {
		if i < 9 || i%6 < 3 {
			continue
		}
		g := got[i]
		if g.Window != r.Window {
			t.Fatalf("frame %d: window %d live, %d reference", i, g.Window, r.Window)
		}
		if j, ok := closeRel(g.PoseEnc[:], r.PoseEnc[:], 1e-4); !ok {
			t.Errorf("frame %d: pose %v live, %v reference (element %d)", i, g.PoseEnc, r.PoseEnc, j)
		}
		if j, ok := closeRel(g.Depth, r.Depth, 1e-4); !ok {
			t.Errorf("frame %d: depth differs at %d", i, j)
		}
	}
}

func equalF32(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return true
}

func seqs(rs []Result) []uint64 {
	var out []uint64
	for _, r := range rs {
		out = append(out, r.Seq)
	}
	return out
}
