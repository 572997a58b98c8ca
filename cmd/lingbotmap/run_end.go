package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/lingbotmap/lingbotmap/engine"
	"github.com/lingbotmap/lingbotmap/engine/output"
)

// end concludes run.json's record once the pipeline has closed, then
// finishes the folder (or, for a run that mapped nothing, leaves nothing
// behind) and says how the run ended. runErr is what stopped the run, if
// anything.
func (m *runSink) end(ctx context.Context, fr *frameReader, stream engine.Stream, skipped int, runErr error) error {
	o, w, rec, log := m.o, m.w, m.rec, m.log
	rec.Frames.Read = skipped + int(m.st.pushed.Load())
	skippedFrames, skipErr := fr.skipped(m.skips)
	if skippedFrames > 0 {
		rec.Input.Skipped, rec.Input.SkipReason = skippedFrames, skipErr.Error()
		log.Warn("skipped frames that did not decode", "count", skippedFrames, "first", skipErr)
	}
	interrupted := ctx.Err() != nil
	if interrupted {
		log.Warn("interrupted: writing what was computed so far", "frames_read", rec.Frames.Read, "results", w.Frames().Results)
	}
	if m.scale != nil {
		rec.Scale = m.scale.Status()
		log.Info("scale", "state", rec.Scale.State, "scale", rec.Scale.Scale, "reason", rec.Scale.Reason, "skipped", rec.Scale.Skipped)
	}
	stats := stream.Stats()
	rec.Cache = &stats
	runErr = rec.Conclude(interrupted, runErr, skipErr, w.Frames().Results)
	rec.Timings.DecodeS = fr.read.Seconds()
	rec.Timings.ModelS = time.Duration(m.st.model.Load()).Seconds()

	if w.Frames().Results == 0 && o.session.resume == "" && rec.Status != output.StatusCompleted {
		// a run that mapped nothing leaves nothing in the way of the next
		m.prog.finish()
		if err := w.Discard(); err != nil {
			return errors.Join(runErr, err)
		}
		if interrupted {
			return fmt.Errorf("interrupted before any frame was mapped; nothing was left in %s: %w", o.out, context.Cause(ctx))
		}
		return fmt.Errorf("%w (no frame was mapped; nothing was left in %s)", runErr, o.out)
	}
	m.prog.phase("saving map.ply, preview.png, the grid and run.json")
	werr := w.Finish(ctx, rec, m.start)
	m.prog.finish()
	if werr != nil {
		return errors.Join(runErr, werr)
	}
	if !rec.Meaningful {
		log.Warn("these outputs come from the random test model (no --weights): noise, not a map of the input", "out", o.out)
	}
	log.Info("done", "out", o.out, "status", rec.Status, "poses", w.Map().Stats().Poses, "points", rec.Map.Points,
		"frames_per_s", fmt.Sprintf("%.2f", rec.Timings.FramesPerS), "overall_frames_per_s", fmt.Sprintf("%.2f", rec.Timings.OverallFramesPS))
	switch {
	case interrupted:
		return fmt.Errorf("interrupted after %d frames; the results so far are in %s; %s: %w", w.Frames().Results, o.out, resumeHint(o), context.Cause(ctx))
	case runErr != nil:
		return fmt.Errorf("%w (the results so far are in %s)", runErr, o.out)
	}
	return nil
}
