package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/lingbotmap/lingbotmap/engine"
	"github.com/lingbotmap/lingbotmap/engine/output"
	"github.com/lingbotmap/lingbotmap/engine/source"
)

// The steps that start a run, in runRun's order: the logger, the folder's
// lock, the input, run.json's first record, the engine, the signal watch.

// runLogger logs to o.stderr (os.Stderr unless a test set it), warnings
// only with --quiet.
func runLogger(o *runOptions) *slog.Logger {
	if o.stderr == nil {
		o.stderr = os.Stderr
	}
	level := slog.LevelInfo
	if o.quiet {
		level = slog.LevelWarn
	}
	return slog.New(slog.NewTextHandler(o.stderr, &slog.HandlerOptions{Level: level}))
}

// lockRunFolder makes the run the one owner of its folder. The temporary
// files a killed run left are removed under the lock, so never a live run's.
func lockRunFolder(o *runOptions, log *slog.Logger) (*output.DirLock, error) {
	lock, err := output.Lock(o.out)
	if err != nil {
		var busy *output.InUseError
		if errors.As(err, &busy) {
			return nil, &exitCodeError{code: exitUsage, err: err}
		}
		return nil, err
	}
	if lock.Unlocked {
		log.Warn("the output folder's file system has no file locks: a second run into it would not be refused", "out", o.out)
	}
	if err := output.RemoveStale(o.out, log); err != nil {
		lock.Close()
		return nil, err
	}
	return lock, nil
}

// openRunInput opens the source, skips what a resumed session had read,
// settles the keyframe interval on the input's length and clears a new
// run's folder. skipped is the frames skipped.
func openRunInput(ctx context.Context, o *runOptions, autoKF bool, log *slog.Logger) (_ source.Source, skipped int, err error) {
	src, err := o.openSource(ctx, o.input, o.src)
	if err != nil {
		return nil, 0, err
	}
	defer func() {
		if err != nil {
			src.Close()
		}
	}()
	if skipped, err = o.session.skipInput(ctx, src); err != nil {
		return nil, 0, err
	}
	if n := src.Len(); autoKF && n > 320 {
		o.cfg.KeyframeInterval = (n + 319) / 320
		log.Info("long input: one keyframe every few frames, as the reference", "frames", n, "keyframe_interval", o.cfg.KeyframeInterval)
	}
	if err := o.cfg.Validate(); err != nil {
		return nil, 0, &exitCodeError{code: exitUsage, err: err}
	}
	if o.session.resume == "" { // a resumed run continues in its own folder
		if err := output.Prepare(o.out, o.force, log); err != nil {
			var prev *output.PreviousRunError
			if errors.As(err, &prev) {
				return nil, 0, &exitCodeError{code: exitUsage, err: err}
			}
			return nil, 0, err
		}
	}
	return src, skipped, nil
}

// newRunRecord starts run.json's record: in progress, with the input, the
// settings and the weights (the random test model's warning given here).
func newRunRecord(o *runOptions, src source.Source, skipped int, start time.Time, sc *runScale) *output.Record {
	rec := &output.Record{
		Version: o.version,
		Status:  output.StatusInProgress,
		Started: start.UTC(),
		Input:   output.Input{Path: o.input, Description: src.Describe(), Options: o.src},
		Engine:  output.EngineSettings(o.cfg),
		Config:  o.sources,
		Frames:  output.Frames{Read: skipped},
	}
	if sc != nil {
		rec.Scale = sc.Status()
	}
	rec.Weights, rec.Meaningful = o.cfg.Weights, o.cfg.Weights != ""
	if !rec.Meaningful {
		rec.Weights = output.RandomWeights
		randomModelWarning(o.stderr, o.cfg.ModelSize)
	}
	return rec
}

// startRunEngine loads the model (or resumes the session's engine), then
// writes the folder's first files; on success the caller closes the stream.
func startRunEngine(ctx context.Context, o *runOptions, w *output.Folder, rec *output.Record, sc *runScale, start time.Time, log *slog.Logger) (engine.Stream, error) {
	t0 := time.Now()
	log.Info("loading the model", "weights", rec.Weights, "device", o.cfg.Device)
	stream, err := o.session.startStream(ctx, o, w, log)
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("interrupted while starting the engine (nothing was written): %w", err)
		}
		return nil, fmt.Errorf("start the engine: %w", err)
	}
	if err := w.Create(); err != nil {
		stream.Close()
		return nil, err
	}
	if s, known := w.Frame().Scale(); known && sc != nil {
		sc.tr.Resumed(s) // a resumed session's map frame is metric already
	}
	if err := w.WriteRecord(rec, start); err != nil {
		stream.Close()
		return nil, err
	}
	rec.Timings.LoadS = time.Since(t0).Seconds()
	// every result is mapped: a GPU makes the points of all of them where
	// their depth maps are (engine.PointMaker), the host the rest
	if pm, ok := stream.(engine.PointMaker); ok {
		dev, err := pm.MakePoints(w.Map().Config().Filter, false)
		if err != nil {
			stream.Close()
			return nil, err
		}
		log.Info("points", "on_device", dev)
	}
	return stream, nil
}

// watchStop answers a signal at once: the model stops at its next step
// (the engine checks the context between blocks), then the frames done are
// written. The function it returns ends the watch.
func watchStop(ctx context.Context, log *slog.Logger) func() {
	ended, watched := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(watched)
		select {
		case <-ctx.Done():
			log.Warn("stopping: the model ends its current step, then the frames mapped so far are written", "cause", context.Cause(ctx))
		case <-ended:
		}
	}()
	return func() { close(ended); <-watched }
}
