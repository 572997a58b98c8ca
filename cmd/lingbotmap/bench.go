package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/lingbotmap/lingbotmap/config"
	"github.com/lingbotmap/lingbotmap/engine"
	"github.com/lingbotmap/lingbotmap/engine/backend"
	"github.com/lingbotmap/lingbotmap/node"
)

type benchOptions struct {
	// cfg holds the engine settings; maxFramesGiven says the user chose
	// max_frames, which bench otherwise sizes for the run.
	cfg            engine.Config
	maxFramesGiven bool
	windowedGiven  bool
	settings       *config.Binding
	// node holds every setting (the node's defaults for those bench has no
	// flag for), for --pipeline.
	node node.Config
	pipe pipelineOptions

	width      int
	height     int
	frames     int
	memEvery   int
	cpuProfile string
	tracePath  string
	// traceSeconds bounds --pipeline's recordings (a trace of a long run
	// would not fit in memory).
	traceSeconds float64
	warmup       int
}

// benchDefaults are the schema's defaults with bench's differences: it
// times the released model's size unless told otherwise, and, like run,
// queues each frame before the last one's results are made (a frame's
// results one call later do not matter offline).
func benchDefaults() node.Config {
	d := node.DefaultConfig()
	d.Engine.ModelSize = "full"
	d.Engine.OverlapFrames = true
	return d
}

func newBenchCmd() *cobra.Command { return newBenchCmdWith(runBench) }

// newBenchCmdWith binds the flags and hands the options to runF (tests pass
// their own to check the parsing).
func newBenchCmdWith(runF func(context.Context, *benchOptions, io.Writer) error) *cobra.Command {
	o := &benchOptions{}
	var bindErr error
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Time the model on random frames: phase 1, steady ms/frame, FPS and memory",
		Long: `bench runs the engine with random weights (or --weights) on random images at
the model resolution and prints the phase-1 time, the steady-state time per
frame (median and p90) and frames per second, and memory: the process's
resident set on the CPU, and what the backend reports on a GPU, after phase 1
and every --mem-every frames (to show it stays flat), each with the peak since
phase 1 began (after --warmup's reset).

The steady state counts only frames that ran with a full cache (scale pages
plus a full sliding window), where attention costs the most; the frames
before that are reported apart as the fill. Give --frames more than
--cache-keyframes (the sliding window) to get a steady state.

Settings (config/lingbotmap.yaml) come from the built-in defaults, the --config
file, LINGBOTMAP_* environment variables and the flags, in that order. Unless
max_frames is given, the special-token pool is sized for the run (at least
the default). model_size defaults to full here. bench alone runs the
reference's streaming schedule unless --windowed is given.

--pipeline times the node's whole frame path instead: encoded camera frames
(--encoding, --pipeline-size, made from --pipeline-images) go to the node
core's image subscription as a transport would hand them, as fast as it
takes them (--frame-rate 0, every frame) or paced like a camera (--frame-rate R, the
node's queue policy latest), under the node's schedule (windowed by
default). It prints frames in/out/dropped, throughput, latency from frame in
to pose out (p50, p99, max), the median time of each stage, memory every
--mem-every frames, the model time of the first and last 1000 frames, the
held memory after the first window and the latency at window boundaries;
--json writes the whole record (cmd/lingbotmap/README.md).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if bindErr != nil {
				return bindErr
			}
			var all node.Config
			src, err := o.settings.Load(&all)
			if err != nil {
				return &exitCodeError{code: exitUsage, err: err}
			}
			o.cfg, o.node, o.maxFramesGiven, o.windowedGiven = all.Engine, all, src.Given("max_frames"), src.Given("windowed")
			return runF(cmd.Context(), o, cmd.OutOrStdout())
		},
	}
	f := cmd.Flags()
	o.settings, bindErr = bindSettings(f, benchDefaults(), benchSettings())
	f.IntVar(&o.width, "width", 518, "model input width (multiple of 14)")
	f.IntVar(&o.height, "height", 378, "model input height (multiple of 14)")
	f.IntVar(&o.frames, "frames", 20, "streaming frames after phase 1 (--pipeline: camera frames in all)")
	f.IntVar(&o.memEvery, "mem-every", 0, "print memory every N frames (0 = only at the end; --pipeline: none)")
	f.IntVar(&o.warmup, "warmup", 0, "run phase 1 and this many frames once, then reset, before timing (kernel compiles and first-use work stay out of the figures); with --pipeline, leave the first N frames out of the timing figures")
	f.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of the timed frames to this file (go tool pprof)")
	f.StringVar(&o.tracePath, "trace", "", "write a Go execution trace of the timed frames to this file (go tool trace; with --pipeline at most --trace-seconds of them)")
	f.Float64Var(&o.traceSeconds, "trace-seconds", 5, "--pipeline: how long --trace and --cpuprofile record from the first timed frame")
	o.pipe.flags(f)
	return cmd
}

func runBench(ctx context.Context, o *benchOptions, out io.Writer) (err error) {
	if o.pipe.on {
		return runBenchPipeline(ctx, o, out)
	}
	if o.width%14 != 0 || o.height%14 != 0 || o.width <= 0 || o.height <= 0 {
		return &exitCodeError{code: exitUsage, err: fmt.Errorf("--width and --height must be positive multiples of 14, not %d×%d", o.width, o.height)}
	}
	if err := engine.CheckInputSize(o.width, o.height); err != nil {
		return fmt.Errorf("--width/--height: %w", err)
	}
	if o.frames < 1 {
		return &exitCodeError{code: exitUsage, err: fmt.Errorf("--frames must be ≥ 1, not %d", o.frames)}
	}
	cfg := o.cfg
	if !o.windowedGiven {
		// the model's yardstick is the reference's streaming schedule with
		// a full cache; the node's windowed default is --pipeline's
		cfg.Windowed = false
	}
	if !o.maxFramesGiven {
		cfg.MaxFrames = max(cfg.MaxFrames, o.frames+cfg.ScaleFrames+1)
	}
	if err := cfg.Validate(); err != nil {
		return &exitCodeError{code: exitUsage, err: err}
	}
	t0 := time.Now()
	st, err := newEngineStream(ctx, cfg, nil)
	if err != nil {
		return err
	}
	defer st.Close()
	load := time.Since(t0)
	fmt.Fprintf(out, "bench: device %s (%s), model %s, %d×%d, %d scale + %d frames, window %d, %d CPU threads, overlap_frames %v\n",
		cfg.Device, cfg.ComputePrecision(), firstNonEmpty(cfg.Weights, "random "+cfg.ModelSize), o.width, o.height, cfg.ScaleFrames, o.frames, cfg.SlidingWindow, runtime.GOMAXPROCS(0), cfg.OverlapFrames)
	fmt.Fprintf(out, "model load: %.2f s\n", load.Seconds())

	// A few random images made up front and taken in turn: making a fresh one
	// for every frame would leave the GPU idle between frames for a
	// reason no real input has. The engine only reads Pixels.
	r := rand.New(rand.NewPCG(7, 11))
	images := make([][]float32, 8)
	for i := range images {
		images[i] = make([]float32, 3*o.width*o.height)
		for j := range images[i] {
			images[i][j] = r.Float32()
		}
	}
	frame := func(i int) engine.Frame {
		return engine.Frame{Seq: uint64(i), Stamp: time.Unix(int64(i), 0), Pixels: images[i%len(images)], Width: o.width, Height: o.height}
	}
	if o.warmup > 0 {
		t := time.Now()
		for i := 0; i < cfg.ScaleFrames+o.warmup; i++ {
			if _, err := st.Push(ctx, frame(i)); err != nil {
				return err
			}
		}
		if err := st.Reset(); err != nil {
			return err
		}
		fmt.Fprintf(out, "warm-up (%d scale + %d frames, then reset): %.2f s\n", cfg.ScaleFrames, o.warmup, time.Since(t).Seconds())
	}
	// phase 1, with its own memory peak
	if r, ok := st.(backend.MemoryReporter); ok {
		r.ResetMemoryPeak()
	}
	var phase1 time.Duration
	for i := 0; i < cfg.ScaleFrames; i++ {
		f := frame(i)
		t := time.Now()
		if _, err := st.Push(ctx, f); err != nil {
			return err
		}
		phase1 += time.Since(t)
	}
	fmt.Fprintf(out, "phase 1 (%d frames together): %.1f ms; %s\n", cfg.ScaleFrames, phase1.Seconds()*1e3, memoryLine(st))
	prof, err := newProfiles(o.cpuProfile, o.tracePath)
	if err != nil {
		return err
	}
	if err := prof.start(); err != nil {
		return err
	}
	defer func() {
		if perr := prof.stop(); err == nil {
			err = perr
		}
	}()
	times := make([]float64, 0, o.frames)
	events := newHostEvents(st)
	results := 0 // the streaming frames' results so far
	full := -1   // the first timed frame that ran with a full cache
	for i := 0; i < o.frames; i++ {
		f := frame(cfg.ScaleFrames + i)
		t := time.Now()
		res, err := st.Push(ctx, f)
		if err != nil {
			return err
		}
		times = append(times, time.Since(t).Seconds()*1e3)
		events.frame()
		// Count from the frame after the one that filled the window: every
		// later frame attends to the whole window (the one that filled it may
		// too, but the count does not depend on when eviction happens).
		if full < 0 && st.Stats().LivePages >= cfg.SlidingWindow {
			full = i + 1
			// A backend's operation profile (the cuda section's profile)
			// then covers the full-cache frames only.
			if r, ok := st.(backend.Profiler); ok {
				r.RestartProfile()
			}
		}
		// with overlap_frames a frame's results may come with the next
		// Push (where the schedule lets the stream hold it), the last ones
		// with Drain: every frame gives one in the end
		results += len(res)
		if len(res) > 1 || (len(res) == 0 && !cfg.OverlapFrames) || results > i+1 {
			return fmt.Errorf("frame %d gave %d results (%d in all)", i, len(res), results)
		}
		if o.memEvery > 0 && (i+1)%o.memEvery == 0 {
			// The cost per frame grows slowly with the stream: every frame's
			// special tokens stay in the cache (the reference's design).
			last := append([]float64(nil), times[i+1-o.memEvery:]...)
			sort.Float64s(last)
			fmt.Fprintf(out, "after %d frames: median of the last %d %.1f ms/frame; %s\n", i+1, o.memEvery, last[len(last)/2], memoryLine(st))
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
	if d, ok := st.(engine.Drainer); ok && cfg.OverlapFrames {
		res, err := d.Drain(ctx)
		if err != nil {
			return err
		}
		results += len(res)
	}
	if results != len(times) {
		return fmt.Errorf("%d frames gave %d results", len(times), results)
	}
	if full < 0 || full >= len(times) {
		med, p90 := medianP90(times)
		fmt.Fprintf(out, "no frame ran with a full cache (%d frames, window %d): median %.1f ms/frame, p90 %.1f ms/frame while it filled\n",
			len(times), cfg.SlidingWindow, med, p90)
	} else {
		if full > 0 {
			med, p90 := medianP90(times[:full])
			fmt.Fprintf(out, "cache filling: median %.1f ms/frame, p90 %.1f ms/frame (%d frames)\n", med, p90, full)
		}
		med, p90 := medianP90(times[full:])
		fmt.Fprintf(out, "steady state, full cache: median %.1f ms/frame, p90 %.1f ms/frame, %.2f FPS (%d frames)\n", med, p90, 1e3/med, len(times)-full)
		fmt.Fprintln(out, events.summary(times, full))
	}
	s := st.Stats()
	fmt.Fprintf(out, "KV cache: %d committed frames, %d scale + %d live pages, %d special tokens, %.1f MB reserved\n",
		s.FrameCount, s.ScalePages, s.LivePages, s.SpecialTokens, float64(s.KVBytes)/1e6)
	fmt.Fprintf(out, "memory: %s\n", memoryLine(st))
	return nil
}

// medianP90 of a non-empty list of times.
func medianP90(times []float64) (med, p90 float64) {
	sorted := append([]float64(nil), times...)
	sort.Float64s(sorted)
	return sorted[len(sorted)/2], sorted[min(len(sorted)-1, len(sorted)*9/10)]
}

func memoryLine(st engine.Stream) string {
	cur, peak := procMemory()
	line := fmt.Sprintf("process RSS %.1f MB (peak %.1f MB)", cur/1e6, peak/1e6)
	if m, ok := st.(backend.MemoryReporter); ok {
		if c, p := m.MemoryUsage(); c > 0 || p > 0 {
			line += fmt.Sprintf(", device memory held %.1f MB (peak %.1f MB)", float64(c)/1e6, float64(p)/1e6)
		}
	}
	return line
}

// procMemory reads VmRSS and VmHWM from /proc/self/status (bytes; 0 if unavailable).
func procMemory() (cur, peak float64) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0, 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 2 {
			continue
		}
		v, _ := strconv.ParseFloat(fields[1], 64)
		switch fields[0] {
		case "VmRSS:":
			cur = v * 1024
		case "VmHWM:":
			peak = v * 1024
		}
	}
	return cur, peak
}

func firstNonEmpty(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
