package main

import (
	"bytes"
	"context"
	"regexp"
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
