package main

import (
	"context"
	"errors"
	"fmt"
	"image"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lingbotmap/lingbotmap/engine"
	"github.com/lingbotmap/lingbotmap/engine/output"
	"github.com/lingbotmap/lingbotmap/engine/pipeline"
	"github.com/lingbotmap/lingbotmap/engine/source"
)

// run's frame path: the input is read in order on the caller's goroutine
// (an image folder only reads the files' bytes; workers decode them), an
// engine/pipeline.Pipeline preprocesses on workers, runs the model on its
// own thread and hands the results to runSink, which posts each (images,
// unprojection) on workers and adds them in frame order to the output
// folder (engine/output: the trajectory, the map and the counts).
// A run that saves its session checkpoints in the sink's Checkpoint, a
// pipeline Do where the engine and the written outputs stand at the same
// frame (the session needs both); without a session the folder's
// checkpoints are taken on Add's goroutine after the frame they cover, so
// that the model never waits for the results in flight to drain.

// frameReader reads a source's frames in order for run's pipeline, timing
// the reading and logging what the source notices about its input.
type frameReader struct {
	src      source.Source
	deferred source.Deferred // nil: the source decodes in Next
	log      *slog.Logger
	read     time.Duration
}

func newFrameReader(src source.Source, log *slog.Logger) *frameReader {
	d, _ := src.(source.Deferred)
	return &frameReader{src: src, deferred: d, log: log}
}

// next returns the next frame as the pipeline's input: decoded, or with
// its decoder.
func (r *frameReader) next(ctx context.Context) (pipeline.Input[struct{}], error) {
	t := time.Now()
	defer func() { r.read += time.Since(t) }()
	if r.deferred != nil {
		d, err := r.deferred.NextDeferred(ctx)
		r.notices()
		return pipeline.Input[struct{}]{Seq: d.Seq, Stamp: d.Stamp, Decode: d.Decode}, err
	}
	f, err := r.src.Next(ctx)
	r.notices()
	return pipeline.Input[struct{}]{Seq: f.Seq, Stamp: f.Stamp, Image: f.Image}, err
}

// first returns the first frame that decodes, decoded, so that its size is
// checked before the engine starts. Frames before it that do not decode
// are counted in skips.
func (r *frameReader) first(ctx context.Context, skips *skipTally) (pipeline.Input[struct{}], image.Image, error) {
	for {
		in, err := r.next(ctx)
		if err != nil {
			return in, nil, err
		}
		if in.Image != nil {
			return in, in.Image, nil
		}
		t := time.Now()
		img, err := in.Decode()
		r.read += time.Since(t)
		r.notices()
		if err != nil {
			skips.add(err)
			continue
		}
		in.Image, in.Decode = img, nil
		return in, img, nil
	}
}

func (r *frameReader) notices() {
	if n, ok := r.src.(noticer); ok {
		for _, msg := range n.Notices() {
			r.log.Warn(msg)
		}
	}
}

// skipped is how many frames did not decode, with the first reason: those
// the source skipped and those whose deferred decoding failed.
func (r *frameReader) skipped(deferred skipTally) (int, error) {
	// Asked once the frames are all done: the last frames were decoded on
	// workers after the last read, and their notices are logged here.
	r.notices()
	if s, ok := r.src.(skipReporter); ok {
		if n, err := s.Skipped(); n > 0 && err != nil {
			if deferred.n > 0 {
				return n + deferred.n, err // a source skipping and deferring: the source's first
			}
			return n, err
		}
	}
	return deferred.n, deferred.first
}

// skipTally counts frames that did not decode, with the first reason.
type skipTally struct {
	n     int
	first error
}

func (s *skipTally) add(err error) {
	s.n++
	if s.first == nil {
		s.first = err
	}
}

// errStopped answers the frames still in the pipeline after the run failed.
var errStopped = errors.New("the run has stopped")

// runStream is the engine as run's pipeline drives it. Push and Flush use
// the run's context, so that a signal stops a frame inside the model, and
// do nothing once the run is interrupted or has failed, so that the frames
// still in the pipeline are not mapped. It counts the frames pushed (the
// session's input position) and the model's time, on the model's thread.
type runStream struct {
	engine.Stream
	ctx     context.Context
	stopped *atomic.Bool
	// pushed counts the frames pushed and model the time in the engine's
	// calls (nanoseconds); Add's goroutine reads them for a checkpoint
	pushed, model atomic.Int64
	// prog hears what the model is doing; phase1 is the scale frames
	// still to come before phase 1's results (0 once it has run, or for a
	// resumed session).
	prog   progress
	phase1 int
}

func (s *runStream) Push(_ context.Context, f engine.Frame) ([]engine.Result, error) {
	if err := s.ctx.Err(); err != nil {
		return nil, err
	}
	if s.stopped.Load() {
		return nil, errStopped
	}
	pushed := int(s.pushed.Add(1))
	inPhase1 := s.phase1 > 0 && s.prog != nil
	if inPhase1 {
		if pushed < s.phase1 {
			s.prog.phase(fmt.Sprintf("phase 1: reading the %d scale frames, which the model takes together", s.phase1))
		} else {
			s.prog.phase(fmt.Sprintf("phase 1: the model runs on the %d scale frames together (the longest wait)", s.phase1))
		}
	}
	t := time.Now()
	res, err := s.Stream.Push(s.ctx, f)
	s.model.Add(int64(time.Since(t)))
	if inPhase1 && len(res) > 0 {
		s.phase1 = 0
		s.prog.phase("mapping")
	}
	return res, err
}

// Drain hands out a frame the engine holds ahead (overlap_frames), with
// the run's context, and counts its time as the model's.
func (s *runStream) Drain(context.Context) ([]engine.Result, error) {
	d, ok := s.Stream.(engine.Drainer)
	if !ok || s.ctx.Err() != nil || s.stopped.Load() {
		return nil, nil
	}
	t := time.Now()
	res, err := d.Drain(s.ctx)
	s.model.Add(int64(time.Since(t)))
	return res, err
}

func (s *runStream) Flush(context.Context) ([]engine.Result, error) {
	if s.ctx.Err() != nil || s.stopped.Load() {
		return nil, nil // an interrupted or failed run maps no more
	}
	if s.prog != nil {
		if s.phase1 > 0 {
			s.prog.phase(fmt.Sprintf("phase 1: the model runs on the %d frames the input had (fewer than %d scale frames)", s.pushed.Load(), s.phase1))
		} else {
			s.prog.phase("flushing: the model's last frames")
		}
	}
	t := time.Now()
	res, err := s.Stream.Flush(s.ctx)
	s.model.Add(int64(time.Since(t)))
	return res, err
}

// Prepare preprocesses on the pipeline's workers when the engine can.
func (s *runStream) Prepare(f engine.Frame) (engine.Frame, error) {
	if p, ok := s.Stream.(engine.Preparer); ok {
		return p.Prepare(f)
	}
	return f, nil
}

// runSink is run's pipeline sink, one run's pass over its input: every
// result goes into the output folder; a frame that did not decode is
// counted and skipped; any other error stops the run; a checkpoint saves
// the session when one is due, then the folder's files.
type runSink struct {
	o     *runOptions
	w     *output.Folder
	rec   *output.Record
	start time.Time
	log   *slog.Logger
	ctx   context.Context
	st    *runStream
	prog  progress
	// readBefore is the frames a resumed session had read.
	readBefore int

	stopped atomic.Bool
	mu      sync.Mutex
	err     error // the first error that stopped the run

	skips skipTally // Add's goroutine; the first frame's before it

	// scale is the metric scale's component, nil without a source; fed on
	// Add's goroutine
	scale *runScale

	// the checkpoint in flight: its Do's answer
	pendingDo chan error
}

// fail records the error that stops the run and tells the stream.
func (m *runSink) fail(err error) {
	m.mu.Lock()
	if m.err == nil {
		m.err = err
	}
	m.mu.Unlock()
	m.stopped.Store(true)
}

func (m *runSink) failure() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.err
}

// pipelineConfig is run's pipeline: every frame is mapped (Block).
func (m *runSink) pipelineConfig() pipeline.Config[struct{}] {
	return pipeline.Config[struct{}]{
		Policy:      pipeline.Block,
		LockThread:  m.o.cfg.Device == "cuda",
		Workers:     m.o.workers,
		PostWorkers: m.o.workers,
		Log:         m.log,
	}
}

// Post writes a result's images and unprojects its points on a pipeline
// worker.
func (m *runSink) Post(r *engine.Result, _ struct{}) (any, error) {
	if m.stopped.Load() {
		return output.Posted{}, nil // added to no one
	}
	return m.w.Post(r)
}

// Add takes each output in frame order.
func (m *runSink) Add(out pipeline.Output[struct{}]) {
	if m.stopped.Load() || out.Skipped() {
		return
	}
	if out.Err != nil {
		switch {
		case out.Stage == "decode":
			m.skips.add(out.Err)
			m.prog.add(1)
		case m.ctx.Err() != nil:
			// interrupted: the frame stays unmapped
		case out.Stage == "post":
			m.fail(out.Err)
		default:
			m.fail(fmt.Errorf("frame %d: %w", out.Seq, out.Err))
		}
		return
	}
	v, _ := out.Value.(output.Posted)
	if m.scale != nil {
		// before the map takes the result, so that it is written at the
		// scale known with it
		if err := m.scale.Add(out.Result); err != nil {
			m.fail(fmt.Errorf("frame %d: metric scale: %w", out.Seq, err))
			return
		}
	}
	if err := m.w.Add(out.Result, v); err != nil {
		m.fail(err)
		return
	}
	m.w.AddTiming(out.Timing)
	m.prog.add(1)
	if m.o.session.every <= 0 && m.ctx.Err() == nil {
		// no session: the folder's checkpoint needs only what Add keeps
		// (an interrupted run's end writes what there is)
		if err := m.folderCheckpoint(); err != nil {
			m.fail(err)
		}
	}
}

// folderCheckpoint fills run.json's record and writes the folder's
// checkpoint when one is due.
func (m *runSink) folderCheckpoint() error {
	if !m.w.CheckpointDue() {
		return nil
	}
	m.rec.Frames.Read = m.readBefore + int(m.st.pushed.Load())
	m.rec.Timings.ModelS = time.Duration(m.st.model.Load()).Seconds()
	if m.scale != nil {
		m.rec.Scale = m.scale.Status()
	}
	return m.w.MaybeCheckpoint(m.ctx, m.rec, m.start)
}

// Checkpoint runs on the model's thread with every frame before it added:
// the engine, the map and the counts stand at the same frame. It saves the
// session when one is due, then the folder's checkpoint when one is.
func (m *runSink) Checkpoint(context.Context, pipeline.Cut[struct{}]) error {
	if m.ctx.Err() != nil || m.stopped.Load() {
		return nil // the end writes what there is
	}
	read := m.readBefore + int(m.st.pushed.Load())
	if err := m.o.session.afterFrame(m.o, m.st.Stream, m.w, read); err != nil {
		return err
	}
	return m.folderCheckpoint()
}

// Close waits for the checkpoint being written, if any.
func (m *runSink) Close(context.Context) error { return m.w.WaitWrite() }

// feed submits the frames from first on. A run that saves its session
// places a checkpoint (a Do: the session and the folder's) every
// --checkpoint-every frames or session interval, the shorter; without a
// session Add takes the folder's checkpoints. It returns the source's
// error, if it failed part way.
func (m *runSink) feed(ctx context.Context, p *pipeline.Pipeline[struct{}], fr *frameReader, first pipeline.Input[struct{}]) error {
	every := 0 // no Do without a session
	if s := m.o.session.every; s > 0 {
		every = s
		if c := m.o.checkpointEvery; c > 0 && c < s {
			every = c
		}
	}
	submitted := 0
	var size frameSize
	for in, err := first, error(nil); ; in, err = fr.next(ctx) {
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if ctx.Err() != nil || m.stopped.Load() {
			return nil
		}
		in = size.check(in, m.o.cfg.ImageWidth)
		if err := p.Submit(ctx, in); err != nil {
			if ctx.Err() == nil {
				m.fail(err)
			}
			return nil
		}
		submitted++
		if every > 0 && submitted%every == 0 {
			if err := m.checkpointDo(ctx, p); err != nil {
				m.fail(err)
				return nil
			}
		}
	}
}

// frameSize holds the size of the first frame of a run, which fixes the
// model input size of the whole stream.
type frameSize struct {
	mu           sync.Mutex // decodings run on several workers
	frame, model [2]int     // zero until the first frame
}

// check returns in, or for a frame whose model input differs from the
// first frame's, in with a decoding that fails and says why: the engine
// cannot take it, and it is skipped and counted (input.skipped_frames) as
// a frame that does not decode, instead of ending the run. The node skips
// such frames too.
func (fs *frameSize) check(in pipeline.Input[struct{}], imageWidth int) pipeline.Input[struct{}] {
	test := func(img image.Image) error {
		w, h := img.Bounds().Dx(), img.Bounds().Dy()
		mw, mh, err := engine.ModelInputSize(w, h, imageWidth)
		if err != nil {
			return err
		}
		fs.mu.Lock()
		defer fs.mu.Unlock()
		if fs.model == ([2]int{}) {
			fs.frame, fs.model = [2]int{w, h}, [2]int{mw, mh}
			return nil
		}
		if [2]int{mw, mh} != fs.model {
			return fmt.Errorf("frame %d is %d×%d, a %d×%d model input, but the run maps at %d×%d, the model input of its first frame (%d×%d): the image size changed", in.Seq, w, h, mw, mh, fs.model[0], fs.model[1], fs.frame[0], fs.frame[1])
		}
		return nil
	}
	if in.Image != nil {
		if err := test(in.Image); err != nil {
			return pipeline.Input[struct{}]{Seq: in.Seq, Stamp: in.Stamp, Decode: func() (image.Image, error) { return nil, err }}
		}
		return in
	}
	if decode := in.Decode; decode != nil {
		in.Decode = func() (image.Image, error) {
			img, err := decode()
			if err != nil {
				return nil, err
			}
			if err := test(img); err != nil {
				return nil, err
			}
			return img, nil
		}
	}
	return in
}

// checkpointDo places a checkpoint after the frames submitted so far. It
// returns once the checkpoint has started, so that the next frames are
// read and prepared while it runs; a previous checkpoint's Do is waited for
// first, and its error returned.
func (m *runSink) checkpointDo(ctx context.Context, p *pipeline.Pipeline[struct{}]) error {
	if err := m.waitDo(); err != nil {
		return err
	}
	started := make(chan struct{})
	answer := make(chan error, 1)
	go func() {
		// the Do runs even if a signal comes: frames after it fail fast
		answer <- p.Do(context.WithoutCancel(ctx), func(c pipeline.Cut[struct{}]) error {
			close(started)
			return m.Checkpoint(m.ctx, c)
		})
	}()
	select {
	case <-started:
		m.pendingDo = answer
		return nil
	case err := <-answer:
		return err
	}
}

// waitDo waits for the checkpoint in flight, if any.
func (m *runSink) waitDo() error {
	if m.pendingDo == nil {
		return nil
	}
	err := <-m.pendingDo
	m.pendingDo = nil
	if errors.Is(err, pipeline.ErrClosed) {
		return nil
	}
	return err
}

// skipReporter is a frame source that counts the frames it skipped because
// they did not decode (a bag's corrupt messages), with the first reason.
type skipReporter interface {
	Skipped() (int, error)
}

// noticer is a frame source that reports, once each, lossy conversions of
// its input (16-bit images reduced to 8 bits).
type noticer interface {
	Notices() []string
}

var (
	_ skipReporter = (*source.Bag)(nil)
	_ skipReporter = (*source.Folder)(nil)
	_ noticer      = (*source.Bag)(nil)
	_ noticer      = (*source.Folder)(nil)
)
