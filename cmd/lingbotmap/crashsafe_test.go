package main

import (
	"context"
	"errors"
	"fmt"
	"image"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lingbotmap/lingbotmap/engine"
	"github.com/lingbotmap/lingbotmap/engine/mapio"
	"github.com/lingbotmap/lingbotmap/engine/output"
	"github.com/lingbotmap/lingbotmap/engine/source"
	"github.com/lingbotmap/lingbotmap/engine/traj"
	"github.com/lingbotmap/lingbotmap/internal/shared"
)

// Checkpoints: run.json says in_progress with the frames done so far, the
// trajectory already holds those rows and map.ply covers them; the hook
// runs at the same cadence and once more at the end, which says completed.
func TestRunCheckpoints(t *testing.T) {
	fs := &fakeStream{scale: 2}
	o := testRunOptions(t, fs)
	o.checkpointEvery = 3
	var seen []string
	o.onCheckpoint = func(_ context.Context, cp output.Checkpoint) error {
		if cp.Out != o.out {
			t.Errorf("checkpoint %+v", cp)
		}
		rec := readRunJSON(t, o.out)
		// the checkpoint is written while the next frames go on: the
		// trajectory holds at least the rows it covers
		tr, err := traj.ReadTUMFile(filepath.Join(o.out, mapio.TrajectoryFile))
		if err != nil || len(tr) < cp.Results || (cp.Final && len(tr) != cp.Results) {
			t.Errorf("at %d results the trajectory has %d poses (%v)", cp.Results, len(tr), err)
		}
		f, err := os.Open(filepath.Join(o.out, mapio.MapFile))
		if err == nil {
			var comments []string
			_, comments, err = mapio.ReadPLY(f)
			f.Close()
			if err == nil && !strings.Contains(strings.Join(comments, "\n"), fmt.Sprintf("frames %d", cp.Results)) {
				err = fmt.Errorf("comments %q", comments)
			}
		}
		if err != nil {
			t.Errorf("map.ply at %d results: %v", cp.Results, err)
		}
		if rec.Status != cp.Status || rec.Frames.Results != cp.Results {
			t.Errorf("run.json %s/%d, checkpoint %s/%d", rec.Status, rec.Frames.Results, cp.Status, cp.Results)
		}
		seen = append(seen, fmt.Sprintf("%s:%d:%v", cp.Status, cp.Results, cp.Final))
		return nil
	}
	if err := runRun(context.Background(), o, true); err != nil {
		t.Fatal(err)
	}
	want := "in_progress:3:false in_progress:6:false in_progress:9:false completed:10:true"
	if got := strings.Join(seen, " "); got != want {
		t.Errorf("checkpoints %s, want %s", got, want)
	}
	// a failing hook ends the run with its error
	o = testRunOptions(t, &fakeStream{scale: 2})
	o.checkpointEvery = 4
	o.onCheckpoint = func(context.Context, output.Checkpoint) error { return errors.New("state not saved") }
	err := runRun(context.Background(), o, true)
	if err == nil || !strings.Contains(err.Error(), "checkpoint at 4 frames: state not saved") {
		t.Errorf("failing hook: %v", err)
	}
	if rec := readRunJSON(t, o.out); rec.Status != output.StatusFailed {
		t.Errorf("failing hook: status %s", rec.Status)
	}
}

// partialSource yields n frames, then fails as a cut bag does.
type partialSource struct{ manySource }

func (s *partialSource) Next(ctx context.Context) (engine.Frame, error) {
	if s.i >= s.n {
		return engine.Frame{}, fmt.Errorf("bag x.bag: %w: %d frames were used", source.ErrPartial, s.n)
	}
	return s.manySource.Next(ctx)
}

// Frames read before a cut input, still waiting for phase 1, are mapped;
// the run reports partial input with exit code 4.
func TestRunFlushesBeforePartialInput(t *testing.T) {
	o := testRunOptions(t, &fakeStream{scale: 8})
	o.openSource = func(context.Context, string, source.Options) (source.Source, error) {
		return &partialSource{manySource{n: 5}}, nil
	}
	err := runRun(context.Background(), o, true)
	if exitCode(err) != exitPartial {
		t.Fatalf("exit %d: %v", exitCode(err), err)
	}
	rec := readRunJSON(t, o.out)
	if rec.Status != output.StatusPartialInput || rec.Frames.Read != 5 || rec.Frames.Results != 5 {
		t.Errorf("run.json: status %s, read %d, results %d; want partial_input, 5, 5", rec.Status, rec.Frames.Read, rec.Frames.Results)
	}
}

// Undecodable images in a folder are skipped and counted, the first named
// (they fail on the pipeline's workers, in any order, and are counted in
// frame order); the others are mapped, and the exit code says the input was
// partial.
func TestRunSkipsUndecodableImage(t *testing.T) {
	src, err := shared.Path("data", "courthouse")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for i := range 6 {
		b, err := os.ReadFile(filepath.Join(src, fmt.Sprintf("%06d.png", i)))
		if err != nil {
			t.Fatal(err)
		}
		switch i {
		case 2:
			b = b[:len(b)/3] // cut short
		case 4:
			b = b[:60] // cut shorter: fails sooner
		}
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("%06d.png", i)), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	o := testRunOptions(t, &fakeStream{scale: 2})
	o.input = dir
	err = runRun(context.Background(), o, true)
	if exitCode(err) != exitPartial || !strings.Contains(err.Error(), "2 did not decode") {
		t.Fatalf("exit %d: %v", exitCode(err), err)
	}
	rec := readRunJSON(t, o.out)
	if rec.Status != output.StatusPartialInput || rec.Frames.Results != 4 || rec.Frames.Read != 4 || rec.Input.Skipped != 2 || !strings.Contains(rec.Input.SkipReason, "000002.png") {
		t.Errorf("run.json: status %s, results %d, skipped %d (%s)", rec.Status, rec.Frames.Results, rec.Input.Skipped, rec.Input.SkipReason)
	}
}

// Bad output folders and oversized frames are found before the engine starts.
func TestRunChecksBeforeTheEngine(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	started := false
	start := func(context.Context, engine.Config, *slog.Logger) (engine.Stream, error) {
		started = true
		return &fakeStream{scale: 1}, nil
	}
	o := testRunOptions(t, nil)
	o.newStream = start
	o.out = filepath.Join(file, "out")
	if err := runRun(context.Background(), o, true); err == nil || !strings.Contains(err.Error(), "output folder") || started {
		t.Errorf("output under a file: %v (engine started: %v)", err, started)
	}
	// a frame the model cannot take: 2800×2100 pixels, 30 000 patches
	o = testRunOptions(t, nil)
	o.newStream = start
	o.cfg.ImageWidth = 2800
	o.openSource = func(context.Context, string, source.Options) (source.Source, error) {
		return &sizedSource{w: 4000, h: 3000}, nil
	}
	err := runRun(context.Background(), o, true)
	if exitCode(err) != exitUsage || !errors.Is(err, engine.ErrInputSize) || started {
		t.Errorf("oversized frame: exit %d, %v (engine started: %v)", exitCode(err), err, started)
	}
	if _, err := os.Stat(filepath.Join(o.out, "run.json")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("run.json written for a run that never started: %v", err)
	}
}

type sizedSource struct{ w, h, i int }

func (s *sizedSource) Next(context.Context) (engine.Frame, error) {
	if s.i++; s.i > 3 {
		return engine.Frame{}, io.EOF
	}
	return engine.Frame{Image: image.NewRGBA(image.Rect(0, 0, s.w, s.h)), Width: s.w, Height: s.h}, nil
}
func (s *sizedSource) Len() int         { return -1 }
func (s *sizedSource) Describe() string { return "sized frames" }
func (s *sizedSource) Close() error     { return nil }

// Non-finite and out-of-range settings stop `run` at once, naming them.
func TestRunRejectsNonFiniteFlags(t *testing.T) {
	dir, err := shared.Path("data", "courthouse")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ flag, key string }{
		{"--flow-threshold=NaN", "flow_threshold"},
		{"--flow-threshold=Inf", "flow_threshold"},
		{"--conf-threshold=NaN", "conf_threshold"},
		{"--map-voxel=-Inf", "map_voxel"},
		{"--depth-scale=NaN", "depth_scale"},
		{"--checkpoint-every=-1", "checkpoint_every"},
	} {
		out := filepath.Join(t.TempDir(), "out")
		code, msg := runCLI(t, "run", dir, "--out", out, "--model-size=tiny", "--image-width=70", "--first-k=2", c.flag)
		if code != exitUsage || !strings.Contains(msg, "'"+c.key+"'") {
			t.Errorf("%s: exit %d, %q", c.flag, code, msg)
		}
		if _, err := os.Stat(out); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: the output folder was made: %v", c.flag, err)
		}
	}
}

// `bag` writes its file whole or not at all: a failure part way (here an
// undecodable image) leaves nothing at --out, in both formats, and no
// temporary file.
func TestBagFailureLeavesNoFile(t *testing.T) {
	src, err := shared.Path("data", "courthouse")
	if err != nil {
		t.Fatal(err)
	}
	images := t.TempDir()
	for i := range 3 {
		b, err := os.ReadFile(filepath.Join(src, fmt.Sprintf("%06d.png", i)))
		if err != nil {
			t.Fatal(err)
		}
		if i == 2 {
			b = b[:100]
		}
		if err := os.WriteFile(filepath.Join(images, fmt.Sprintf("%06d.png", i)), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, format := range []string{"bag", "mcap"} {
		out := t.TempDir()
		o := defaultBagOptions()
		o.images, o.format, o.out = images, format, filepath.Join(out, "frames."+format)
		if err := runBag(context.Background(), o, io.Discard); err == nil {
			t.Fatalf("%s: a bag with an undecodable image was written", format)
		}
		if ents, _ := os.ReadDir(out); len(ents) != 0 {
			t.Errorf("%s: left %v", format, ents)
		}
	}
}

// A writer restored from a session's map (run --resume) writes the
// restored rows again and continues after them: the trajectory holds every
// pose once, as an uninterrupted run's does.
func TestRunWriterRestore(t *testing.T) {
	fs := &fakeStream{scale: 1}
	o := testRunOptions(t, fs)
	o.saveDepth = false
	o.openSource = func(context.Context, string, source.Options) (source.Source, error) {
		return &stampedSource{n: 10}, nil
	}
	if err := runRun(context.Background(), o, true); err != nil {
		t.Fatal(err)
	}
	whole, err := os.ReadFile(filepath.Join(o.out, mapio.TrajectoryFile))
	if err != nil {
		t.Fatal(err)
	}

	// the same ten results, split across a "killed" writer and a restored one
	var res []engine.Result
	for i := range 10 {
		res = append(res, fs.result(engine.Frame{Seq: uint64(i), Stamp: stampedAt(i)}, engine.Keyframe))
	}
	o2 := testRunOptions(t, fs)
	o2.saveDepth = false
	first, err := newRunWriter(o2)
	if err != nil {
		t.Fatal(err)
	}
	if err := first.AddResults(res[:4]); err != nil {
		t.Fatal(err)
	}
	first.Close()
	second, err := newRunWriter(o2)
	if err != nil {
		t.Fatal(err)
	}
	if err := second.Restore(first.Map(), first.Frames()); err != nil {
		t.Fatal(err)
	}
	if err := second.AddResults(res[4:]); err != nil {
		t.Fatal(err)
	}
	second.Close()
	got, _ := os.ReadFile(filepath.Join(o2.out, mapio.TrajectoryFile))
	if string(got) != string(whole) || second.Frames().Results != 10 {
		t.Errorf("restored trajectory (%d results):\n%s\nuninterrupted:\n%s", second.Frames().Results, got, whole)
	}
}

// stampedSource is n tiny frames, frame i stamped stampedAt(i).
type stampedSource struct{ n, i int }

func stampedAt(i int) time.Time { return time.Unix(1700000000+int64(i), 250_000_000) }

func (s *stampedSource) Next(context.Context) (engine.Frame, error) {
	if s.i >= s.n {
		return engine.Frame{}, io.EOF
	}
	s.i++
	return engine.Frame{Seq: uint64(s.i - 1), Stamp: stampedAt(s.i - 1), Image: image.NewRGBA(image.Rect(0, 0, 2, 2)), Width: 2, Height: 2}, nil
}
func (s *stampedSource) Len() int         { return s.n }
func (s *stampedSource) Describe() string { return "stamped frames" }
func (s *stampedSource) Close() error     { return nil }
