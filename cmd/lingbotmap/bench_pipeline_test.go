package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
)

// benchPipeline runs `bench --pipeline` through its command line on the tiny
// model (small windows, so that a few dozen frames cross several) and
// returns its output and its --json record.
func benchPipeline(t *testing.T, args ...string) (string, pipelineRecord) {
	t.Helper()
	js := filepath.Join(t.TempDir(), "bench.json")
	cmd := newBenchCmd()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(append([]string{"--pipeline", "--model-size", "tiny", "--threads", "2",
		"--image-width", "70", "--pipeline-size", "140x84", "--pipeline-images", filepath.Join("..", "..", "test", "data", "courthouse"),
		"--scale-frames", "3", "--sliding-window", "4", "--window-size", "8", "--overlap-size", "2",
		"--mem-every", "5", "--json", js}, args...))
	if err := cmd.ExecuteContext(context.Background()); err != nil {
		t.Fatalf("bench %v: %v\n%s", args, err, out.String())
	}
	b, err := os.ReadFile(js)
	if err != nil {
		t.Fatal(err)
	}
	var rec pipelineRecord
	if err := json.Unmarshal(b, &rec); err != nil {
		t.Fatal(err)
	}
	return out.String(), rec
}

// floats reads the numbers a pattern's groups capture from s.
func floats(t *testing.T, s, pattern string) []float64 {
	t.Helper()
	m := regexp.MustCompile(pattern).FindStringSubmatch(s)
	if m == nil {
		t.Fatalf("no line matches %q in:\n%s", pattern, s)
	}
	var out []float64
	for _, g := range m[1:] {
		v, err := strconv.ParseFloat(g, 64)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, v)
	}
	return out
}

// checkPipelineRecord checks what every run must satisfy: the printed
// figures are the record's, every frame is accounted for, the latencies are
// ordered and each frame's latency covers its model time.
func checkPipelineRecord(t *testing.T, out string, rec pipelineRecord, frames int) {
	t.Helper()
	counts := floats(t, out, `frames in (\d+), out (\d+), dropped (\d+), failed (\d+)`)
	if int(counts[0]) != frames || int(counts[1]) != rec.FramesOut || int(counts[2]) != rec.Dropped || int(counts[3]) != rec.Failed {
		t.Fatalf("printed counts %v, record %d/%d/%d/%d", counts, rec.FramesIn, rec.FramesOut, rec.Dropped, rec.Failed)
	}
	// out comes from the frames the node reported, dropped from its /diagnostics
	if rec.FramesIn != rec.FramesOut+rec.Dropped+rec.Failed || rec.Failed != 0 || rec.FramesOut == 0 {
		t.Fatalf("frames in %d ≠ out %d + dropped %d + failed %d (or frames failed)", rec.FramesIn, rec.FramesOut, rec.Dropped, rec.Failed)
	}
	lat := floats(t, out, `latency frame in → pose out: p50 ([0-9.]+) ms, p99 ([0-9.]+) ms, max ([0-9.]+) ms`)
	if !(lat[0] > 0 && lat[0] <= lat[1] && lat[1] <= lat[2]) {
		t.Fatalf("latencies p50 %g, p99 %g, max %g", lat[0], lat[1], lat[2])
	}
	if fps := floats(t, out, `throughput: ([0-9.]+) frames/s \((\d+) poses`); fps[0] <= 0 || int(fps[1]) != rec.FramesOut {
		t.Fatalf("throughput line %v", fps)
	}
	th := floats(t, out, `model thread: ([0-9.]+) % in the engine, ([0-9.]+) % waiting for frames, ([0-9.]+) % held back`)
	if th[0] <= 0 || th[0]+th[1]+th[2] > 100.5 {
		t.Fatalf("model thread shares %v: the engine must take time and the shares add up to at most the wall time", th)
	}
	stages := floats(t, out, `stage medians \(ms\): queue ([0-9.]+) \| prepare ([0-9.]+) \| ahead ([0-9.]+) \| model ([0-9.]+) \| post ([0-9.]+) \| deliver ([0-9.]+)`)
	if stages[1] <= 0 || stages[3] <= 0 || stages[4] <= 0 {
		t.Fatalf("prepare, model and post must take time: %v", stages)
	}
	if len(rec.Frames) != frames {
		t.Fatalf("%d frame records for %d frames", len(rec.Frames), frames)
	}
	ok := 0
	for i, f := range rec.Frames {
		if f.Seq != uint64(i) {
			t.Fatalf("record %d is of frame %d", i, f.Seq)
		}
		if !f.OK {
			continue
		}
		ok++
		if f.LatencyMs < f.ModelMs || f.LatencyMs < f.QueueMs+f.PrepareMs {
			t.Fatalf("frame %d: latency %.3f ms is shorter than its model %.3f ms or its queue and preparation %.3f ms", i, f.LatencyMs, f.ModelMs, f.QueueMs+f.PrepareMs)
		}
	}
	if ok != rec.FramesOut {
		t.Fatalf("%d frame records with a pose, %d frames out", ok, rec.FramesOut)
	}
	if want := (rec.FramesOut + rec.Failed) / 5; len(rec.Memory) != want {
		t.Fatalf("%d memory samples for %d frames every 5, want %d", len(rec.Memory), rec.FramesOut, want)
	}
	for _, m := range rec.Memory {
		if m.GoHeapMB <= 0 || m.RSSMB <= 0 || m.RSSPeakMB < m.RSSMB {
			t.Fatalf("memory sample %+v", m)
		}
	}
}

// As fast as the node takes them: every frame is processed (policy all), in
// several windows, and the long-run figures are there.
func TestBenchPipelineFast(t *testing.T) {
	const frames = 30
	out, rec := benchPipeline(t, "--frames", fmt.Sprint(frames), "--encoding", "png", "--warmup", "4")
	checkPipelineRecord(t, out, rec, frames)
	if rec.Dropped != 0 || rec.Policy != "all" {
		t.Fatalf("%d frames dropped under policy %q", rec.Dropped, rec.Policy)
	}
	if rec.Boundaries < 2 || rec.BoundaryWorstRatio < 1 {
		t.Fatalf("%d window boundaries (worst %.2f× the median) over %d frames of 8-slot windows", rec.Boundaries, rec.BoundaryWorstRatio, frames)
	}
	drift := floats(t, out, `model time: median ([0-9.]+) ms over the first (\d+) timed frames, ([0-9.]+) ms over the last (\d+): ratio ([0-9.]+)`)
	if int(drift[1]) != (frames-4)/2 || drift[0] <= 0 || drift[2] <= 0 {
		t.Fatalf("model drift line %v", drift)
	}
	held := floats(t, out, `held after the first window \(process RSS\): min ([0-9.]+) MB, max ([0-9.]+) MB, variation ([0-9.]+) %`)
	if held[0] <= 0 || held[0] > held[1] {
		t.Fatalf("held memory %v", held)
	}
}

// Paced: the camera's rate, the node's default policy (latest); whatever
// the model keeps up with, every frame is mapped or counted as dropped.
func TestBenchPipelinePaced(t *testing.T) {
	const frames = 24
	out, rec := benchPipeline(t, "--frames", fmt.Sprint(frames), "--frame-rate", "60", "--encoding", "raw")
	checkPipelineRecord(t, out, rec, frames)
	if rec.Policy != "latest" {
		t.Fatalf("paced run with policy %q, want the node's default latest", rec.Policy)
	}
	p := floats(t, out, `p99 ([0-9.]+) ms, max [0-9.]+ ms \(p99 = ([0-9.]+) frame periods\)`)
	if d := p[1] - p[0]/(1000.0/60); d > 0.01 || d < -0.01 {
		t.Fatalf("p99 %g ms is %g frame periods of 1/60 s", p[0], p[1])
	}
}

// Bad flags are usage errors that name the flag.
func TestBenchPipelineRefusesBadFlags(t *testing.T) {
	for _, tc := range []struct{ args []string }{
		{[]string{"--encoding", "bmp"}},
		{[]string{"--pipeline-size", "640"}},
		{[]string{"--frame-rate", "-1"}},
	} {
		cmd := newBenchCmd()
		var out bytes.Buffer
		cmd.SetOut(&out)
		cmd.SetErr(&out)
		cmd.SetArgs(append([]string{"--pipeline", "--model-size", "tiny"}, tc.args...))
		err := cmd.ExecuteContext(context.Background())
		if exitCode(err) != exitUsage || !regexp.MustCompile(regexp.QuoteMeta(tc.args[0])).MatchString(err.Error()) {
			t.Errorf("%v: %v (exit %d), want a usage error naming %s", tc.args, err, exitCode(err), tc.args[0])
		}
	}
}
