package engine

import (
	"bytes"
	"context"
	"log/slog"
	"math"
	"slices"
	"strings"
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

// TestLiveEarlyStartEqualsSerial: live windows with the next window warmed
// up in the background give bit-identical results, alignments and
// per-Push result counts to live windows changed serially; the warm-up is
// done when each window ends (nothing left for the change), is spread over
// the re-run frames, and the stream holds two model states at most, with
// the same cache state and KV memory at the same point of every window.
func TestLiveEarlyStartEqualsSerial(t *testing.T) {
	cases := []struct {
		name   string
		set    func(*Config)
		spread int // pushes that carry warm-up work, per window change
	}{
		// one frame after the scale frames: the phase 1 (bar the
		// encodings) runs on it
		{"overlap 4", func(c *Config) { c.OverlapSize = 4 }, 4},
		{"keyframe interval 2", func(c *Config) { c.KeyframeInterval, c.OverlapSize = 2, 6 }, 6},
		// overlap twice the scale frames, as the node's 16 and 8
		{"overlap 6", func(c *Config) { c.OverlapSize, c.WindowSize = 6, 15 }, 6},
		// windows overlapping more than they advance: a window takes over
		// after the next one's scale frames came, and warms it up on the
		// frames left
		{"overlap 6 of 9", func(c *Config) { c.OverlapSize = 6 }, 3},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := liveConfig(t)
			tc.set(&cfg)
			frames := liveFrames(t)
			run := func(serial bool) ([]Result, []int, []CacheStats, []WarmupStats, *stream) {
				st, err := New(context.Background(), cfg, cpuBackend, nil)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { st.Close() })
				s := st.(*stream)
				s.serialWindows = serial
				var out []Result
				var counts []int
				var stats []CacheStats
				var warm []WarmupStats
				for _, f := range frames {
					res, err := st.Push(context.Background(), f)
					if err != nil {
						t.Fatalf("push %d: %v", f.Seq, err)
					}
					out = append(out, res...)
					counts = append(counts, len(res))
					stats = append(stats, st.Stats())
					warm = append(warm, s.Warmup())
					if n := 1 + btoi(s.next != nil) + btoi(s.spare != nil); n > 2 {
						t.Fatalf("push %d: %d model states", f.Seq, n)
					}
				}
				res, err := st.Flush(context.Background())
				if err != nil || len(res) != 0 {
					t.Fatalf("flush: %d results, %v", len(res), err)
				}
				return out, counts, stats, warm, s
			}
			serial, sCounts, _, sWarm, sStream := run(true)
			early, eCounts, eStats, eWarm, eStream := run(false)
			if !slices.Equal(sCounts, eCounts) {
				t.Fatalf("results per push: serial %v, early %v", sCounts, eCounts)
			}
			if len(early) != len(frames) || len(serial) != len(frames) {
				t.Fatalf("%d and %d results for %d frames", len(serial), len(early), len(frames))
			}
			for i := range serial {
				a, b := serial[i], early[i]
				if a.Seq != uint64(i) || b.Seq != a.Seq || a.Kind != b.Kind || a.Window != b.Window || a.PoseEnc != b.PoseEnc ||
					!equalF32(a.Depth, b.Depth) || !equalF32(a.Conf, b.Conf) || !equalF32(a.Points, b.Points) {
					t.Fatalf("frame %d: serial seq %d %v window %d pose %v; early seq %d %v window %d pose %v",
						i, a.Seq, a.Kind, a.Window, a.PoseEnc, b.Seq, b.Kind, b.Window, b.PoseEnc)
				}
			}
			if !slices.Equal(sStream.Alignments(), eStream.Alignments()) {
				t.Fatalf("alignments: serial %v, early %v", sStream.Alignments(), eStream.Alignments())
			}
			wf, ov := eStream.windowFrames(&window{index: 1}), cfg.OverlapSize
			// window 0 ends shift frames early (it has no gap): frame i is
			// at i+shift in a schedule of equal windows
			wf0 := eStream.windowFrames(&window{index: 0})
			shift, step := wf-wf0, wf-ov
			var switches []int
			working := 0
			for i, w := range eWarm {
				if sWarm[i] != (WarmupStats{}) {
					t.Fatalf("push %d: the serial stream reports warm-up work %+v", i, sWarm[i])
				}
				if w.Switched {
					switches = append(switches, i)
					if w.SwitchSteps != 0 {
						t.Errorf("push %d: %d warm-up steps (cost %d) left for the window change", i, w.SwitchSteps, w.SwitchCost)
					}
					if !w.AlignedAhead {
						t.Errorf("push %d: the window change aligned the new window itself", i)
					}
				}
				// the warm-up works only during the frames a next window
				// re-runs: [k·step, k·step + overlap) for k ≥ 1
				if j := i + shift; w.Steps > 0 && (j < step || j%step >= ov) {
					t.Errorf("push %d: %d warm-up steps outside the overlap", i, w.Steps)
				}
				if w.Steps > 0 {
					working++
				}
			}
			if working < tc.spread*len(switches) {
				t.Errorf("warm-up work in %d pushes for %d window changes: %+v", working, len(eStream.Alignments())-1, eWarm)
			}
			t.Logf("warm-up cost per push: %v", costs(eWarm))
			var want []int
			for i := wf0; i < len(frames); i += step {
				want = append(want, i)
			}
			if !slices.Equal(switches, want) {
				t.Fatalf("windows changed at pushes %v, want %v", switches, want)
			}
			// at most a window's worth of work ran in any one push
			if limit := eStream.m.CallCost(cfg.ScaleFrames) + eStream.m.CallCost(1); maxCost(eWarm) > limit {
				t.Errorf("a push carried warm-up cost %d, more than a phase 1 and a frame (%d)", maxCost(eWarm), limit)
			}
			// the same point of consecutive windows: the same cache and memory
			for i := switches[0] + step; i < len(frames); i++ {
				a, b := eStats[i-step], eStats[i]
				a.Window, a.FramesIn, b.Window, b.FramesIn = 0, 0, 0, 0
				if a != b || eWarm[i].KVBytes != eWarm[i-step].KVBytes {
					t.Fatalf("push %d: %+v (second state %d bytes), a window earlier %+v (%d bytes)", i, b, eWarm[i].KVBytes, a, eWarm[i-step].KVBytes)
				}
			}
		})
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

func maxCost(ws []WarmupStats) int {
	m := 0
	for _, w := range ws {
		m = max(m, w.Cost)
	}
	return m
}

func costs(ws []WarmupStats) []int {
	var out []int
	for _, w := range ws {
		out = append(out, w.Cost)
	}
	return out
}

// TestLiveWarmupCostPerFrame: with an overlap of three times the scale
// frames, the next window runs only its scale frames (the warm-up of a
// window change costs exactly one phase 1), each scale frame's Push carries
// its encoding alone, every later Push at most 3/5 of a frame of warm-up work
// (Pass cost units: the phase 1 after the encodings is about 2.7 frames of
// work over 7 frames, in steps of up to 0.4 frame), nothing is left at the
// change, and the new window
// streams from the first frame after it, the overlap frames after its scale
// frames left to the old window. Every Push returns its own frame's result.
func TestLiveWarmupCostPerFrame(t *testing.T) {
	cfg := liveConfig(t)
	cfg.OverlapSize, cfg.WindowSize = 9, 21 // 21 frames stepping by 12
	frames := liveFrames(t)
	for _, f := range goldenFrames(t, "stream_kf1") {
		f.Seq += uint64(len(frames))
		frames = append(frames, f)
	}
	st, err := New(context.Background(), cfg, cpuBackend, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	s := st.(*stream)
	sf, ov, wf := cfg.ScaleFrames, cfg.OverlapSize, s.windowFrames(&window{index: 1})
	// window 0 ends shift frames early (it has no gap): frame i is at
	// i+shift in a schedule of equal windows
	shift, step := wf-s.windowFrames(&window{index: 0}), wf-ov
	if shift != ov-sf {
		t.Fatalf("window 0 is %d frames shorter than the others, want the gap %d", shift, ov-sf)
	}
	frame, enc := s.m.CallCost(1), s.m.EncodeCost()
	var costs []int
	phase := 0 // warm-up cost since the last window change
	changes := 0
	for i, f := range frames {
		res, err := st.Push(context.Background(), f)
		if err != nil {
			t.Fatalf("push %d: %v", i, err)
		}
		if want := btoi(i >= sf-1) + btoi(i == sf-1)*(sf-1); len(res) != want || len(res) > 0 && res[len(res)-1].Seq != f.Seq {
			t.Fatalf("push %d returned %d results, want %d ending with its frame", i, len(res), want)
		}
		w := s.Warmup()
		costs = append(costs, w.Cost)
		j := i + shift
		r := j % step // the position in the overlap of the change to come
		switch {
		case w.Switched:
			changes++
			if w.SwitchSteps != 0 || w.SwitchCost != 0 {
				t.Errorf("push %d: %d warm-up steps (cost %d) left at the window change", i, w.SwitchSteps, w.SwitchCost)
			}
			if phase != s.m.CallCost(sf) {
				t.Errorf("push %d: the warm-up cost %d, a phase 1 of %d frames %d", i, phase, sf, s.m.CallCost(sf))
			}
			if s.win.n != sf+1 || s.win.gap != ov-sf || res[0].Window != changes {
				t.Errorf("push %d: window %d ran %d frames, gap %d, result of window %d; want %d frames, gap %d", i, s.win.index, s.win.n, s.win.gap, res[0].Window, sf+1, ov-sf)
			}
			phase = 0
		case j < step:
			if w.Cost != 0 {
				t.Errorf("push %d: warm-up cost %d before the overlap", i, w.Cost)
			}
		case r < sf-1:
			if w.Cost != enc {
				t.Errorf("push %d (scale frame %d of the next window): warm-up cost %d, its encoding %d", i, r, w.Cost, enc)
			}
		case r < ov:
			if 5*w.Cost > 3*frame {
				t.Errorf("push %d: warm-up cost %d, more than 3/5 of a frame (%d)", i, w.Cost, frame)
			}
		default:
			if w.Cost != 0 {
				t.Errorf("push %d: warm-up cost %d outside the overlap", i, w.Cost)
			}
		}
		// the overlap frames after the next window's scale frames are the
		// current window's
		if len(res) > 0 && j >= wf && r >= sf && r < ov && res[0].Window != changes {
			t.Errorf("push %d: result of window %d, want %d", i, res[0].Window, changes)
		}
		phase += w.Cost
	}
	if changes != 3 {
		t.Fatalf("%d window changes in %d frames, want 3", changes, len(frames))
	}
	t.Logf("warm-up cost per push (a frame costs %d): %v", frame, costs)
}

// TestLiveSerialBelowScaleFramesPlusOne: an overlap of the scale frames
// or fewer leaves no frame to spread the next window's phase 1 over, so live
// windows change serially (no warm-up) and say so in the log once; with
// fewer, the new window's phase 1 takes the frames after the change too.
// Every Push still returns its own frame's result.
func TestLiveSerialBelowScaleFramesPlusOne(t *testing.T) {
	for _, ov := range []int{3, 2} {
		cfg := liveConfig(t) // 3 scale frames, windows of 9
		cfg.OverlapSize = ov
		var log bytes.Buffer
		st, err := New(context.Background(), cfg, cpuBackend, slog.New(slog.NewTextHandler(&log, nil)))
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		s := st.(*stream)
		got, counts := pushCounts(t, st, liveFrames(t))
		for i, n := range counts {
			if want := btoi(i >= 2) + btoi(i == 2)*2; n != want {
				t.Fatalf("overlap %d: push %d returned %d results, want %d (%v)", ov, i, n, want, counts)
			}
		}
		if len(got) != 32 || got[31].Window != 4 {
			t.Fatalf("overlap %d: %d results, the last of window %d; want 32, window 4", ov, len(got), got[len(got)-1].Window)
		}
		for i, r := range got {
			if r.Seq != uint64(i) {
				t.Fatalf("overlap %d: result %d is frame %d", ov, i, r.Seq)
			}
		}
		if s.next != nil || s.spare != nil || s.Warmup() != (WarmupStats{}) {
			t.Fatalf("overlap %d: a warm-up with 3 scale frames: %+v", ov, s.Warmup())
		}
		if n := strings.Count(log.String(), "live windows change serially"); n != 1 {
			t.Fatalf("overlap %d: the serial change logged %d times:\n%s", ov, n, log.String())
		}
	}
}

// Idle between frames runs the next window's warm-up early: every result
// stays bit-identical to pushing without it, the idle work is reported, and
// what the frames themselves carry at the window changes shrinks by it.
func TestLiveIdleWarmsUpBetweenFrames(t *testing.T) {
	cfg := liveConfig(t)
	cfg.OverlapSize, cfg.WindowSize = 9, 21
	frames := liveFrames(t)
	for _, f := range goldenFrames(t, "stream_kf1") {
		f.Seq += uint64(len(frames))
		frames = append(frames, f)
	}
	// end on the third window change: a warm-up cut short by the end of
	// the input would count idle work the frames never had to carry
	// (window 0 is the gap, 9−3 frames, shorter than the 21 of the others)
	wf0, step := cfg.WindowSize-(cfg.OverlapSize-cfg.ScaleFrames), cfg.WindowSize-cfg.OverlapSize
	frames = frames[:wf0+2*step+1]
	run := func(idle bool) ([]Result, []WarmupStats) {
		st, err := New(context.Background(), cfg, cpuBackend, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		var out []Result
		var ws []WarmupStats
		for i, f := range frames {
			res, err := st.Push(context.Background(), f)
			if err != nil {
				t.Fatalf("push %d: %v", i, err)
			}
			out = append(out, res...)
			ws = append(ws, st.(WindowReporter).Warmup())
			if idle {
				st.(Idler).Idle(context.Background())
			}
		}
		res, err := st.Flush(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return append(out, res...), ws
	}
	plain, plainW := run(false)
	idled, idledW := run(true)
	if len(plain) != len(idled) || len(plain) != len(frames) {
		t.Fatalf("%d results with idle work, %d without, for %d frames", len(idled), len(plain), len(frames))
	}
	for i := range plain {
		a, b := plain[i], idled[i]
		if a.Seq != b.Seq || a.Kind != b.Kind || a.Window != b.Window || a.PoseEnc != b.PoseEnc || !equalF32(a.Depth, b.Depth) || !equalF32(a.Conf, b.Conf) {
			t.Fatalf("result %d (frame %d) differs with idle work", i, a.Seq)
		}
	}
	var idleCost, forcedPlain, forcedIdle, changes int
	for i := range idledW {
		idleCost += idledW[i].IdleCost
		forcedPlain += plainW[i].Cost + plainW[i].SwitchCost
		forcedIdle += idledW[i].Cost + idledW[i].SwitchCost
		if idledW[i].Switched {
			changes++
		}
	}
	if changes == 0 || idleCost == 0 {
		t.Fatalf("%d window changes, idle cost %d: the test must cross a window change with idle work", changes, idleCost)
	}
	if forcedIdle+idleCost != forcedPlain || forcedIdle >= forcedPlain {
		t.Fatalf("the frames carried %d of warm-up with idle work (%d idle) and %d without: idle work must replace carried work", forcedIdle, idleCost, forcedPlain)
	}
	if maxCost(idledW) > maxCost(plainW) {
		t.Fatalf("the largest share a frame carried grew with idle work: %d > %d", maxCost(idledW), maxCost(plainW))
	}
}
