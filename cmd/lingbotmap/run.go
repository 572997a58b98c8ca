package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/lingbotmap/lingbotmap/config"
	"github.com/lingbotmap/lingbotmap/engine"
	"github.com/lingbotmap/lingbotmap/engine/geom"
	"github.com/lingbotmap/lingbotmap/engine/mapio"
	"github.com/lingbotmap/lingbotmap/engine/output"
	"github.com/lingbotmap/lingbotmap/engine/pipeline"
	"github.com/lingbotmap/lingbotmap/engine/scale"
	"github.com/lingbotmap/lingbotmap/engine/source"
	"github.com/lingbotmap/lingbotmap/node"
)

// runOptions are the flags of `lingbotmap run` and the dependencies that tests replace.
type runOptions struct {
	input string
	out   string
	src   source.Options
	cfg   engine.Config
	// settings binds the engine's settings (flags, environment, --config);
	// sources says where the loaded ones came from, for run.json.
	settings *config.Binding
	sources  config.Sources

	confThreshold float64
	voxel         float64
	pixelStride   int
	saveDepth     bool
	saveConf      bool
	depthScale    float64
	confScale     float64
	noProgress    bool
	quiet         bool
	// checkpointEvery is the cadence, in results, of the output checkpoints
	// (map.ply, run.json, and onCheckpoint); 0 writes them only at the end.
	checkpointEvery int
	// force lets a run reuse a folder that holds a previous run's outputs,
	// removing them first.
	force bool
	// onCheckpoint, when set, runs at every output checkpoint and at the
	// end, after the outputs are written, on the goroutine that wrote them.
	onCheckpoint func(ctx context.Context, cp output.Checkpoint) error
	// saveSessions adds the whole session (engine state, map, input
	// position) to the checkpoints, for --resume (session.go).
	saveSessions bool
	session      sessionOptions

	// scale is the metric scale's settings; depthDir a folder of depth
	// images for scale.source depth; cameraFrame, baseFrame and
	// baseToCamera name the camera in the bag's TF tree (run_scale.go).
	scale                                           scale.Settings
	depthDir                                        string
	cameraFrame, baseFrame, baseToCamera, odomFrame string

	// workers sets the pipeline's prepare and post workers (0: its
	// default); tests compare against one worker each.
	workers int

	version    string
	newStream  func(context.Context, engine.Config, *slog.Logger) (engine.Stream, error)
	openSource func(context.Context, string, source.Options) (source.Source, error)
	stderr     io.Writer
}

func defaultRunOptions() *runOptions {
	return &runOptions{
		out:             "lingbotmap_run", // as the node's save_dir, lingbotmap_map
		src:             source.DefaultOptions(),
		cfg:             engine.DefaultConfig(),
		scale:           runDefaults().Scale,
		confThreshold:   runDefaults().ConfThreshold,
		voxel:           runDefaults().MapVoxel,
		pixelStride:     runDefaults().CloudStride,
		saveDepth:       runDefaults().Output.SaveDepth,
		saveConf:        runDefaults().Output.SaveConf,
		depthScale:      runDefaults().Output.DepthScale,
		confScale:       runDefaults().Output.ConfScale,
		checkpointEvery: runDefaults().Output.CheckpointEvery,
		version:         versionString(),
		newStream:       newEngineStream,
		openSource:      source.Open,
		session:         defaultSessionOptions(),
	}
}

// newRunWriter starts run's output folder (engine/output) from the options.
func newRunWriter(o *runOptions) (*output.Folder, error) {
	w, err := planRunWriter(o)
	if err == nil {
		err = w.Create()
	}
	return w, err
}

// planRunWriter is newRunWriter with nothing written yet (output.Plan).
func planRunWriter(o *runOptions) (*output.Folder, error) {
	grid, err := runDefaults().GridConfig()
	if err != nil {
		return nil, err
	}
	return output.Plan(output.Options{
		Grid:    &grid,
		Dir:     o.out,
		Version: o.version,
		Map: mapio.MapConfig{
			VoxelSize: o.voxel,
			Filter:    geom.PointFilter{ConfThreshold: o.confThreshold, Stride: o.pixelStride},
		},
		SaveDepth: o.saveDepth, SaveConf: o.saveConf, DepthScale: o.depthScale, ConfScale: o.confScale,
		CheckpointEvery: o.checkpointEvery,
		OnCheckpoint:    o.onCheckpoint,
	})
}

// runDefaults are the schema's defaults with run's one difference: an
// offline map.ply keeps finer detail than the node's live map.
func runDefaults() node.Config {
	d := node.DefaultConfig()
	d.MapVoxel = 0.02
	// offline: the reference's streaming schedule, and its stitching when
	// --windowed is asked for
	d.Engine.Windowed = false
	d.Engine.WindowMode = engine.WindowReference
	d.Engine.OverlapSize = engine.DefaultConfig().OverlapSize
	return d
}

func newRunCmd() *cobra.Command { return newRunCmdWith(runRun) }

// newRunCmdWith binds the flags and hands the options to runF (tests pass
// their own to check the parsing).
func newRunCmdWith(runF func(ctx context.Context, o *runOptions, autoKF bool) error) *cobra.Command {
	o := defaultRunOptions()
	var bindErr error
	cmd := &cobra.Command{
		Use:   "run INPUT",
		Short: "Map an image folder, a video or a ROS bag offline",
		Long: `run feeds every frame of INPUT through the model and writes into --out:

  trajectory.tum  camera poses, "timestamp tx ty tz qx qy qz qw" (camera→world)
  map.ply         binary PLY, xyz + rgb: depth unprojected with each pose, pixels
                  with confidence > --conf-threshold, every --cloud-stride pixel,
                  averaged per --map-voxel cube
  depth/NNNNNN.png  per-frame depth for programs: 16-bit grey, value = depth ·
                  --depth-scale (millimetres by default; 0 = no depth). It looks
                  black in an image viewer: depths of a few metres use a few
                  thousandths of the 0–65535 range. Read it as numbers
                  (e.g. 2955 = 2.955 m), or look at depth_color/.
  depth_color/NNNNNN.png  the same depth for people: near yellow to far purple
                  over the frame's 2nd–98th percentile of depths, no depth
                  black, the range printed under it and listed per frame in
                  depth_color/ranges.tsv (model units). Written with depth/.
  conf/NNNNNN.png   per-frame confidence, 16-bit, value = conf · --conf-scale (--save-conf)
  preview.png     the trajectory seen from above over the map's points
  run.json        every setting as it ran (and the --config file, and where each
                  setting not left at its default came from), the version,
                  timings and the KV-cache state

Settings (config/lingbotmap.yaml) come from the built-in defaults, the --config
file, LINGBOTMAP_* environment variables and the flags, in that order. Unless
keyframe_interval, flow_threshold or windowed is set, an input longer than 320
frames takes one keyframe in ⌈N/320⌉ frames, as the reference does.

INPUT is a folder of .png/.jpg/.JPG images (sorted by name), a ROS 1 .bag file,
a ROS 2 bag (--topic, Image or CompressedImage): an .mcap or .db3 file or a
rosbag2 bag directory as ros2 bag record writes it (a folder with
metadata.yaml or .mcap/.db3 files is a bag, not an image folder), or a video
(decoded by ffmpeg).
Outputs are written as the run goes: a trajectory row as each frame finishes,
map.ply and run.json every --checkpoint-every frames, each file whole or not at
all, so a crash or a kill leaves readable files; run.json's "status" says
whether the run is in_progress, completed, interrupted, partial_input or
failed. Ctrl-C, SIGTERM and SIGHUP stop the run and write what was computed
so far. A folder holding a previous run's outputs is refused unless --force,
and one another run is writing is refused (OUT/.lingbotmap.lock). A run that
fails to start, or ends before mapping a frame, leaves nothing behind.

With --session every checkpoint also saves the whole session (engine state,
map, trajectory, input position) atomically into OUT/session/ (large: the KV
cache); "run --resume OUT" continues a stopped or killed run from there with
its saved settings (flags that differ from them are refused) once the
images it wrote are checked, and ends with the trajectory an uninterrupted
run gives.

Without --weights the run uses the random test model: its outputs are noise
(a warning says so, and run.json's "meaningful" is false).`,
		Args: cobra.RangeArgs(0, 1),
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
			o.cfg, o.sources = all.Engine, src
			o.scale, o.cameraFrame, o.baseFrame, o.baseToCamera, o.odomFrame = all.Scale, all.CameraFrame, all.BaseFrame, all.BaseToCamera, all.OdomFrame
			o.confThreshold, o.voxel, o.pixelStride = all.ConfThreshold, all.MapVoxel, all.CloudStride
			out := all.Output
			o.saveDepth, o.saveConf, o.depthScale, o.confScale, o.checkpointEvery = out.SaveDepth, out.SaveConf, out.DepthScale, out.ConfScale, out.CheckpointEvery
			// The reference's default: one keyframe in ⌈N/320⌉ for long
			// streaming runs, unless the user chose.
			autoKF := !src.Given("keyframe_interval") && !src.Given("flow_threshold") && !o.cfg.Windowed
			if o.session.resume != "" {
				o.session.given = givenBesideResume(cmd, all, o)
			}
			return runF(cmd.Context(), o, autoKF)
		},
	}
	f := cmd.Flags()
	o.settings, bindErr = bindSettings(f, runDefaults(), runSettings())
	f.StringVarP(&o.out, "out", "o", o.out, "output folder (created if missing)")
	f.StringVar(&o.src.Topic, "topic", "", "image topic of a ROS 1 or ROS 2 (MCAP) bag (default: its only image topic)")
	f.BoolVar(&o.src.RotateCW90, "rotate-cw90", false, "turn every frame 90° clockwise before the model")
	f.IntVar(&o.src.FirstK, "first-k", 0, "use only the first K input frames (0 = all), before --stride")
	f.IntVar(&o.src.Stride, "stride", o.src.Stride, "use every Nth input frame")
	f.Float64Var(&o.src.SampleFPS, "fps", o.src.SampleFPS, "videos: sample one frame in round(video fps / fps) before --first-k and --stride, as the reference (0 = every frame)")
	f.Float64Var(&o.src.FrameRate, "frame-rate", o.src.FrameRate, "frame rate for the stamps of inputs without times (numbered images)")

	f.StringVar(&o.depthDir, "depth-dir", "", "scale.source depth: a folder of 16-bit PNG depth images in millimetres, aligned with the colour images (matched by file name, else by order)")
	f.BoolVar(&o.saveSessions, "session", false, "save the whole session into OUT/session/ at every checkpoint, so that --resume can continue the run")
	f.StringVar(&o.session.resume, "resume", "", "continue the run whose output folder DIR holds a saved session (its settings are used)")
	f.BoolVar(&o.force, "force", false, "reuse an output folder that holds a previous run: remove its outputs first")
	f.BoolVar(&o.noProgress, "no-progress", false, "no progress bar, even on a terminal")
	f.BoolVarP(&o.quiet, "quiet", "q", false, "log warnings and errors only")
	return cmd
}

// validate checks the options that are not the engine's or the source's.
func (o *runOptions) validate() error {
	var errs []error
	if o.out == "" {
		errs = append(errs, errors.New("'out' must name a folder"))
	}
	if math.IsNaN(o.confThreshold) || math.IsInf(o.confThreshold, 0) {
		errs = append(errs, fmt.Errorf("'conf_threshold' must be a number, not %g", o.confThreshold))
	}
	if !(o.voxel > 0) || math.IsInf(o.voxel, 0) {
		errs = append(errs, fmt.Errorf("'map_voxel' must be a positive size, not %g", o.voxel))
	}
	if o.pixelStride < 1 {
		errs = append(errs, fmt.Errorf("'cloud_stride' must be ≥ 1, not %d", o.pixelStride))
	}
	if !(o.depthScale > 0) || math.IsInf(o.depthScale, 0) {
		errs = append(errs, fmt.Errorf("'depth_scale' must be positive, not %g", o.depthScale))
	}
	if !(o.confScale > 0) || math.IsInf(o.confScale, 0) {
		errs = append(errs, fmt.Errorf("'conf_scale' must be positive, not %g", o.confScale))
	}
	if o.checkpointEvery < 0 {
		errs = append(errs, fmt.Errorf("'checkpoint_every' must be ≥ 0, not %d", o.checkpointEvery))
	}
	if err := o.scale.Validate(); err != nil {
		errs = append(errs, err)
	}
	if o.scale.Source == scale.SourceOdometry && o.scale.OdomTopic == "" && o.odomFrame == "" {
		errs = append(errs, errors.New("'odom_frame' must name the odometry frame for scale.source odometry from /tf (or set scale.odom_topic)"))
	}
	return errors.Join(errs...)
}

func runRun(ctx context.Context, o *runOptions, autoKF bool) (err error) {
	if o.stderr == nil {
		o.stderr = os.Stderr
	}
	level := slog.LevelInfo
	if o.quiet {
		level = slog.LevelWarn
	}
	log := slog.New(slog.NewTextHandler(o.stderr, &slog.HandlerOptions{Level: level}))
	if o.session.resume != "" {
		if err := o.session.load(o, log); err != nil {
			return err
		}
		autoKF = false // the saved settings already hold the chosen interval
	}
	if o.saveSessions || o.session.resume != "" {
		// A resumed run keeps saving its session, so it can be resumed again.
		o.session.every = o.checkpointEvery
	}
	if err := errors.Join(o.validate(), o.src.Validate()); err != nil {
		return &exitCodeError{code: exitUsage, err: err}
	}
	start := time.Now()
	// One run owns its folder; the temporary files a killed run left are
	// removed under the lock, so never a live run's.
	lock, err := output.Lock(o.out)
	if err != nil {
		var busy *output.InUseError
		if errors.As(err, &busy) {
			return &exitCodeError{code: exitUsage, err: err}
		}
		return err
	}
	defer lock.Close()
	if lock.Unlocked {
		log.Warn("the output folder's file system has no file locks: a second run into it would not be refused", "out", o.out)
	}
	if err := output.RemoveStale(o.out, log); err != nil {
		return err
	}
	src, err := o.openSource(ctx, o.input, o.src)
	if err != nil {
		return err
	}
	defer src.Close()
	skipped, err := o.session.skipInput(ctx, src)
	if err != nil {
		return err
	}
	if n := src.Len(); autoKF && n > 320 {
		o.cfg.KeyframeInterval = (n + 319) / 320
		log.Info("long input: one keyframe every few frames, as the reference", "frames", n, "keyframe_interval", o.cfg.KeyframeInterval)
	}
	if err := o.cfg.Validate(); err != nil {
		return &exitCodeError{code: exitUsage, err: err}
	}
	if o.session.resume == "" { // a resumed run continues in its own folder
		if err := output.Prepare(o.out, o.force, log); err != nil {
			var prev *output.PreviousRunError
			if errors.As(err, &prev) {
				return &exitCodeError{code: exitUsage, err: err}
			}
			return err
		}
	}
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
	rec := &output.Record{
		Version: o.version,
		Status:  output.StatusInProgress,
		Started: start.UTC(),
		Input:   output.Input{Path: o.input, Description: src.Describe(), Options: o.src},
		Engine:  output.EngineSettings(o.cfg),
		Config:  o.sources,
		Frames:  output.Frames{Read: skipped},
	}
	if m.scale != nil {
		rec.Scale = m.scale.Status()
	}
	rec.Weights, rec.Meaningful = o.cfg.Weights, o.cfg.Weights != ""
	if !rec.Meaningful {
		rec.Weights = output.RandomWeights
		randomModelWarning(o.stderr, o.cfg.ModelSize)
	}
	log.Info("run", "input", src.Describe(), "out", o.out, "device", o.cfg.Device)

	t0 := time.Now()
	log.Info("loading the model", "weights", rec.Weights, "device", o.cfg.Device)
	stream, err := o.session.startStream(ctx, o, w, log)
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("interrupted while starting the engine (nothing was written): %w", err)
		}
		return fmt.Errorf("start the engine: %w", err)
	}
	if err := w.Create(); err != nil {
		stream.Close()
		return err
	}
	if sc, known := w.Frame().Scale(); known && m.scale != nil {
		m.scale.tr.Resumed(sc) // a resumed session's map frame is metric already
	}
	if err := w.WriteRecord(rec, start); err != nil {
		stream.Close()
		return err
	}
	defer stream.Close()
	rec.Timings.LoadS = time.Since(t0).Seconds()
	// every result is mapped: a GPU makes the points of all of them where
	// their depth maps are (engine.PointMaker), the host the rest
	if pm, ok := stream.(engine.PointMaker); ok {
		dev, err := pm.MakePoints(w.Map().Config().Filter, false)
		if err != nil {
			return err
		}
		log.Info("points", "on_device", dev)
	}

	m.w, m.rec = w, rec
	m.st = &runStream{Stream: stream, ctx: ctx, stopped: &m.stopped}
	m.prog = newProgress(o, src.Len(), log)
	m.st.prog = m.prog
	if skipped == 0 {
		m.st.phase1 = o.cfg.ScaleFrames
	}
	// a signal is answered at once: the model stops at its next step
	// (the engine checks the context between blocks), then the frames
	// done are written
	ended, watched := make(chan struct{}), make(chan struct{})
	defer func() { close(ended); <-watched }()
	go func() {
		defer close(watched)
		select {
		case <-ctx.Done():
			log.Warn("stopping: the model ends its current step, then the frames mapped so far are written", "cause", context.Cause(ctx))
		case <-ended:
		}
	}()
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
	if err := m.Close(pctx); err != nil {
		m.fail(err)
	}
	runErr := m.failure()
	if srcErr != nil {
		runErr = errors.Join(srcErr, runErr)
	}
	rec.Frames.Read = skipped + m.st.pushed
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
	rec.Timings.ModelS = m.st.model.Seconds()

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
	werr := w.Finish(ctx, rec, start)
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

// randomModelWarning tells, loudly and whatever --quiet says, that a run
// without --weights maps with the random test model.
func randomModelWarning(w io.Writer, size string) {
	fmt.Fprintf(w, `
WARNING ==============================================================
  No --weights given: mapping with the RANDOM TEST MODEL (%s).
  Its depths, poses and map are noise, not a map of your input; it
  is there to test the pipeline. For a real map pass
  --weights lingbot-map.pt (the released checkpoint, see README.md).
======================================================================

`, size)
}

// resumeHint says how an interrupted run goes on: --resume where it saved
// its session, else how to make the next run resumable.
func resumeHint(o *runOptions) string {
	switch _, err := os.Stat(filepath.Join(o.out, output.SessionDir, sessionFileName)); {
	case err == nil && (o.saveSessions || o.session.resume != ""):
		return fmt.Sprintf("continue it with: lingbotmap run --resume %s", o.out)
	case o.saveSessions:
		return "it stopped before its first session save, so it cannot be resumed: run it again (with --force)"
	}
	return "this run saved no session, so it cannot be resumed (a run with --session can be continued with --resume OUT)"
}
