package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/lingbotmap/lingbotmap/engine/backend"
	"github.com/lingbotmap/lingbotmap/engine/model"
	"github.com/lingbotmap/lingbotmap/engine/preprocess"
	"github.com/lingbotmap/lingbotmap/engine/weights"
)

// stream runs the schedule (schedule.go) on a backend: it executes each
// step on the model (call.go), stitches the windows' results into one map
// (stitch.go) and, with live windows, warms the next window up between
// frames (warmup.go).
type stream struct {
	schedule
	stitch

	cfg Config
	log *slog.Logger
	be  backend.Backend
	m   *model.Model

	// weightsID is the checkpoint's fingerprint, for session state files:
	// a hash of every byte, computed from the still open store (weights)
	// the first time a state is saved or resumed, not at every start.
	weights     weights.Store
	weightsOnce sync.Once
	weightsID   string
	weightsErr  error

	h, w     int // model resolution, fixed by the first frame
	pre      preprocess.Preprocessor
	prePool  sync.Pool // of *preprocess.Preprocessor, for Prepare
	framesIn int64
	closed   bool
	beside   int // frames encoded beside the heads of the frame before (startBeside)

	// live windows (warmup.go): the next window warming up, the model state
	// it takes when none is (a fork of the first), the last Push's
	// background work
	next    *warmup
	spare   *model.Model
	bg      WarmupStats
	idle    WarmupStats // Idle's steps since the last Push
	idleErr error       // a failed Idle step, for the next Push

	// device points (points.go): what MakePoints asked for, the maps kept
	// during the current Push, and the frames given points so far
	points       *pointRequest
	kept         []*devMaps
	devicePoints atomic.Int64

	// ahead is the frame held with its copies in flight, pointsAhead the
	// one held with its device points in flight (ahead.go)
	ahead       *call
	pointsAhead *pointsAhead
}

func newStream(cfg Config, log *slog.Logger, be backend.Backend, m *model.Model) *stream {
	s := &stream{schedule: newSchedule(cfg), stitch: newStitch(cfg), cfg: cfg, log: log, be: be, m: m}
	s.pre = preprocess.Preprocessor{Width: cfg.ImageWidth, Patch: m.Sizes().PatchSize, Workers: cfg.Threads}
	s.prePool.New = func() any {
		p := s.pre
		return &p
	}
	if cfg.Windowed && cfg.WindowMode == WindowLive && !cfg.canStartEarly() {
		log.Info("live windows change serially: the next window warms up early only with fixed-interval windows and overlap_size ≥ scale_frames+1",
			"overlap_size", cfg.OverlapSize, "scale_frames", cfg.ScaleFrames, "flow_threshold", cfg.FlowThreshold)
	}
	return s
}

// push runs one frame as the reference's loop does. A window that has
// taken all its frames makes way for the next, which starts on the old
// one's last frames (stitch.go); the frame goes into the current window,
// where the schedule makes it a step (a phase-1 frame, waiting for the
// rest, or one streaming frame) and the step runs; its results, aligned and
// stitched, go out with their device points; then a live window's warm-up
// of the next window advances.
func (s *stream) push(ctx context.Context, f Frame) ([]Result, error) {
	if s.closed {
		return nil, errors.New("engine: stream is closed")
	}
	in, err := s.prepare(f)
	if err != nil {
		return nil, err
	}
	if err := s.idleErr; err != nil {
		return nil, err
	}
	s.framesIn++
	s.bg = WarmupStats{IdleSteps: s.idle.IdleSteps, IdleCost: s.idle.IdleCost}
	s.idle = WarmupStats{}
	var out []Result
	if s.windowDone() {
		res, err := s.nextWindow(ctx, s.windowChange())
		if err != nil {
			return nil, err
		}
		out = append(out, res...)
	}
	s.saw(in)
	// a failing step may still give the results of a frame held before it
	res, err := s.feed(ctx, in)
	out = append(out, res...)
	if err != nil {
		return out, err
	}
	if err := s.makePoints(out); err != nil {
		return out, err
	}
	if s.early() {
		if err := s.warmUp(ctx, in); err != nil {
			return out, err
		}
	}
	return out, nil
}

// feed puts one input into the current window and runs the step the
// schedule makes of it.
func (s *stream) feed(ctx context.Context, in input) ([]Result, error) {
	return s.run(ctx, s.take(in))
}

// run executes a step of the current window and passes its results on,
// after those of the frame held ahead (ahead.go) unless st is queued ahead
// of them.
func (s *stream) run(ctx context.Context, st step) ([]Result, error) {
	if s.overlaps(st) && s.m.Stats().FrameCount < s.cfg.MaxFrames {
		return s.runAhead(ctx, st)
	}
	out, err := s.collect()
	if err != nil {
		return out, err
	}
	res, err := s.runStep(ctx, st)
	return append(out, res...), err
}

// runStep runs st whole.
func (s *stream) runStep(ctx context.Context, st step) ([]Result, error) {
	switch st.op {
	case opBuffer:
		return nil, nil
	case opFrame, opFlow:
		if !s.cfg.Windowed && s.m.Stats().FrameCount >= s.cfg.MaxFrames {
			return nil, fmt.Errorf("%w: %d frames committed since the last reset (max_frames %d); use windowed mode, a larger keyframe interval or reset", ErrCacheFull, s.m.Stats().FrameCount, s.cfg.MaxFrames)
		}
	}
	if st.op == opFlow {
		r, err := s.runFlowFrame(ctx, st)
		if err == nil {
			err = s.deviceErr()
		}
		if err != nil {
			return nil, err
		}
		s.done(st, r.PoseEnc)
		return s.emit(s.win, []Result{r})
	}
	res, err := s.runCall(ctx, st, s.m)
	if err != nil {
		return nil, err
	}
	return s.emit(s.win, res)
}

// flush runs a partial phase 1 and releases everything held.
func (s *stream) flush(ctx context.Context) ([]Result, error) {
	out, err := s.collect()
	if err != nil {
		return out, err
	}
	if st, ok := s.flushStep(); ok {
		res, err := s.run(ctx, st)
		if err != nil {
			return out, err
		}
		out = append(out, res...)
	}
	if !s.cfg.Windowed {
		return out, nil
	}
	if s.live() {
		// a warm-up re-runs frames emitted already
		s.dropWarmup()
	}
	res, err := s.stitch.flush(s.win)
	return append(out, res...), err
}

// Reset starts a new map.
func (s *stream) Reset() error {
	s.dropAhead()
	s.m.Reset()
	// The old map's KV pages give their memory back too, so the next phase 1
	// does not run on top of them (a new window keeps them: its frames
	// refill the same pages at once).
	if err := s.m.ReleaseCache(); err != nil {
		s.log.Warn("reset: the KV cache keeps its memory", "err", err)
	}
	s.dropWarmup()
	if s.spare != nil {
		s.spare.Reset()
		if err := s.spare.ReleaseCache(); err != nil {
			s.log.Warn("reset: the second KV cache keeps its memory", "err", err)
		}
	}
	s.trimBackend()
	s.schedule.reset()
	s.clear()
	s.h, s.w = 0, 0
	return nil
}

// Close releases the model.
func (s *stream) Close() error {
	if s.closed {
		return nil
	}
	s.closed = true
	s.dropAhead()
	s.dropWarmup()
	if s.spare != nil {
		s.spare.Close()
	}
	s.m.Close()
	if s.weights != nil {
		s.weights.Close()
		s.weights = nil
	}
	if c, ok := s.be.(io.Closer); ok {
		return c.Close()
	}
	return nil
}

// weightsFingerprint fingerprints the weights once, then lets the store go.
func (s *stream) weightsFingerprint() (string, error) {
	s.weightsOnce.Do(func() {
		if s.weights == nil {
			s.weightsErr = errors.New("engine: the weights are no longer open to fingerprint")
			return
		}
		s.weightsID, s.weightsErr = weightsFingerprint(s.cfg, s.weights)
		s.weights.Close()
		s.weights = nil
	})
	return s.weightsID, s.weightsErr
}
