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

// Branch and Merge make asyncLog a backend.Brancher that runs the branch
// in line and logs where it began and ended.
func (a *asyncLog) Branch(fn func()) {
	a.log = append(a.log, "branch")
	fn()
	a.log = append(a.log, "end")
}

func (a *asyncLog) Merge() { a.log = append(a.log, "merge") }

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

// pointsMode is what traced asks device points for.
type pointsMode int

const (
	noPoints       pointsMode = iota
	keyframePoints            // keyframes only, by Unproject (no StartUnproject)
	asyncKeyframes            // keyframes only, StartUnproject too
	asyncAll                  // every frame, StartUnproject too (run's request)
)

// traced runs frames through a stream of cfg (with the backend async
// wraps when async) and returns the results, the number each Push gave,
// the trace's events (Stats included), the backend's log (with "call" where
// the trace saw a call queued) and how many frames were encoded beside the
// heads of the frame before. With device points it checks that every map
// kept for them was freed by the end.
func traced(t *testing.T, cfg Config, frames []Frame, points pointsMode) (res []Result, counts []int, events []string, log []string, beside int) {
	t.Helper()
	var a *asyncLog
	// a frame held ahead gets its device points (and is counted in
	// PointsOnDevice) when it comes out, later than without overlap: the
	// count is compared once all came out, at the end
	cfg.Trace = func(ev TraceEvent) {
		ev.Stats.PointsOnDevice = 0
		events = append(events, fmt.Sprintf("%+v", ev))
		if ev.Event == "call" {
			a.log = append(a.log, "call")
		}
	}
	var hu *hostUnprojector
	st, err := New(context.Background(), cfg, func(c Config) (backend.Backend, error) {
		a = &asyncLog{Backend: cpu.New(cpu.Config{Threads: c.Threads})}
		hu = &hostUnprojector{Backend: a, live: map[backend.Tensor]bool{}}
		switch points {
		case keyframePoints:
			return &asyncPoints{hostUnprojector: hu, a: a}, nil
		case asyncKeyframes, asyncAll:
			return &lateUnprojector{asyncPoints{hostUnprojector: hu, a: a}}, nil
		}
		return a, nil
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if points != noPoints {
		if on, err := st.(PointMaker).MakePoints(geom.PointFilter{ConfThreshold: 2.5, Stride: 2}, points != asyncAll); err != nil || !on {
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
	events = append(events, fmt.Sprintf("after the Flush: %+v", st.Stats()))
	if len(hu.live) != 0 {
		t.Fatalf("%d maps handed out for points are still held after the Flush", len(hu.live))
	}
	return res, counts, events, a.log, st.(*stream).beside
}

// asyncPoints makes device points (on the host) on an asyncLog backend.
type asyncPoints struct {
	*hostUnprojector
	a *asyncLog
}

func (p *asyncPoints) StartDownload(ts ...backend.Tensor) backend.Pending {
	return p.a.StartDownload(ts...)
}

// lateUnprojector is asyncPoints with StartUnproject: the points are made
// at Wait, from the maps as they are then (a map freed before would fail
// the test), and every start and wait is logged in the backend's log.
type lateUnprojector struct{ asyncPoints }

func (p *lateUnprojector) StartUnproject(depth, conf backend.Tensor, u backend.Unprojection) backend.PendingPoints {
	p.a.log = append(p.a.log, "points start")
	p.live[depth], p.live[conf] = true, true
	return latePoints{p: p, depth: depth, conf: conf, u: u}
}

type latePoints struct {
	p           *lateUnprojector
	depth, conf backend.Tensor
	u           backend.Unprojection
}

func (l latePoints) Wait() ([]float32, []int32, error) {
	l.p.a.log = append(l.p.a.log, "points wait")
	if !l.p.live[l.depth] || !l.p.live[l.conf] {
		return nil, nil, errors.New("a map was freed before its points were waited for")
	}
	calls := l.p.calls
	xyz, pix, err := l.p.Unproject(l.depth, l.conf, l.u)
	l.p.calls = calls
	return xyz, pix, err
}

// TestOverlapFramesEqualsSerial: with overlap_frames a stream gives the
// same results bit for bit, in the same order, with the same trace (cache
// statistics included; the count of device points once all came out) as
// without, in every schedule; in the streaming
// schedule with interval keyframes each streaming frame's results come
// with the next Push (or the Flush), and its copies are waited for only
// after the next frame's copies were queued, that is after the next
// frame's whole call was; frames with device points are held ahead too
// where the backend queues points (StartUnproject), their points queued
// after the next frame's call and waited for after the one after that was
// queued; flow frames, windowed schedules and frames whose points the
// backend makes only by Unproject run as before.
func TestOverlapFramesEqualsSerial(t *testing.T) {
	frames := goldenFrames(t, "stream_kf1")
	cases := []struct {
		name    string
		cfg     func(*Config)
		points  pointsMode
		overlap bool // streaming frames are held ahead
		beside  bool // encode_beside_heads too
	}{
		{name: "streaming, every frame a keyframe", cfg: func(*Config) {}, overlap: true},
		{name: "streaming, interval 2", cfg: func(c *Config) { c.KeyframeInterval = 2 }, overlap: true},
		{name: "streaming, fp8 cache", cfg: func(c *Config) { c.Precision = "fp8" }, overlap: true},
		{name: "flow keyframes", cfg: func(c *Config) { c.FlowThreshold = 0.5 }},
		{name: "reference windows", cfg: func(c *Config) { c.Windowed = true }},
		{name: "live windows", cfg: func(c *Config) { c.Windowed, c.WindowMode = true, WindowLive }},
		{name: "device points for keyframes, interval 3", cfg: func(c *Config) { c.KeyframeInterval = 3 }, points: keyframePoints, overlap: true},
		{name: "queued device points for keyframes, interval 3", cfg: func(c *Config) { c.KeyframeInterval = 3 }, points: asyncKeyframes, overlap: true},
		{name: "queued device points for every frame", cfg: func(*Config) {}, points: asyncAll, overlap: true},
		{name: "queued device points, flow keyframes", cfg: func(c *Config) { c.FlowThreshold = 0.5 }, points: asyncAll},
		{name: "queued device points, live windows", cfg: func(c *Config) { c.Windowed, c.WindowMode = true, WindowLive }, points: asyncAll},
		{name: "encoder beside the heads", cfg: func(*Config) {}, overlap: true, beside: true},
		{name: "encoder beside the heads, interval 2, fp8 cache", cfg: func(c *Config) { c.KeyframeInterval, c.Precision = 2, "fp8" }, overlap: true, beside: true},
		{name: "encoder beside the heads, queued device points", cfg: func(*Config) {}, points: asyncAll, overlap: true, beside: true},
		{name: "encoder beside the heads, flow keyframes", cfg: func(c *Config) { c.FlowThreshold = 0.5 }, beside: true},
		{name: "encoder beside the heads, live windows", cfg: func(c *Config) { c.Windowed, c.WindowMode = true, WindowLive }, beside: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := goldenConfig(t)
			tc.cfg(&cfg)
			want, wantCounts, wantEvents, _, _ := traced(t, cfg, frames, tc.points)
			cfg.OverlapFrames, cfg.EncodeBesideHeads = true, tc.beside
			got, counts, events, log, beside := traced(t, cfg, frames, tc.points)
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
				if held > 0 || beside > 0 || slices.ContainsFunc(log, func(s string) bool { return strings.HasPrefix(s, "start") }) {
					t.Fatalf("results per Push %v, want %v as without overlap; %d frames encoded beside heads; copies queued ahead: %v", counts, wantCounts, beside, log)
				}
				return
			}
			if tc.beside != (beside > 0) {
				t.Fatalf("%d frames encoded beside the heads of the frame before", beside)
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
			// were held ahead; with the encoder beside the heads, frame
			// k+1's call is queued before its heads, that is after frame
			// k's start and before its wait
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
				next, ok := at[fmt.Sprintf("start %d", k+1)]
				if tc.beside {
					next, ok = at[fmt.Sprintf("start %d", k)], slices.Contains(log[at[fmt.Sprintf("start %d", k)]:w], "call")
				}
				if ok && next < w {
					ahead++
				}
			}
			if ahead == 0 || (tc.beside && ahead < beside) {
				t.Fatalf("%d frames' copies were waited for after the next frame's call was queued (%d frames encoded beside heads): %v", ahead, beside, log)
			}
			// queued points: each is waited for after another frame's
			// copies were queued behind them (but at the Flush), the
			// frame's results made from the maps it kept until then
			starts, waits := 0, 0
			copies, allCopies := 0, 0
			for _, s := range log {
				if strings.HasPrefix(s, "start") {
					allCopies++
				}
			}
			var queued []int
			for _, s := range log {
				switch {
				case strings.HasPrefix(s, "start"):
					copies++
				case s == "points start":
					starts++
					queued = append(queued, copies)
				case s == "points wait":
					if copies <= queued[waits] && copies < allCopies {
						t.Fatalf("points %d waited for with no frame's call queued after them: %v", waits, log)
					}
					waits++
				}
			}
			withPoints := 0
			for _, r := range got {
				if r.Kept != nil {
					withPoints++
				}
			}
			switch {
			case tc.points == asyncKeyframes || tc.points == asyncAll:
				// phase 1's and the last frame's points are made by
				// Unproject
				if starts == 0 || starts != waits || starts >= withPoints {
					t.Fatalf("%d points queued, %d waited for, %d results with points: %v", starts, waits, withPoints, log)
				}
			case starts > 0:
				t.Fatalf("points queued by a backend without StartUnproject: %v", log)
			}
		})
	}
}

// TestOverlapFramesDrainResetSave: Drain hands out the frames held ahead
// and nothing more (with queued device points, the frame whose points are
// in flight and the one whose copies are, both with their points);
// SaveState refuses while a frame is held and works after a Drain; a
// Reset drops the held frame, and the stream then goes on as a stream
// without overlap does after the same Reset; no map kept for points
// outlives the stream's work.
func TestOverlapFramesDrainResetSave(t *testing.T) {
	frames := goldenFrames(t, "stream_kf1")
	for _, points := range []bool{false, true} {
		t.Run(fmt.Sprintf("points %v", points), func(t *testing.T) { drainResetSave(t, frames, points) })
	}
}

func drainResetSave(t *testing.T, frames []Frame, points bool) {
	run := func(overlap bool) []Result {
		cfg := goldenConfig(t)
		cfg.OverlapFrames = overlap
		var hu *hostUnprojector
		st, err := New(context.Background(), cfg, func(c Config) (backend.Backend, error) {
			cb := cpu.New(cpu.Config{Threads: c.Threads})
			if !points {
				return cb, nil
			}
			a := &asyncLog{Backend: cb}
			hu = &hostUnprojector{Backend: a, live: map[backend.Tensor]bool{}}
			return &lateUnprojector{asyncPoints{hostUnprojector: hu, a: a}}, nil
		}, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		if points {
			if on, err := st.(PointMaker).MakePoints(geom.PointFilter{ConfThreshold: 2.5, Stride: 2}, false); err != nil || !on {
				t.Fatalf("MakePoints: %v, %v", on, err)
			}
		}
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
			held := []uint64{frames[4].Seq}
			if points {
				held = []uint64{frames[3].Seq, frames[4].Seq}
			}
			out, err := st.(Drainer).Drain(ctx)
			if err != nil || !slices.Equal(seqs(out), held) {
				t.Fatalf("Drain: %v results (%v), want frames %v", seqs(out), err, held)
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
		push(frames[6])
		if err := st.Reset(); err != nil {
			t.Fatal(err)
		}
		for _, f := range frames[7:] {
			push(f)
		}
		out, err := st.Flush(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if hu != nil && len(hu.live) != 0 {
			t.Fatalf("overlap %v: %d maps kept for points are still held after the Flush", overlap, len(hu.live))
		}
		return append(res, out...)
	}
	want, got := run(false), run(true)
	// without overlap frames 5 and 6 came out at their Push; with it, the
	// Reset dropped frame 6, held ahead, and with queued points frame 5
	// too, whose points were in flight
	dropped := []uint64{frames[6].Seq}
	if points {
		dropped = append(dropped, frames[5].Seq)
	}
	want = slices.DeleteFunc(want, func(r Result) bool { return slices.Contains(dropped, r.Seq) })
	if !slices.Equal(seqs(got), seqs(want)) {
		t.Fatalf("frames %v with overlap, want %v", seqs(got), seqs(want))
	}
	kept := 0
	for i := range want {
		if d := sameResult(got[i], want[i]); d != "" {
			t.Fatalf("result %d (frame %d): %s differs", i, want[i].Seq, d)
		}
		if got[i].Kept != nil {
			kept++
		}
	}
	if points != (kept == len(want)) {
		t.Fatalf("%d of %d results with device points (points %v)", kept, len(want), points)
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
