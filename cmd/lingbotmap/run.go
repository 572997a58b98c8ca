package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/lingbotmap/lingbotmap/engine"
	"github.com/lingbotmap/lingbotmap/engine/output"
	"github.com/lingbotmap/lingbotmap/engine/pipeline"
	"github.com/lingbotmap/lingbotmap/node"
)

func newRunCmd() *cobra.Command { return newRunCmdWith(runRun) }

// newRunCmdWith binds the flags and hands the options to runF (tests pass
// their own to check the parsing).
func newRunCmdWith(runF func(ctx context.Context, o *runOptions, autoKF bool) error) *cobra.Command {
	o := defaultRunOptions()
	var bindErr error
	cmd := &cobra.Command{
		Use:   "run INPUT",
		Short: "Map an image folder, a video or a ROS bag offline",
		Long:  runLong,
		Args:  cobra.RangeArgs(0, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if bindErr != nil {
				return bindErr
			}
			if len(args) == 1 {
				o.input = args[0]
			} else if o.session.resume == "" {
				return &exitCodeError{code: exitUsage, err: errors.New("run needs an INPUT (or --resume DIR)")}
			}
			o.stderr = cmd.ErrOrStderr()
			var all node.Config
			src, err := o.settings.Load(&all)
			if err != nil {
				return &exitCodeError{code: exitUsage, err: err}
			}
			autoKF := o.useSettings(all, src)
			if o.session.resume != "" {
				o.session.given = givenBesideResume(cmd, all, o)
			}
			return runF(cmd.Context(), o, autoKF)
		},
	}
	bindErr = o.bindFlags(cmd.Flags())
	return cmd
}

// runRun maps the input: the options settled, the folder locked, the
// source opened and its first frame checked, the engine started, then every
// frame through the pipeline into run's sink, and the outputs finished.
func runRun(ctx context.Context, o *runOptions, autoKF bool) (err error) {
	log := runLogger(o)
	if autoKF, err = o.settle(autoKF, log); err != nil {
		return err
	}
	start := time.Now()
	lock, err := lockRunFolder(o, log)
	if err != nil {
		return err
	}
	defer lock.Close()
	src, skipped, err := openRunInput(ctx, o, autoKF, log)
	if err != nil {
		return err
	}
	defer src.Close()
	// The first frame is read (and decoded) before the engine starts so
	// that a frame size the model cannot take is refused before the weights
	// load.
	fr := newFrameReader(src, log)
	m := &runSink{o: o, start: start, log: log, ctx: ctx, readBefore: skipped}
	first, firstImg, firstErr := fr.first(ctx, &m.skips)
	if firstErr == nil {
		b := firstImg.Bounds()
		if err := engine.CheckFrameSize(b.Dx(), b.Dy(), o.cfg.ImageWidth); err != nil {
			return fmt.Errorf("frame %d (%d×%d): %w", first.Seq, b.Dx(), b.Dy(), err)
		}
	}
	// Nothing is written until the engine has started (and a resumed
	// session has proved itself): a run that fails to start, or a refused
	// resume, leaves the folder as it was.
	w, err := planRunWriter(o)
	if err != nil {
		return err
	}
	defer w.Close()
	// the metric scale, read from the bag or --depth-dir beside the images;
	// its problems are refused before the weights load
	if firstErr == nil {
		b := firstImg.Bounds()
		if m.scale, err = newRunScale(o, src, mapFrameOf(w), b.Dx(), b.Dy(), log); err != nil {
			return &exitCodeError{code: exitUsage, err: err}
		}
		if m.scale != nil {
			defer m.scale.Close()
		}
	}
	rec := newRunRecord(o, src, skipped, start, m.scale)
	log.Info("run", "input", src.Describe(), "out", o.out, "device", o.cfg.Device)

	stream, err := startRunEngine(ctx, o, w, rec, m.scale, start, log)
	if err != nil {
		return err
	}
	defer stream.Close()

	m.w, m.rec = w, rec
	m.st = &runStream{Stream: stream, ctx: ctx, stopped: &m.stopped}
	m.prog = newProgress(o, src.Len(), log)
	m.st.prog = m.prog
	if skipped == 0 {
		m.st.phase1 = o.cfg.ScaleFrames
	}
	defer watchStop(ctx, log)()
	// The pipeline ends by Close, not by the signal: what the model has
	// computed by then is still delivered and written.
	pctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	defer stop()
	w.Began()
	p, err := pipeline.New(pctx, m.st, pipeline.Sink[struct{}](m), m.pipelineConfig())
	if err != nil {
		return err
	}
	// a resumed run whose input was all read before has no first frame
	// (io.EOF): nothing to feed, only the flush and the end
	var srcErr error
	if firstErr == nil {
		srcErr = m.feed(ctx, p, fr, first)
	} else if !errors.Is(firstErr, io.EOF) {
		srcErr = firstErr
	}
	// The end of the input, or a source that failed part way (a cut bag, a
	// file that cannot be read): the frames waiting for phase 1 are still
	// mapped, unless the run was interrupted or failed.
	if err := m.waitDo(); err != nil {
		m.fail(err)
	}
	if err := p.Close(pctx); err != nil {
		m.fail(fmt.Errorf("flush: %w", err))
	}
	ps := p.Stats()
	m.rec.Timings.ModelThread = &output.ModelThread{BusyS: ps.ModelBusy.Seconds(), WaitInputS: ps.ModelInput.Seconds(), WaitOutputS: ps.ModelOutput.Seconds()}
	if err := m.Close(pctx); err != nil {
		m.fail(err)
	}
	runErr := m.failure()
	if srcErr != nil {
		runErr = errors.Join(srcErr, runErr)
	}
	return m.end(ctx, fr, stream, skipped, runErr)
}
