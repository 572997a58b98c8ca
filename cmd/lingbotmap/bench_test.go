package main

import (
	"bytes"
	"context"
	"regexp"
	"runtime/debug"
	"strconv"
	"testing"

	"github.com/lingbotmap/lingbotmap/engine"
)

// benchLine returns the frame count a line of bench's output reports, or -1
// when no line matches.
func benchLine(out, pattern string) int {
	m := regexp.MustCompile(pattern).FindStringSubmatch(out)
	if m == nil {
		return -1
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// The steady state counts only frames that ran with a full cache: with 3
// scale frames and a window of 4, the first 4 streaming frames fill the
// window and the other 6 attend to all of it.
func TestBenchSteadyStateIsFullCache(t *testing.T) {
	cfg := engine.DefaultConfig()
	cfg.ModelSize, cfg.ScaleFrames, cfg.SlidingWindow, cfg.Threads, cfg.CacheHeadroom = "tiny", 3, 4, 2, 2
	o := &benchOptions{cfg: cfg, width: 70, height: 42, frames: 10}
	var out bytes.Buffer
	if err := runBench(context.Background(), o, &out); err != nil {
		t.Fatal(err)
	}
	s := out.String()
	if n := benchLine(s, `cache filling: median [0-9.]+ ms/frame, p90 [0-9.]+ ms/frame \((\d+) frames\)`); n != 4 {
		t.Errorf("filling frames %d, want 4; output:\n%s", n, s)
	}
	if n := benchLine(s, `steady state, full cache: median [0-9.]+ ms/frame, p90 [0-9.]+ ms/frame, [0-9.]+ FPS \((\d+) frames\)`); n != 6 {
		t.Errorf("full-cache frames %d, want 6; output:\n%s", n, s)
	}
	if n := benchLine(s, `KV cache: (\d+) committed frames, 3 scale \+ 4 live pages`); n != 13 {
		t.Errorf("committed frames %d, want 13; output:\n%s", n, s)
	}

	// Too few frames to fill the window: no steady state is claimed.
	o.frames = 3
	out.Reset()
	if err := runBench(context.Background(), o, &out); err != nil {
		t.Fatal(err)
	}
	s = out.String()
	if n := benchLine(s, `no frame ran with a full cache \((\d+) frames, window 4\)`); n != 3 {
		t.Errorf("want the no-full-cache line for 3 frames; output:\n%s", s)
	}
	if regexp.MustCompile(`steady state`).MatchString(s) {
		t.Errorf("a steady state reported without a full cache:\n%s", s)
	}
}

// With overlap_frames, bench counts every frame's result whether the
// schedule lets the stream hold a frame (streaming, interval keyframes) or
// not (windowed: each frame's results come with its own Push), and times
// the same frames.
func TestBenchOverlapFramesEverySchedule(t *testing.T) {
	for _, windowed := range []bool{false, true} {
		cfg := engine.DefaultConfig()
		cfg.ModelSize, cfg.ScaleFrames, cfg.SlidingWindow, cfg.Threads, cfg.CacheHeadroom = "tiny", 3, 4, 2, 2
		cfg.Windowed, cfg.WindowSize, cfg.OverlapSize, cfg.OverlapFrames = windowed, 6, 2, true
		cfg.WindowMode = engine.WindowLive // the node's, and so bench's default
		o := &benchOptions{cfg: cfg, width: 70, height: 42, frames: 10, windowedGiven: true}
		var out bytes.Buffer
		if err := runBench(context.Background(), o, &out); err != nil {
			t.Fatalf("windowed %v: %v\n%s", windowed, err, out.String())
		}
		s := out.String()
		if n := benchLine(s, `KV cache: (\d+) committed frames`); !windowed && n != 13 {
			t.Errorf("windowed %v: committed frames %d, want 13; output:\n%s", windowed, n, s)
		}
		if !regexp.MustCompile(`(steady state|no frame ran with a full cache)`).MatchString(s) {
			t.Errorf("windowed %v: no timing line:\n%s", windowed, s)
		}
	}
}

// bench charges each steady-state frame with the Go GC cycles that ended and
// the backend's host work during it (none on the CPU backend): no cycles
// with the collector off, some when it runs at almost every allocation, and
// every frame counted once either way.
func TestBenchHostEvents(t *testing.T) {
	cfg := engine.DefaultConfig()
	cfg.ModelSize, cfg.ScaleFrames, cfg.SlidingWindow, cfg.Threads, cfg.CacheHeadroom = "tiny", 3, 4, 2, 2
	o := &benchOptions{cfg: cfg, width: 70, height: 42, frames: 10}
	line := regexp.MustCompile(`host events in the steady state: (\d+) Go GC cycles ended, (\d+) graphs recorded, 0 device allocations, 0 device frees; (\d+) frames with one(: median [0-9.]+ ms, max [0-9.]+ ms)?; (\d+) frames without`)
	run := func(gcPercent int) (cycles, graphs, with, without int) {
		t.Helper()
		defer debug.SetGCPercent(debug.SetGCPercent(gcPercent))
		var out bytes.Buffer
		if err := runBench(context.Background(), o, &out); err != nil {
			t.Fatal(err)
		}
		m := line.FindStringSubmatch(out.String())
		if m == nil {
			t.Fatalf("GOGC %d: no host events line:\n%s", gcPercent, out.String())
		}
		n := func(s string) int { v, _ := strconv.Atoi(s); return v }
		return n(m[1]), n(m[2]), n(m[3]), n(m[5])
	}
	cycles, graphs, with, without := run(-1)
	if cycles != 0 || graphs != 0 || with != 0 || without != 6 {
		t.Errorf("collector off: %d cycles, %d graphs, %d frames with one, %d without; want 0, 0, 0, 6", cycles, graphs, with, without)
	}
	cycles, graphs, with, without = run(1)
	if cycles == 0 || with == 0 || with > cycles || with+without != 6 || graphs != 0 {
		t.Errorf("GOGC 1: %d cycles, %d graphs, %d frames with one, %d without; want cycles, at most one frame each, 6 frames, no graphs on the CPU", cycles, graphs, with, without)
	}
}
