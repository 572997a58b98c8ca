package engine

import (
	"bytes"
	"context"
	"errors"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	goldencase "github.com/lingbotmap/lingbotmap/engine/golden"
	"github.com/lingbotmap/lingbotmap/engine/golden/goldentest"
	"github.com/lingbotmap/lingbotmap/engine/weights"
	"github.com/lingbotmap/lingbotmap/internal/shared/sharedtest"
)

// goldenFrames are the 16 input frames of a golden case (42×70, already at
// the model resolution).
func goldenFrames(t *testing.T, name string) []Frame {
	t.Helper()
	in := goldentest.Open(t, name, goldencase.InputsFile)
	imgs, shape, err := goldencase.Tensor(in, "images")
	if err != nil {
		t.Fatal(err)
	}
	per := shape[1] * shape[2] * shape[3]
	var out []Frame
	for i := 0; i < shape[0]; i++ {
		out = append(out, Frame{Seq: uint64(i), Pixels: imgs[i*per : (i+1)*per], Width: shape[3], Height: shape[2]})
	}
	return out
}

// goldenConfig is the golden cases' model and cache settings on the golden
// tiny checkpoint.
func goldenConfig(t *testing.T) Config {
	cfg := DefaultConfig()
	cfg.Weights = sharedtest.Path(t, "golden", "weights.safetensors")
	cfg.ImageWidth = 70
	cfg.ScaleFrames = 3
	cfg.SlidingWindow = 4
	cfg.MaxFrames = 256
	cfg.SelectedLayers = []int{0, 2, 3, 4}
	cfg.WindowSize = 9
	cfg.OverlapSize = 3
	cfg.Threads = 2
	return cfg
}

// runFrames pushes frames into st and, when flush, flushes it.
func runFrames(t *testing.T, st Stream, frames []Frame, flush bool) []Result {
	t.Helper()
	var out []Result
	for _, f := range frames {
		res, err := st.Push(context.Background(), f)
		if err != nil {
			t.Fatalf("push %d: %v", f.Seq, err)
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

// closeRel says whether every value of got is within tol of want, relative
// to max(|want|, 1e-3·scale) so that values near zero do not dominate.
func closeRel(got, want []float32, tol float64) (int, bool) {
	if len(got) != len(want) {
		return -1, false
	}
	var scale float64
	for _, v := range want {
		scale = math.Max(scale, math.Abs(float64(v)))
	}
	for i := range want {
		d := math.Abs(float64(got[i]) - float64(want[i]))
		if d > tol*math.Max(math.Abs(float64(want[i])), 1e-3*scale) {
			return i, false
		}
	}
	return 0, true
}

// TestResumeEqualsUninterrupted saves each mode's stream after k frames,
// restores it into a new stream (a new backend and model) and continues:
// every later result equals the uninterrupted run's, pose and depth to
// 1e-6 relative, frame kinds and sequence numbers exactly.
func TestResumeEqualsUninterrupted(t *testing.T) {
	cases := []struct {
		name   string
		golden string
		set    func(*Config)
		cuts   []int
	}{
		// 2: inside phase 1 (frames buffered); 9: streaming with a full window
		{"streaming", "stream_kf1", func(c *Config) {}, []int{2, 9}},
		{"keyframe interval", "stream_kf2", func(c *Config) { c.KeyframeInterval = 2 }, []int{6}},
		{"flow keyframes", "stream_flow", func(c *Config) { c.FlowThreshold = 14 }, []int{7}},
		// windows of 15 frames stepping by 12 over the frames played twice:
		// 13 inside window 0 (results held) with the overlap inputs to
		// keep; 16 and 20 in window 1 (unaligned, then aligned with results
		// held); 27 in window 2
		{"windowed", "windowed_kf2", func(c *Config) { c.Windowed = true; c.KeyframeInterval = 2 }, []int{13, 16, 20, 27}},
		// live windows of 9 frames stepping by 6: 7 in window 0, 10 in
		// window 1's re-runs, 13 and 20 after alignments
		{"windowed live", "stream_kf1", func(c *Config) { c.Windowed = true; c.WindowMode = WindowLive }, []int{7, 10, 13, 20}},
		// live windows of 15 frames stepping by 9, the next window warming
		// up over frames 9–14 (its scale frames 9–11, then the rest of its
		// phase 1): 10 with one scale frame encoded, 13 with the phase 1
		// half way (the state leaves the warm-up out; the resumed stream
		// redoes it), 16 in window 1 (which streams from 15: frames 12–14
		// were window 0's alone), 22 with window 2's phase 1 under way
		{"windowed live early", "stream_kf1", func(c *Config) {
			c.Windowed, c.WindowMode, c.OverlapSize, c.WindowSize = true, WindowLive, 6, 15
		}, []int{10, 13, 16, 22}},
		// flow windows close after 6 keyframes: cuts across two windows
		{"windowed flow", "stream_flow", func(c *Config) { c.Windowed = true; c.FlowThreshold = 14 }, []int{8, 14, 21}},
		// live flow windows change serially, re-running the scale frames
		{"windowed live flow", "stream_flow", func(c *Config) {
			c.Windowed, c.WindowMode, c.FlowThreshold = true, WindowLive, 14
		}, []int{8, 14, 21}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := goldenConfig(t)
			tc.set(&cfg)
			frames := goldenFrames(t, tc.golden)
			if cfg.Windowed {
				for _, f := range goldenFrames(t, tc.golden) {
					f.Seq += uint64(len(frames))
					frames = append(frames, f)
				}
			}
			// The uninterrupted stream saves its state at every cut as it
			// goes (which must not disturb it); each saved state is then
			// resumed in a new stream and fed the rest.
			ref, err := New(context.Background(), cfg, cpuBackend, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer ref.Close()
			states := map[int][]byte{}
			before := map[int]int{} // results out before the cut
			stats := map[int]CacheStats{}
			var want []Result
			for i, f := range frames {
				if slices.Contains(tc.cuts, i) {
					var buf bytes.Buffer
					if err := ref.(Snapshotter).SaveState(&buf); err != nil {
						t.Fatal(err)
					}
					states[i], before[i], stats[i] = buf.Bytes(), len(want), ref.Stats()
				}
				want = append(want, runFrames(t, ref, []Frame{f}, false)...)
			}
			want = append(want, runFrames(t, ref, nil, true)...)
			if len(want) != len(frames) {
				t.Fatalf("uninterrupted run: %d results for %d frames", len(want), len(frames))
			}
			if w := want[len(want)-1].Window; cfg.Windowed && w < 2 {
				t.Fatalf("windowed run ended in window %d: the cuts do not span windows", w)
			}
			for _, k := range tc.cuts {
				resumed, err := Resume(context.Background(), cfg, cpuBackend, bytes.NewReader(states[k]), nil)
				if err != nil {
					t.Fatalf("resume after %d frames: %v", k, err)
				}
				if st := resumed.Stats(); st != stats[k] {
					t.Errorf("cut %d: cache after resume %+v, before saving %+v", k, st, stats[k])
				}
				got := runFrames(t, resumed, frames[k:], true)
				resumed.Close()
				rest := want[before[k]:]
				if len(got) != len(rest) {
					t.Fatalf("cut %d: %d results after resume, uninterrupted %d", k, len(got), len(rest))
				}
				for i := range rest {
					g, w := got[i], rest[i]
					if g.Seq != w.Seq || g.Kind != w.Kind || g.Window != w.Window {
						t.Fatalf("cut %d, result %d: seq %d kind %v window %d, uninterrupted seq %d kind %v window %d", k, i, g.Seq, g.Kind, g.Window, w.Seq, w.Kind, w.Window)
					}
					if j, ok := closeRel(g.PoseEnc[:], w.PoseEnc[:], 1e-6); !ok {
						t.Fatalf("cut %d, frame %d: pose %v, uninterrupted %v (element %d)", k, g.Seq, g.PoseEnc, w.PoseEnc, j)
					}
					if j, ok := closeRel(g.Depth, w.Depth, 1e-6); !ok || len(w.Depth) == 0 {
						t.Fatalf("cut %d, frame %d: depth differs at %d (%d values)", k, g.Seq, j, len(w.Depth))
					}
					if _, ok := closeRel(g.Points, w.Points, 1e-6); !ok {
						t.Fatalf("cut %d, frame %d: points differ", k, g.Seq)
					}
				}
			}
		})
	}
}

// savedState is a state file of the golden tiny model after 5 frames.
func savedState(t *testing.T, cfg Config) []byte {
	t.Helper()
	st, err := New(context.Background(), cfg, cpuBackend, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	runFrames(t, st, goldenFrames(t, "stream_kf1")[:5], false)
	var buf bytes.Buffer
	if err := st.(Snapshotter).SaveState(&buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestResumeRefusesOtherStates: a state from other weights, another model
// size, other settings, another format version, a truncated or damaged file
// is refused with the reason, before anything runs.
func TestResumeRefusesOtherStates(t *testing.T) {
	cfg := goldenConfig(t)
	state := savedState(t, cfg)

	// the golden checkpoint with other values: same keys and shapes
	other := filepath.Join(t.TempDir(), "other.safetensors")
	src, err := weights.OpenSafeTensors(cfg.Weights)
	if err != nil {
		t.Fatal(err)
	}
	mem := weights.NewMemStore()
	for _, k := range src.Keys() {
		v, err := src.Float32(k)
		if err != nil {
			t.Fatal(err)
		}
		for i := range v {
			v[i] *= 1.5
		}
		inf, _ := src.Info(k)
		if err := mem.Put(k, inf.Shape, v); err != nil {
			t.Fatal(err)
		}
	}
	src.Close()
	if err := weights.WriteSafeTensorsFile(other, mem); err != nil {
		t.Fatal(err)
	}

	version := bytes.Clone(state)
	version[8] = 9
	flipped := bytes.Clone(state)
	flipped[len(flipped)/2] ^= 0x40

	cases := []struct {
		name  string
		state []byte
		set   func(*Config)
		want  string
	}{
		{"other weights", state, func(c *Config) { c.Weights = other }, "other weights"},
		{"random model of the same sizes", state, func(c *Config) { c.Weights = ""; c.ModelSize = "tiny" }, "other weights"},
		{"other input size", state, func(c *Config) { c.ImageWidth = 84 }, "image_width"},
		{"other window", state, func(c *Config) { c.SlidingWindow = 5 }, "sliding_window"},
		{"other mode", state, func(c *Config) { c.FlowThreshold = 3 }, "flow_threshold"},
		{"other version", version, nil, "version 9"},
		{"not a state", []byte("PLY\nformat binary"), nil, "not a session state file"},
		{"truncated", state[:len(state)-1000], nil, "ends early"},
		{"no checksum", state[:len(state)-2], nil, "checksum missing"},
		{"damaged", flipped, nil, "restoring state"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := cfg
			if tc.set != nil {
				tc.set(&c)
			}
			st, err := Resume(context.Background(), c, cpuBackend, bytes.NewReader(tc.state), nil)
			if err == nil {
				st.Close()
				t.Fatal("resumed from a state that does not fit")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not say %q", err, tc.want)
			}
		})
	}
	// and the file itself resumes
	st, err := Resume(context.Background(), cfg, cpuBackend, bytes.NewReader(state), nil)
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	if _, err := ReadStateHeader(bytes.NewReader(version)); !errors.Is(err, ErrStateMismatch) {
		t.Fatalf("version mismatch gives %v, want ErrStateMismatch", err)
	}
}

// FuzzReadStateHeader: any bytes give a fingerprint or an error, never a
// panic or a large allocation.
func FuzzReadStateHeader(f *testing.F) {
	f.Add([]byte("LBMSTATE\x01\x00\x00\x00\x02\x00\x00\x00{}"))
	f.Add([]byte("LBMSTATE\x01\x00\x00\x00\xff\xff\xff\xff"))
	f.Add([]byte("LBMSTATE\x01\x00\x00\x00\x10\x00\x00\x00{\"sizes\":{}}"))
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = ReadStateHeader(bytes.NewReader(b))
	})
}

// FuzzStateBody: any body after a valid header restores or fails with an
// error, never a panic, and a failed restore leaves no half state behind.
func FuzzStateBody(f *testing.F) {
	cfg := DefaultConfig()
	cfg.ImageWidth, cfg.ScaleFrames, cfg.SlidingWindow, cfg.MaxFrames, cfg.Threads = 70, 3, 4, 64, 1
	st, err := New(context.Background(), cfg, cpuBackend, nil)
	if err != nil {
		f.Fatal(err)
	}
	defer st.Close()
	s := st.(*stream)
	for i := 0; i < 5; i++ {
		if _, err := s.Push(context.Background(), Frame{Seq: uint64(i), Image: testImage(70, 42, uint8(i))}); err != nil {
			f.Fatal(err)
		}
	}
	var buf bytes.Buffer
	if err := s.SaveState(&buf); err != nil {
		f.Fatal(err)
	}
	full := buf.Bytes()
	r := bytes.NewReader(full)
	saved, err := ReadStateHeader(r)
	if err != nil {
		f.Fatal(err)
	}
	body := full[len(full)-r.Len():]
	f.Add(body)
	f.Add(body[:len(body)/3])
	// a stream before its first frame: a small body for the mutator
	fresh, err := New(context.Background(), cfg, cpuBackend, nil)
	if err != nil {
		f.Fatal(err)
	}
	var small bytes.Buffer
	if err := fresh.(Snapshotter).SaveState(&small); err != nil {
		f.Fatal(err)
	}
	fresh.Close()
	r = bytes.NewReader(small.Bytes())
	if _, err := ReadStateHeader(r); err != nil {
		f.Fatal(err)
	}
	f.Add(small.Bytes()[small.Len()-r.Len():])
	f.Fuzz(func(t *testing.T, b []byte) {
		if err := s.loadBody(bytes.NewReader(b), saved); err != nil {
			return
		}
		// a body that restores is a usable stream
		if _, err := s.Push(context.Background(), Frame{Seq: 99, Image: testImage(70, 42, 9)}); err != nil && !strings.Contains(err.Error(), "engine") {
			t.Fatalf("push after a restore: %v", err)
		}
	})
}

// TestWeightsFingerprintOnDemand: starting a stream does not hash its
// weights (every start would pay a pass over every byte); the first saved
// state does, from the store kept open, and gets the fingerprint a fresh
// pass over the file gives; the store is let go after it.
func TestWeightsFingerprintOnDemand(t *testing.T) {
	cfg := goldenConfig(t)
	st, err := New(context.Background(), cfg, cpuBackend, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	s := st.(*stream)
	if s.weightsID != "" || s.weights == nil {
		t.Fatalf("New fingerprinted the weights (%q) or let the store go (%v)", s.weightsID, s.weights == nil)
	}
	runFrames(t, st, goldenFrames(t, "stream_kf1")[:4], false)
	var buf bytes.Buffer
	if err := s.SaveState(&buf); err != nil {
		t.Fatal(err)
	}
	store, err := weights.Open(cfg.Weights)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	want, err := weightsFingerprint(cfg, store)
	if err != nil {
		t.Fatal(err)
	}
	saved, err := ReadStateHeader(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if saved.Weights != want || s.weightsID != want || s.weights != nil {
		t.Fatalf("saved fingerprint %.12s, stream's %.12s, want %.12s; store still open: %v", saved.Weights, s.weightsID, want, s.weights != nil)
	}
}
