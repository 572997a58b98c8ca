package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/lingbotmap/lingbotmap/engine"
	"github.com/lingbotmap/lingbotmap/engine/output"
	"github.com/lingbotmap/lingbotmap/engine/source"
	"github.com/lingbotmap/lingbotmap/internal/shared"
)

// goldenRunOptions run the golden tiny model on the first n courthouse
// images, every second frame a keyframe, with every per-frame output on.
func goldenRunOptions(t *testing.T, n int) *runOptions {
	t.Helper()
	o := testRunOptions(t, nil)
	o.src.FirstK = n
	o.saveConf = true
	o.checkpointEvery = 5
	o.newStream = newEngineStream
	var err error
	if o.cfg.Weights, err = shared.Path("golden", "weights.safetensors"); err != nil {
		t.Fatal(err)
	}
	o.cfg.ImageWidth, o.cfg.ScaleFrames, o.cfg.SlidingWindow, o.cfg.MaxFrames = 70, 3, 4, 256
	o.cfg.KeyframeInterval, o.cfg.Threads = 2, 2
	return o
}

// The pipelined run writes exactly what the serial path writes: poses
// computed by the engine directly (engine.New, Push and Flush on the same
// frames) and taken through the writer one after the other give the same
// trajectory, map, depth, confidence and preview files byte for byte, and
// so does a run with one worker at each stage.
func TestRunPipelineMatchesSerial(t *testing.T) {
	const n = 12
	outputs := map[string]string{}
	for _, workers := range []int{0, 1} {
		o := goldenRunOptions(t, n)
		o.workers = workers
		if err := runRun(context.Background(), o, false); err != nil {
			t.Fatalf("%d workers: %v", workers, err)
		}
		if rec := readRunJSON(t, o.out); rec.Frames.Results != n || rec.Timings.Medians == nil || rec.Timings.Medians.Frames != n || !(rec.Timings.FramesPerS > 0) {
			t.Fatalf("%d workers: run.json frames %+v timings %+v", workers, rec.Frames, rec.Timings)
		} else if mt := rec.Timings.ModelThread; mt == nil || !(mt.BusyS > 0) || mt.WaitInputS < 0 || mt.WaitOutputS < 0 || mt.BusyS+mt.WaitInputS+mt.WaitOutputS > rec.Timings.TotalS {
			t.Fatalf("%d workers: run.json's model thread %+v in a run of %g s", workers, mt, rec.Timings.TotalS)
		}
		outputs[map[int]string{0: "default workers", 1: "one worker"}[workers]] = o.out
	}

	// the serial path: the engine's own results, written in line
	o := goldenRunOptions(t, n)
	src, err := source.OpenFolder(o.input, o.src)
	if err != nil {
		t.Fatal(err)
	}
	st, err := newEngineStream(context.Background(), o.cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var results []engine.Result
	for {
		f, err := src.Next(context.Background())
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		res, err := st.Push(context.Background(), f)
		if err != nil {
			t.Fatal(err)
		}
		results = append(results, res...)
	}
	res, err := st.Flush(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	results = append(results, res...)
	if len(results) != n {
		t.Fatalf("the engine gave %d results for %d frames", len(results), n)
	}
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		t.Fatal(err)
	}
	w, err := newRunWriter(o)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.AddResults(results); err != nil {
		t.Fatal(err)
	}
	rec := &output.Record{Input: output.Input{Path: o.input}}
	if err := w.Finish(context.Background(), rec, time.Now()); err != nil {
		t.Fatal(err)
	}
	outputs["serial"] = o.out

	files := outputFiles(t, outputs["serial"])
	if len(files) != 3*n+7 { // depth, depth_color, conf per frame; ranges.tsv, trajectory, map, preview, map.pgm, map.yaml, grid.png
		t.Fatalf("the serial path wrote %d files: %v", len(files), files)
	}
	for name, dir := range outputs {
		if got := outputFiles(t, dir); !slices.Equal(got, files) {
			t.Fatalf("%s wrote %v, the serial path %v", name, got, files)
		}
		for _, f := range files {
			a, err := os.ReadFile(filepath.Join(outputs["serial"], f))
			if err != nil {
				t.Fatal(err)
			}
			b, err := os.ReadFile(filepath.Join(dir, f))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(a, b) {
				t.Errorf("%s: %s differs from the serial path's (%d and %d bytes)", name, f, len(b), len(a))
			}
		}
	}
}

// outputFiles lists a run folder's outputs that must not depend on how the
// run was scheduled (all but run.json), sorted.
func outputFiles(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() == "run.json" || d.Name() == output.LockFile {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		out = append(out, rel)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(out)
	return out
}

// A checkpoint's files are written while the model goes on: the hook of
// the checkpoint at 3 results waits until the model has taken frame 6,
// which could never happen if the checkpoint held the model's thread.
func TestRunCheckpointBesideTheModel(t *testing.T) {
	sixth := make(chan struct{})
	var once sync.Once
	fs := &fakeStream{scale: 2, onPush: func(n int) error {
		if n >= 6 {
			once.Do(func() { close(sixth) })
		}
		return nil
	}}
	o := testRunOptions(t, fs)
	o.checkpointEvery = 3
	var seen []int
	o.onCheckpoint = func(_ context.Context, cp output.Checkpoint) error {
		if cp.Results == 3 {
			select {
			case <-sixth:
			case <-time.After(20 * time.Second):
				return errors.New("the model did not go on while the checkpoint was written")
			}
		}
		seen = append(seen, cp.Results)
		return nil
	}
	if err := runRun(context.Background(), o, true); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(seen, []int{3, 6, 9, 10}) {
		t.Errorf("checkpoints at %v results, want 3 6 9 10", seen)
	}
}
