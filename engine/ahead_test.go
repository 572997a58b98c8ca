package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/lingbotmap/lingbotmap/engine/backend"
	"github.com/lingbotmap/lingbotmap/engine/cpu"
	"github.com/lingbotmap/lingbotmap/engine/geom"
)

// asyncLog is the CPU backend with the AsyncDownloader capability: a batch
// is copied at Wait, and every start and wait is logged in order, so that
// a test sees whether the next frame's copies were queued before the last
// frame's were waited for.
type asyncLog struct {
	backend.Backend
	log     []string
	batches int
}

func (a *asyncLog) StartDownload(ts ...backend.Tensor) backend.Pending {
	a.batches++
	id := a.batches
	a.log = append(a.log, fmt.Sprintf("start %d", id))
	return asyncWait{a: a, id: id, ts: ts}
}

type asyncWait struct {
	a  *asyncLog
	id int
	ts []backend.Tensor
}

func (w asyncWait) Wait() [][]float32 {
	w.a.log = append(w.a.log, fmt.Sprintf("wait %d", w.id))
	return backend.Download(w.a.Backend, w.ts...)
}

// sameResult says where two results differ, bit for bit ("" if nowhere).
func sameResult(a, b Result) string {
	f32 := func(x, y []float32) bool {
		return slices.EqualFunc(x, y, func(p, q float32) bool { return math.Float32bits(p) == math.Float32bits(q) })
	}
	switch {
	case a.Seq != b.Seq || a.Stamp != b.Stamp || a.Kind != b.Kind || a.Window != b.Window:
		return "sequence, stamp, kind or window"
	case a.PoseEnc != b.PoseEnc || a.CamToWorld != b.CamToWorld || a.Intrinsics != b.Intrinsics:
		return "pose or intrinsics"
	case a.Width != b.Width || a.Height != b.Height || !f32(a.Depth, b.Depth) || !f32(a.Conf, b.Conf):
		return "depth"
	case !f32(a.Points, b.Points) || !f32(a.PointsConf, b.PointsConf):
		return "points"
	case !bytes.Equal(a.RGB, b.RGB):
		return "colours"
	case math.Float64bits(a.Flow) != math.Float64bits(b.Flow):
		return "flow"
	case (a.Kept == nil) != (b.Kept == nil):
		return "device points"
	case a.Kept != nil && (!f32(a.Kept.XYZ, b.Kept.XYZ) || !slices.Equal(a.Kept.Pixel, b.Kept.Pixel)):
		return "device points"
	}
	return ""
}

// traced runs frames through a stream of cfg (with the backend async
// wraps when async) and returns the results, the number each Push gave,
// the trace's events (Stats included) and the backend's log.
func traced(t *testing.T, cfg Config, frames []Frame, points bool) (res []Result, counts []int, events []string, log []string) {
	t.Helper()
	cfg.Trace = func(ev TraceEvent) { events = append(events, fmt.Sprintf("%+v", ev)) }
	var a *asyncLog
	st, err := New(context.Background(), cfg, func(c Config) (backend.Backend, error) {
		a = &asyncLog{Backend: cpu.New(cpu.Config{Threads: c.Threads})}
		if points {
			return &asyncPoints{hostUnprojector: &hostUnprojector{Backend: a, live: map[backend.Tensor]bool{}}, a: a}, nil
		}
		return a, nil
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if points {
		if on, err := st.(PointMaker).MakePoints(geom.PointFilter{ConfThreshold: 2.5, Stride: 2}, true); err != nil || !on {
			t.Fatalf("MakePoints: %v, %v", on, err)
		}
	}
	for _, f := range frames {
		out, err := st.Push(context.Background(), f)
		if err != nil {
			t.Fatalf("push %d: %v", f.Seq, err)
		}
		res = append(res, out...)
		counts = append(counts, len(out))
	}
	out, err := st.Flush(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	res = append(res, out...)
	counts = append(counts, len(out))
	return res, counts, events, a.log
}

// asyncPoints makes device points (on the host) on an asyncLog backend.
type asyncPoints struct {
	*hostUnprojector
	a *asyncLog
}

func (p *asyncPoints) StartDownload(ts ...backend.Tensor) backend.Pending {
	return p.a.StartDownload(ts...)
}

// TestOverlapFramesEqualsSerial: with overlap_frames a stream gives the
// same results bit for bit, in the same order, with the same trace (cache
// statistics included) as without, in every schedule; in the streaming
// schedule with interval keyframes each streaming frame's results come
// with the next Push (or the Flush), and its copies are waited for only
// after the next frame's copies were queued, that is after the next
// frame's whole call was; frames with device points, flow frames and
// windowed schedules run as before.
func TestOverlapFramesEqualsSerial(t *testing.T) {
	frames := goldenFrames(t, "stream_kf1")
	cases := []struct {
		name    string
		cfg     func(*Config)
		points  bool
		overlap bool // streaming frames are held ahead
	}{
		{name: "streaming, every frame a keyframe", cfg: func(*Config) {}, overlap: true},
		{name: "streaming, interval 2", cfg: func(c *Config) { c.KeyframeInterval = 2 }, overlap: true},
		{name: "streaming, fp8 cache", cfg: func(c *Config) { c.Precision = "fp8" }, overlap: true},
		{name: "flow keyframes", cfg: func(c *Config) { c.FlowThreshold = 0.5 }},
		{name: "reference windows", cfg: func(c *Config) { c.Windowed = true }},
		{name: "live windows", cfg: func(c *Config) { c.Windowed, c.WindowMode = true, WindowLive }},
		{name: "device points for keyframes, interval 3", cfg: func(c *Config) { c.KeyframeInterval = 3 }, points: true, overlap: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := goldenConfig(t)
			tc.cfg(&cfg)
			want, wantCounts, wantEvents, _ := traced(t, cfg, frames, tc.points)
			cfg.OverlapFrames = true
			got, counts, events, log := traced(t, cfg, frames, tc.points)
			if len(got) != len(frames) || len(want) != len(frames) {
				t.Fatalf("%d results with overlap, %d without, for %d frames", len(got), len(want), len(frames))
			}
			for i := range want {
				if d := sameResult(got[i], want[i]); d != "" {
					t.Fatalf("result %d (frame %d): %s differs with overlap_frames", i, want[i].Seq, d)
				}
			}
			if !slices.Equal(events, wantEvents) {
				t.Fatalf("trace with overlap_frames:\n%s\nwithout:\n%s", strings.Join(events, "\n"), strings.Join(wantEvents, "\n"))
			}
			held := 0
			for i := range counts {
				if counts[i] != wantCounts[i] {
					held++
				}
			}
			if !tc.overlap {
				if held > 0 || slices.ContainsFunc(log, func(s string) bool { return strings.HasPrefix(s, "start") }) {
					t.Fatalf("results per Push %v, want %v as without overlap; copies queued ahead: %v", counts, wantCounts, log)
				}
				return
			}
			if held == 0 {
				t.Fatalf("results per Push %v, the same as without overlap: no frame was held", counts)
			}
			// a held frame's results come with the next Push: every
			// Push's results end with frames before its own
			pos := 0
			for i, n := range counts[:len(frames)] {
				for _, r := range got[pos : pos+n] {
					if r.Seq > frames[i].Seq {
						t.Fatalf("push of frame %d returned frame %d", frames[i].Seq, r.Seq)
					}
				}
				pos += n
			}
			// frame k's wait follows frame k+1's start wherever both
			// were held ahead
			at := map[string]int{}
			for i, s := range log {
				at[s] = i
			}
			ahead := 0
			for k := 1; ; k++ {
				w, ok := at[fmt.Sprintf("wait %d", k)]
				if !ok {
					break
				}
				if next, ok := at[fmt.Sprintf("start %d", k+1)]; ok && next < w {
					ahead++
				}
			}
			if ahead == 0 {
				t.Fatalf("no frame's copies were waited for after the next frame's were queued: %v", log)
			}
		})
	}
}

// TestOverlapFramesDrainResetSave: Drain hands out the frame held ahead and
// nothing more; SaveState refuses while a frame is held and works after a
// Drain; a Reset drops the held frame, and the stream then goes on as a
// stream without overlap does after the same Reset.
func TestOverlapFramesDrainResetSave(t *testing.T) {
	frames := goldenFrames(t, "stream_kf1")
	run := func(overlap bool) []Result {
		cfg := goldenConfig(t)
		cfg.OverlapFrames = overlap
		st, err := New(context.Background(), cfg, cpuBackend, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		ctx := context.Background()
		var res []Result
		push := func(f Frame) {
			out, err := st.Push(ctx, f)
			if err != nil {
				t.Fatal(err)
			}
			res = append(res, out...)
		}
		for _, f := range frames[:5] {
			push(f)
		}
		var buf bytes.Buffer
		err = st.(Snapshotter).SaveState(&buf)
		if overlap {
			if err == nil || !strings.Contains(err.Error(), "held ahead") {
				t.Fatalf("SaveState with frame 4 held: %v", err)
			}
			out, err := st.(Drainer).Drain(ctx)
			if err != nil || len(out) != 1 || out[0].Seq != frames[4].Seq {
				t.Fatalf("Drain: %v results (%v), want frame %d", seqs(out), err, frames[4].Seq)
			}
			res = append(res, out...)
			if out, err := st.(Drainer).Drain(ctx); err != nil || len(out) != 0 {
				t.Fatalf("second Drain: %v, %v; want nothing", seqs(out), err)
			}
			if err := st.(Snapshotter).SaveState(&buf); err != nil {
				t.Fatalf("SaveState after Drain: %v", err)
			}
		} else if err != nil {
			t.Fatal(err)
		}
		push(frames[5])
		if err := st.Reset(); err != nil {
			t.Fatal(err)
		}
		for _, f := range frames[6:] {
			push(f)
		}
		out, err := st.Flush(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return append(res, out...)
	}
	want, got := run(false), run(true)
	// without overlap frame 5 came out at its Push; with it, the Reset
	// dropped it
	if i := slices.IndexFunc(want, func(r Result) bool { return r.Seq == frames[5].Seq }); i >= 0 {
		want = slices.Delete(want, i, i+1)
	}
	if !slices.Equal(seqs(got), seqs(want)) {
		t.Fatalf("frames %v with overlap, want %v", seqs(got), seqs(want))
	}
	for i := range want {
		if d := sameResult(got[i], want[i]); d != "" {
			t.Fatalf("result %d (frame %d): %s differs", i, want[i].Seq, d)
		}
	}
}

// TestOverlapFramesCacheFull: when the cache is full the frame held ahead
// still comes out, with the Push that fails, and the results up to it are
// those without overlap.
func TestOverlapFramesCacheFull(t *testing.T) {
	frames := goldenFrames(t, "stream_kf1")
	run := func(overlap bool) ([]Result, int) {
		cfg := goldenConfig(t)
		cfg.MaxFrames, cfg.OverlapFrames = 6, overlap
		st, err := New(context.Background(), cfg, cpuBackend, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		var res []Result
		for i, f := range frames {
			out, err := st.Push(context.Background(), f)
			res = append(res, out...)
			if err != nil {
				if !errors.Is(err, ErrCacheFull) {
					t.Fatalf("frame %d: %v, want ErrCacheFull", i, err)
				}
				return res, i
			}
		}
		t.Fatalf("overlap_frames %v: no ErrCacheFull in %d frames", overlap, len(frames))
		return nil, 0
	}
	want, wantAt := run(false)
	got, at := run(true)
	if at != wantAt || !slices.Equal(seqs(got), seqs(want)) {
		t.Fatalf("with overlap: frames %v, then the error at frame %d; without: %v, error at %d", seqs(got), at, seqs(want), wantAt)
	}
	for i := range want {
		if d := sameResult(got[i], want[i]); d != "" {
			t.Fatalf("result %d: %s differs", i, d)
		}
	}
}
