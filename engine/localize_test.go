package engine

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// A resumed stream in localization mode runs every later frame as a
// non-keyframe: each gives its result at once, and the cache (its frames,
// pages and window) stays what the saved state held, across what would
// have been window changes and warm-ups; reference windows are refused.
func TestLocalizeKeepsTheCache(t *testing.T) {
	cases := []struct {
		name   string
		golden string
		set    func(*Config)
		cut    int
	}{
		{"streaming", "stream_kf1", func(c *Config) {}, 6},
		{"flow keyframes", "stream_flow", func(c *Config) { c.FlowThreshold = 14 }, 7},
		{"windowed live", "stream_kf1", func(c *Config) { c.Windowed = true; c.WindowMode = WindowLive }, 7},
		{"windowed live early", "stream_kf1", func(c *Config) {
			c.Windowed, c.WindowMode, c.OverlapSize, c.WindowSize = true, WindowLive, 6, 15
		}, 10},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := goldenConfig(t)
			tc.set(&cfg)
			frames := goldenFrames(t, tc.golden)
			// played twice: more frames than any window holds
			for _, f := range goldenFrames(t, tc.golden) {
				f.Seq += uint64(len(frames))
				frames = append(frames, f)
			}
			st, err := New(context.Background(), cfg, cpuBackend, nil)
			if err != nil {
				t.Fatal(err)
			}
			runFrames(t, st, frames[:tc.cut], false)
			var buf bytes.Buffer
			if err := st.(Snapshotter).SaveState(&buf); err != nil {
				t.Fatal(err)
			}
			st.Close()

			loc := cfg
			loc.Localize = true
			resumed, err := Resume(context.Background(), loc, cpuBackend, bytes.NewReader(buf.Bytes()), nil)
			if err != nil {
				t.Fatal(err)
			}
			defer resumed.Close()
			before := resumed.Stats()
			if before.FrameCount == 0 {
				t.Fatal("the saved state holds no frames")
			}
			for _, f := range frames[tc.cut:] {
				res := runFrames(t, resumed, []Frame{f}, false)
				if len(res) != 1 || res[0].Seq != f.Seq || res[0].Kind != NonKeyframe {
					t.Fatalf("frame %d: %d results %+v, want its own as a non-keyframe", f.Seq, len(res), kinds(res))
				}
				after := resumed.Stats()
				after.FramesIn, after.PointsOnDevice = before.FramesIn, before.PointsOnDevice
				if after != before {
					t.Fatalf("frame %d: cache %+v, after the resume %+v", f.Seq, after, before)
				}
			}
			if res := runFrames(t, resumed, nil, true); len(res) != 0 {
				t.Fatalf("the flush gave %d more results", len(res))
			}
		})
	}
	cfg := goldenConfig(t)
	cfg.Windowed, cfg.Localize = true, true
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "localization needs live windows") {
		t.Fatalf("reference windows with localization: %v", err)
	}
}

func kinds(rs []Result) []FrameKind {
	var k []FrameKind
	for _, r := range rs {
		k = append(k, r.Kind)
	}
	return k
}
