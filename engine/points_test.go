package engine

import (
	"context"
	"slices"
	"testing"

	"github.com/lingbotmap/lingbotmap/engine/backend"
	"github.com/lingbotmap/lingbotmap/engine/backend/hostpoints"
	"github.com/lingbotmap/lingbotmap/engine/cpu"
	"github.com/lingbotmap/lingbotmap/engine/geom"
)

// hostUnprojector is the CPU backend with the Unprojector capability done
// on the host (geom.Keep on the maps it is handed), so that the stream's
// side of device points (which maps are kept, with which final pose and
// depth scale, and when they are freed) runs without a GPU. It records the
// maps it was handed that were not freed yet.
type hostUnprojector struct {
	backend.Backend
	live  map[backend.Tensor]bool
	calls int
}

func (h *hostUnprojector) Unproject(depth, conf backend.Tensor, u backend.Unprojection) ([]float32, []int32, error) {
	h.calls++
	h.live[depth], h.live[conf] = true, true
	return hostpoints.Unproject(h, depth, conf, u)
}

func (h *hostUnprojector) Free(t backend.Tensor) {
	delete(h.live, t)
	h.Backend.Free(t)
}

// TestDevicePointsEqualHostPoints: a stream told the filter once gives
// every result it can serve its points (Result.Kept) made from the maps it
// kept on the backend, with the final pose and depth scale, and those are
// exactly the points the host makes from the result (geom.ConfidentPoints,
// colours included), in streaming, flow, and live windows changed serially
// or warmed up early; keyframesOnly leaves non-keyframes without; reference
// windows, which hold results across calls, get none; every kept map is
// freed by the end of its Push. The plain CPU backend declines (no
// capability) and gives none.
func TestDevicePointsEqualHostPoints(t *testing.T) {
	frames := goldenFrames(t, "stream_kf1")
	cases := []struct {
		name          string
		cfg           func(*Config)
		frames        []Frame
		filt          geom.PointFilter
		keyframesOnly bool
		device        bool // the backend has the capability
		wantKept      func(r Result) bool
		wantScaled    bool // some window's similarity scales depth
		wantWarmup    bool // a next window warms up beside the frames
	}{
		{name: "streaming, interval 2, keyframes only", cfg: func(c *Config) { c.KeyframeInterval = 2 },
			frames: frames, filt: geom.PointFilter{ConfThreshold: 3, Stride: 1}, keyframesOnly: true, device: true,
			wantKept: func(r Result) bool { return r.Kind != NonKeyframe }},
		{name: "live windows, every frame, stride 3", cfg: func(c *Config) { c.Windowed, c.WindowMode = true, WindowLive },
			frames: liveFrames(t), filt: geom.PointFilter{ConfThreshold: 3, Stride: 3}, device: true,
			wantKept: func(Result) bool { return true }, wantScaled: true},
		// warmed up early: the next window's phase 1 runs beside the frames
		{name: "live windows warmed up early, interval 2, keyframes only", cfg: func(c *Config) {
			c.Windowed, c.WindowMode, c.KeyframeInterval, c.OverlapSize = true, WindowLive, 2, 6
		},
			frames: liveFrames(t), filt: geom.PointFilter{ConfThreshold: 2.5, Stride: 1}, keyframesOnly: true, device: true,
			wantKept: func(r Result) bool { return r.Kind != NonKeyframe }, wantScaled: true, wantWarmup: true},
		{name: "flow keyframes", cfg: func(c *Config) {
			c.FlowThreshold = 0.5
			c.Decide = func(i int, _ float64, _ bool) bool { return i%2 == 0 }
		},
			frames: frames, filt: geom.PointFilter{ConfThreshold: 2.5, Stride: 2}, keyframesOnly: true, device: true,
			wantKept: func(r Result) bool { return r.Kind != NonKeyframe }},
		{name: "reference windows fall back", cfg: func(c *Config) { c.Windowed = true },
			frames: frames, filt: geom.PointFilter{ConfThreshold: 3, Stride: 1}, device: true,
			wantKept: func(Result) bool { return false }},
		{name: "cpu backend falls back", cfg: func(*Config) {},
			frames: frames, filt: geom.PointFilter{ConfThreshold: 3, Stride: 1},
			wantKept: func(Result) bool { return false }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := goldenConfig(t)
			tc.cfg(&cfg)
			var hu *hostUnprojector
			factory := func(cfg Config) (backend.Backend, error) {
				c := cpu.New(cpu.Config{Threads: cfg.Threads})
				if !tc.device {
					return c, nil
				}
				hu = &hostUnprojector{Backend: c, live: map[backend.Tensor]bool{}}
				return hu, nil
			}
			st, err := New(context.Background(), cfg, factory, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			on, err := st.(PointMaker).MakePoints(tc.filt, tc.keyframesOnly)
			if err != nil || on != tc.device {
				t.Fatalf("MakePoints: %v, %v; want %v", on, err, tc.device)
			}
			var res []Result
			warmed := false
			push := func(out []Result, err error) {
				t.Helper()
				if err != nil {
					t.Fatal(err)
				}
				if hu != nil && len(hu.live) > 0 {
					t.Fatalf("%d maps handed to Unproject are still held after the call", len(hu.live))
				}
				res = append(res, out...)
				warmed = warmed || st.(WindowReporter).Warmup().Steps > 0
			}
			for _, f := range tc.frames {
				push(st.Push(context.Background(), f))
			}
			push(st.Flush(context.Background()))
			if len(res) != len(tc.frames) {
				t.Fatalf("%d results for %d frames", len(res), len(tc.frames))
			}
			kept, nonKF := 0, 0
			for _, r := range res {
				if r.Kind == NonKeyframe {
					nonKF++
				}
				if (r.Kept != nil) != tc.wantKept(r) {
					t.Fatalf("frame %d (%s, window %d): device points %v, want %v", r.Seq, r.Kind, r.Window, r.Kept != nil, tc.wantKept(r))
				}
				if r.Kept == nil {
					continue
				}
				kept++
				if r.Kept.Filter != tc.filt {
					t.Fatalf("frame %d: points made for %+v, told %+v", r.Seq, r.Kept.Filter, tc.filt)
				}
				f := r.DepthFrame()
				f.Kept = nil
				want, err := geom.ConfidentPoints(nil, f, tc.filt)
				if err != nil {
					t.Fatal(err)
				}
				got, err := r.Kept.Points(nil, r.RGB)
				if err != nil {
					t.Fatal(err)
				}
				if len(want) == 0 || !slices.Equal(got, want) {
					t.Fatalf("frame %d (window %d): %d device points, host %d; first %v vs %v", r.Seq, r.Window, len(got), len(want), got[:min(2, len(got))], want[:min(2, len(want))])
				}
			}
			if got := st.Stats().PointsOnDevice; got != int64(kept) {
				t.Fatalf("stats count %d frames with device points, results have %d", got, kept)
			}
			if hu != nil && hu.calls != kept {
				t.Fatalf("%d Unproject calls for %d results with points", hu.calls, kept)
			}
			if tc.keyframesOnly && nonKF == 0 {
				t.Fatal("no non-keyframe: the case tests nothing")
			}
			if tc.wantWarmup && !warmed {
				t.Fatal("no window warmed up early: the case tests nothing")
			}
			if tc.wantScaled {
				scaled := false
				for _, s := range st.(Aligner).Alignments() {
					scaled = scaled || s.Scale != 1
				}
				if !scaled {
					t.Fatal("no window scales depth: the case tests nothing")
				}
			}
		})
	}
}

// TestMakePointsRejectsBadFilter: a filter the map would refuse is refused.
func TestMakePointsRejectsBadFilter(t *testing.T) {
	st, _, _ := wrappedStream(t, tinyConfig(), func(b backend.Backend) *hostUnprojector {
		return &hostUnprojector{Backend: b, live: map[backend.Tensor]bool{}}
	})
	if _, err := st.MakePoints(geom.PointFilter{ConfThreshold: 1, Stride: 0}, false); err == nil {
		t.Fatal("stride 0 accepted")
	}
}
