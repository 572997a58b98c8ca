package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/lingbotmap/lingbotmap/config"
	"github.com/lingbotmap/lingbotmap/engine"
	"github.com/lingbotmap/lingbotmap/engine/geom"
	"github.com/lingbotmap/lingbotmap/engine/mapio"
	"github.com/lingbotmap/lingbotmap/engine/pipeline"
	"github.com/lingbotmap/lingbotmap/engine/render"
	"github.com/lingbotmap/lingbotmap/engine/source"
	"github.com/lingbotmap/lingbotmap/internal/atomicfile"
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
	onCheckpoint func(ctx context.Context, cp runCheckpoint) error
	// saveSessions adds the whole session (engine state, map, input
	// position) to the checkpoints, for --resume (session.go).
	saveSessions bool
	session      sessionOptions

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
		out:             "lingbotmap-run",
		src:             source.DefaultOptions(),
		cfg:             engine.DefaultConfig(),
		confThreshold:   runDefaults().ConfThreshold,
		voxel:           runDefaults().MapVoxel,
		pixelStride:     runDefaults().CloudStride,
		saveDepth:       true,
		depthScale:      render.DepthScale,
		confScale:       100,
		checkpointEvery: 20,
		version:         versionString(),
		newStream:       newEngineStream,
		openSource:      source.Open,
		session:         defaultSessionOptions(),
	}
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

INPUT is a folder of .png/.jpg/.JPG images (sorted by name), a ROS 1 .bag file
or a ROS 2 .mcap bag (--topic, Image or CompressedImage) or a video (decoded
by ffmpeg).
Outputs are written as the run goes: a trajectory row as each frame finishes,
map.ply and run.json every --checkpoint-every frames, each file whole or not at
all, so a crash or a kill leaves readable files; run.json's "status" says
whether the run is in_progress, completed, interrupted, partial_input or
failed. Ctrl-C, SIGTERM and SIGHUP stop the run and write what was computed
so far. A folder holding a previous run's outputs is refused unless --force.

With --session every checkpoint also saves the whole session (engine state,
map, trajectory, input position) atomically into OUT/session/ (large: the KV
cache); "run --resume OUT" continues a stopped or killed run from there with
its saved settings, and ends with the trajectory an uninterrupted run gives.`,
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
			o.confThreshold, o.voxel, o.pixelStride = all.ConfThreshold, all.MapVoxel, all.CloudStride
			// The reference's default: one keyframe in ⌈N/320⌉ for long
			// streaming runs, unless the user chose.
			autoKF := !src.Given("keyframe_interval") && !src.Given("flow_threshold") && !o.cfg.Windowed
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

	f.BoolVar(&o.saveDepth, "save-depth", o.saveDepth, "write per-frame depth PNGs (depth/, 16-bit) and their colour previews (depth_color/)")
	f.BoolVar(&o.saveConf, "save-conf", false, "write per-frame confidence PNGs")
	f.Float64Var(&o.depthScale, "depth-scale", o.depthScale, "depth PNG units per model unit (1000 = millimetres)")
	f.Float64Var(&o.confScale, "conf-scale", o.confScale, "confidence PNG units per confidence unit")
	f.IntVar(&o.checkpointEvery, "checkpoint-every", o.checkpointEvery, "write map.ply and run.json (and the session, with --session) every N frames (0 = only at the end); trajectory rows and depth images are written as frames finish")
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
		errs = append(errs, fmt.Errorf("'depth-scale' must be positive, not %g", o.depthScale))
	}
	if !(o.confScale > 0) || math.IsInf(o.confScale, 0) {
		errs = append(errs, fmt.Errorf("'conf-scale' must be positive, not %g", o.confScale))
	}
	if o.checkpointEvery < 0 {
		errs = append(errs, fmt.Errorf("'checkpoint-every' must be ≥ 0, not %d", o.checkpointEvery))
	}
	return errors.Join(errs...)
}

// runRecord is run.json.
type runRecord struct {
	Version     string             `json:"version"`
	Status      string             `json:"status"` // one of the run status values below
	Started     time.Time          `json:"started"`
	Finished    time.Time          `json:"finished"`
	Interrupted bool               `json:"interrupted"`
	Error       string             `json:"error,omitempty"`
	Input       runInput           `json:"input"`
	Engine      map[string]any     `json:"engine"`
	Config      config.Sources     `json:"config"`
	Map         runMap             `json:"map"`
	Depth       runDepth           `json:"depth"`
	Frames      runFrames          `json:"frames"`
	Timings     runTimings         `json:"timings"`
	Cache       *engine.CacheStats `json:"cache,omitempty"`
	Outputs     map[string]string  `json:"outputs"`
}

// The values of run.json's "status".
const (
	statusInProgress   = "in_progress"   // a checkpoint of a run still going (or killed)
	statusCompleted    = "completed"     // the whole input was mapped
	statusInterrupted  = "interrupted"   // stopped by a signal: the outputs cover the frames done
	statusPartialInput = "partial_input" // the input was truncated or partly corrupt
	statusFailed       = "failed"        // an error ended the run: see "error"
)

// runCheckpoint is what an onCheckpoint hook is given.
type runCheckpoint struct {
	Out     string // the output folder
	Results int    // results the checkpoint covers
	Final   bool   // the end of the run
	Status  string // run.json's status as just written
}

type runInput struct {
	Path        string         `json:"path"`
	Description string         `json:"description"`
	Options     source.Options `json:"options"`
	Skipped     int            `json:"skipped_frames,omitempty"` // undecodable bag messages
	SkipReason  string         `json:"first_skip_reason,omitempty"`
}

type runMap struct {
	ConfThreshold float64 `json:"conf_threshold"`
	VoxelSize     float64 `json:"voxel_size"`
	PixelStride   int     `json:"pixel_stride"`
	PointsIn      int64   `json:"points_unprojected"`
	Points        int     `json:"points"`
	// frames whose points the GPU made (engine.PointMaker) and the host
	FramesDevice int64 `json:"point_frames_device"`
	FramesHost   int64 `json:"point_frames_host"`
}

type runDepth struct {
	Saved       bool    `json:"saved"`
	ColorRanges string  `json:"color_ranges,omitempty"`
	Scale       float64 `json:"scale"`
	Unit        string  `json:"unit"`
	Clipped     int64   `json:"clipped_pixels"`
	ConfSaved   bool    `json:"conf_saved"`
	ConfScale   float64 `json:"conf_scale"`
	ConfClipped int64   `json:"conf_clipped_pixels"`
}

type runFrames struct {
	Read         int `json:"read"`
	Results      int `json:"results"`
	Scale        int `json:"scale"`
	Keyframes    int `json:"keyframes"`
	NonKeyframes int `json:"non_keyframes"`
	Windows      int `json:"windows"`
}

// runTimings are run.json's timings. The stages overlap (the pipeline runs
// them at once), so their sums exceed the time they took together.
type runTimings struct {
	TotalS  float64 `json:"total_s"`
	LoadS   float64 `json:"load_s"`
	DecodeS float64 `json:"decode_s"` // reading the input in order (and a bag's or video's decoding)
	// PrepareS is the workers' decoding (image folders) and preprocessing.
	PrepareS float64 `json:"prepare_s"`
	ModelS   float64 `json:"model_s"`  // the engine's Push and Flush calls
	OutputS  float64 `json:"output_s"` // images, unprojection, map, trajectory, checkpoints
	// MappingS runs from the first frame in to now (the last result out at
	// the end); FramesPerS is the results of this run over it.
	MappingS        float64 `json:"mapping_s"`
	FramesPerS      float64 `json:"frames_per_s"`
	OverallFramesPS float64 `json:"overall_frames_per_s"` // results over total_s, loading included
	MsPerFrame      float64 `json:"model_ms_per_frame"`
	ModelFramesPS   float64 `json:"model_frames_per_s"`
	// Medians are the per-frame medians of each stage.
	Medians *stageMedians `json:"median_ms,omitempty"`
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
		if err := o.session.load(o); err != nil {
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
		if err := prepareOut(o.out, o.force, log); err != nil {
			return err
		}
	}
	// The first frame is read (and decoded) before the engine starts so
	// that a frame size the model cannot take is refused before the weights
	// load.
	fr := newFrameReader(src, log)
	m := &mapping{o: o, start: start, log: log, ctx: ctx, readBefore: skipped}
	first, firstImg, firstErr := fr.first(ctx, &m.skips)
	if firstErr == nil {
		b := firstImg.Bounds()
		if err := engine.CheckFrameSize(b.Dx(), b.Dy(), o.cfg.ImageWidth); err != nil {
			return fmt.Errorf("frame %d (%d×%d): %w", first.Seq, b.Dx(), b.Dy(), err)
		}
	}
	w, err := newRunWriter(o)
	if err != nil {
		return err
	}
	defer w.close()
	rec := &runRecord{
		Version: o.version,
		Status:  statusInProgress,
		Started: start.UTC(),
		Input:   runInput{Path: o.input, Description: src.Describe(), Options: o.src},
		Engine:  engineRecord(o.cfg),
		Config:  o.sources,
		Frames:  runFrames{Read: skipped},
	}
	if err := w.writeRecord(rec, start); err != nil {
		return err
	}
	log.Info("run", "input", src.Describe(), "out", o.out, "device", o.cfg.Device)

	t0 := time.Now()
	stream, err := o.session.startStream(ctx, o, w, log)
	if err != nil {
		rec.Status, rec.Error = statusFailed, err.Error()
		if ctx.Err() != nil {
			rec.Status, rec.Interrupted = statusInterrupted, true
		}
		return errors.Join(fmt.Errorf("start the engine: %w", err), w.writeRecord(rec, start))
	}
	defer stream.Close()
	rec.Timings.LoadS = time.Since(t0).Seconds()
	// every result is mapped: a GPU makes the points of all of them where
	// their depth maps are (engine.PointMaker), the host the rest
	if pm, ok := stream.(engine.PointMaker); ok {
		dev, err := pm.MakePoints(w.m.Config().Filter, false)
		if err != nil {
			return err
		}
		log.Info("points", "on_device", dev)
	}

	m.w, m.rec = w, rec
	m.st = &runStream{Stream: stream, ctx: ctx, stopped: &m.stopped}
	m.prog = newProgress(o, src.Len(), log)
	// The pipeline ends by Close, not by the signal: what the model has
	// computed by then is still delivered and written.
	pctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	defer stop()
	w.mapStart = time.Now()
	p, err := pipeline.New(pctx, m.st, m.pipelineConfig())
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
	if err := w.waitWrite(); err != nil {
		m.fail(err)
	}
	m.prog.finish()
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
		log.Warn("interrupted: writing what was computed so far", "frames_read", rec.Frames.Read, "results", w.frames.Results)
	}
	stats := stream.Stats()
	rec.Cache = &stats
	rec.Interrupted = interrupted
	switch {
	case interrupted:
		rec.Status = statusInterrupted
	case runErr != nil && errors.Is(runErr, source.ErrPartial):
		rec.Status = statusPartialInput
	case runErr != nil:
		rec.Status = statusFailed
	case skippedFrames > 0:
		rec.Status = statusPartialInput
		runErr = fmt.Errorf("%w: %d frames were used; %d did not decode and were skipped, the first %w", source.ErrPartial, w.frames.Results, skippedFrames, skipErr)
	default:
		rec.Status = statusCompleted
	}
	if runErr != nil && !interrupted {
		rec.Error = runErr.Error()
	}
	rec.Timings.DecodeS = fr.read.Seconds()
	rec.Timings.ModelS = m.st.model.Seconds()

	if werr := w.finish(ctx, rec, start); werr != nil {
		return errors.Join(runErr, werr)
	}
	log.Info("done", "out", o.out, "status", rec.Status, "poses", w.m.Stats().Poses, "points", rec.Map.Points,
		"frames_per_s", fmt.Sprintf("%.2f", rec.Timings.FramesPerS), "overall_frames_per_s", fmt.Sprintf("%.2f", rec.Timings.OverallFramesPS))
	switch {
	case interrupted:
		return fmt.Errorf("interrupted after %d frames; the results so far are in %s: %w", w.frames.Results, o.out, context.Cause(ctx))
	case runErr != nil:
		return fmt.Errorf("%w (the results so far are in %s)", runErr, o.out)
	}
	return nil
}

// runOutputs are the names a run writes into its folder; a folder holding
// any of them (or a temporary file of one) holds a previous run.
func runOutputs() []string {
	return []string{mapio.TrajectoryFile, mapio.MapFile, "run.json", "preview.png", "depth", "depth_color", "conf", sessionDirName}
}

// prepareOut makes the output folder, refuses one that holds a previous
// run's outputs unless force (then removes them, so old and new never mix),
// and checks that it can be written.
func prepareOut(dir string, force bool, log *slog.Logger) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("output folder: %w", err)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("output folder: %w", err)
	}
	var used []string
	for _, e := range ents {
		for _, name := range runOutputs() {
			// WriteFileAtomic's temporary files are ".NAME.*"
			if e.Name() == name || strings.HasPrefix(e.Name(), "."+name+".") {
				used = append(used, e.Name())
			}
		}
	}
	if len(used) > 0 && !force {
		return &exitCodeError{code: exitUsage, err: fmt.Errorf("output folder %s holds a previous run (%s): choose another --out, or add --force to remove these first",
			dir, strings.Join(used, ", "))}
	}
	for _, name := range used {
		if err := os.RemoveAll(filepath.Join(dir, name)); err != nil {
			return fmt.Errorf("output folder: removing the previous run: %w", err)
		}
	}
	if len(used) > 0 {
		log.Info("removed the previous run's outputs (--force)", "out", dir, "removed", strings.Join(used, ","))
	}
	return mapio.ProbeDir(dir)
}

// runWriter turns results into the output files as they arrive: trajectory
// rows are appended at once; the poses and the map go into a mapio.Map (the
// node's accumulator too), bounded by the explored volume, and are saved at
// checkpoints; the frames' depth maps are written, each whole, and dropped.
type runWriter struct {
	o      *runOptions
	m      *mapio.Map
	tum    *mapio.TUMAppender
	frames runFrames
	depth  runDepth
	ranges []depthRange
	window int
	// lastCheckpoint is frames.Results at the last checkpoint.
	lastCheckpoint int
	// writing is the checkpoint being written on its own goroutine.
	writing chan error

	// timings: output and prepare are sums over frames, stages their
	// per-frame values; mapStart is when the first frame went in, and
	// resumedResults the results a resumed session brought.
	output, prepare time.Duration
	stages          stageTimes
	mapStart        time.Time
	resumedResults  int
}

// depthRange is one line of depth_color/ranges.tsv.
type depthRange struct {
	seq uint64
	r   render.DepthRange
}

func newRunWriter(o *runOptions) (*runWriter, error) {
	m, err := mapio.NewMap(mapio.MapConfig{
		VoxelSize: o.voxel,
		Filter:    geom.PointFilter{ConfThreshold: o.confThreshold, Stride: o.pixelStride},
	})
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return nil, fmt.Errorf("output folder: %w", err)
	}
	for _, d := range []struct {
		on   bool
		name string
	}{{o.saveDepth, "depth"}, {o.saveDepth, "depth_color"}, {o.saveConf, "conf"}} {
		if d.on {
			if err := os.MkdirAll(filepath.Join(o.out, d.name), 0o755); err != nil {
				return nil, fmt.Errorf("output folder: %w", err)
			}
		}
	}
	tum, err := mapio.CreateTUM(filepath.Join(o.out, mapio.TrajectoryFile))
	if err != nil {
		return nil, err
	}
	return &runWriter{
		o:   o,
		m:   m,
		tum: tum,
		depth: runDepth{Saved: o.saveDepth, Scale: o.depthScale, Unit: fmt.Sprintf("1/%g of a model depth unit (metres for metric models)", o.depthScale),
			ConfSaved: o.saveConf, ConfScale: o.confScale},
		window: -1,
	}, nil
}

// restore makes the writer continue a resumed session: the restored map
// and counts replace the empty ones, and the trajectory file, which
// newRunWriter started empty, gets the map's poses again, so that it holds
// every row once.
func (w *runWriter) restore(m *mapio.Map, frames runFrames) error {
	w.m, w.frames, w.lastCheckpoint, w.resumedResults = m, frames, frames.Results, frames.Results
	return w.tum.Append(m.Trajectory()...)
}

// close releases the trajectory file (finish has synced it).
func (w *runWriter) close() {
	if w.tum != nil {
		w.tum.Close()
		w.tum = nil
	}
}

// add maps results one after the other on the caller's goroutine: post and
// deliver in line, the serial form of what run's pipeline does.
func (w *runWriter) add(results []engine.Result) error {
	for i := range results {
		v, err := w.post(&results[i])
		if err == nil {
			err = w.deliver(&results[i], v)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// posted is what post makes of one result off the model's thread.
type posted struct {
	points               []geom.Point
	clipped, confClipped int64
	depthRange           *render.DepthRange // with --save-depth
	took                 time.Duration
}

// post does a result's own work, in any order and on any goroutine: it
// checks the result, writes its depth, depth preview and confidence
// images, each whole, and unprojects its confident points. It reads only
// settings.
func (w *runWriter) post(r *engine.Result) (posted, error) {
	t := time.Now()
	var v posted
	n := r.Width * r.Height
	if r.Width <= 0 || r.Height <= 0 || len(r.Depth) != n || (r.Conf != nil && len(r.Conf) != n) || (r.RGB != nil && len(r.RGB) != 3*n) {
		return v, fmt.Errorf("frame %d: the engine returned %d depth, %d confidence and %d colour values for a %d×%d image",
			r.Seq, len(r.Depth), len(r.Conf), len(r.RGB), r.Width, r.Height)
	}
	name := fmt.Sprintf("%06d.png", r.Seq)
	if w.o.saveDepth {
		c, err := writeGray16File(filepath.Join(w.o.out, "depth", name), r.Depth, r.Width, r.Height, w.o.depthScale)
		if err != nil {
			return v, err
		}
		v.clipped = int64(c)
		img, dr, err := render.DepthPreview(r.Depth, r.Width, r.Height)
		if err == nil {
			err = atomicfile.WriteFileNoSync(filepath.Join(w.o.out, "depth_color", name), func(f io.Writer) error { return render.EncodePNG(f, img) })
		}
		if err != nil {
			return v, err
		}
		v.depthRange = &dr
	}
	if w.o.saveConf && r.Conf != nil {
		c, err := writeGray16File(filepath.Join(w.o.out, "conf", name), r.Conf, r.Width, r.Height, w.o.confScale)
		if err != nil {
			return v, err
		}
		v.confClipped = int64(c)
	}
	pts, err := w.m.FramePoints(r.DepthFrame())
	if err != nil {
		return v, fmt.Errorf("frame %d: %w", r.Seq, err)
	}
	v.points = pts
	v.took = time.Since(t)
	return v, nil
}

// deliver takes a posted result into the trajectory, the map and the
// counts. Results must come in frame order, on one goroutine at a time.
func (w *runWriter) deliver(r *engine.Result, v posted) error {
	t := time.Now()
	defer func() { w.output += v.took + time.Since(t) }()
	if err := w.m.AddPose(r.Seq, r.Stamp, r.CamToWorld); err != nil {
		return fmt.Errorf("frame %d: the engine returned an unusable pose: %w", r.Seq, err)
	}
	p, _ := w.m.LastPose()
	if err := w.tum.Append(mapio.StampedPose{Time: mapio.Seconds(p.Stamp), T: p.T, Q: p.Q}); err != nil {
		return err
	}
	w.frames.Results++
	switch r.Kind {
	case engine.Scale:
		w.frames.Scale++
	case engine.Keyframe:
		w.frames.Keyframes++
	case engine.NonKeyframe:
		w.frames.NonKeyframes++
	}
	if r.Window != w.window {
		w.window = r.Window
		w.frames.Windows++
	}
	w.depth.Clipped += v.clipped
	w.depth.ConfClipped += v.confClipped
	if v.depthRange != nil {
		w.ranges = append(w.ranges, depthRange{r.Seq, *v.depthRange})
	}
	w.m.AddFramePoints(v.points)
	return nil
}

// writeGray16File writes one 16-bit PNG whole (mapio.WriteFileWhole) and
// returns how many values were clipped.
func writeGray16File(path string, vals []float32, width, height int, scale float64) (int, error) {
	var c int
	err := atomicfile.WriteFileNoSync(path, func(f io.Writer) error {
		var err error
		c, err = render.WriteGray16(f, vals, width, height, scale)
		return err
	})
	return c, err
}

// maybeCheckpoint writes a checkpoint when --checkpoint-every results have
// come since the last one.
func (w *runWriter) maybeCheckpoint(ctx context.Context, rec *runRecord, start time.Time) error {
	if n := w.o.checkpointEvery; n == 0 || w.frames.Results-w.lastCheckpoint < n {
		return nil
	}
	return w.checkpoint(ctx, rec, start, false)
}

// snapshot is what a checkpoint writes, taken between two frames: the
// map's points, the depth ranges and run.json's record as they were then.
type snapshot struct {
	results  int
	status   string
	final    bool
	points   []geom.Point
	comments []string
	ranges   []depthRange
	path     [][3]float64 // camera positions, for the final preview
	rec      runRecord
}

// checkpoint makes what was written so far durable and consistent: the
// trajectory rows and depth images reach the disk, then map.ply,
// ranges.tsv and, last, run.json (which counts the frames they cover) are
// replaced atomically; then the onCheckpoint hook runs. It takes the
// snapshot at once and, but for the final one, writes it on a goroutine of
// its own, so that the model goes on meanwhile; the next checkpoint waits
// for it and returns its error.
func (w *runWriter) checkpoint(ctx context.Context, rec *runRecord, start time.Time, final bool) error {
	if err := w.waitWrite(); err != nil {
		return err
	}
	t := time.Now()
	snap := w.snapshot(rec, start, final)
	w.lastCheckpoint = w.frames.Results
	w.output += time.Since(t)
	if final {
		return w.write(ctx, snap)
	}
	done := make(chan error, 1)
	w.writing = done
	go func() { done <- w.write(context.WithoutCancel(ctx), snap) }()
	return nil
}

// waitWrite waits for the checkpoint being written, if any, and returns
// its error.
func (w *runWriter) waitWrite() error {
	if w.writing == nil {
		return nil
	}
	err := <-w.writing
	w.writing = nil
	return err
}

// snapshot takes what a checkpoint writes from the writer's state.
func (w *runWriter) snapshot(rec *runRecord, start time.Time, final bool) *snapshot {
	w.fillRecord(rec, start)
	s := &snapshot{
		results: w.frames.Results, status: rec.Status, final: final,
		points: w.m.Points(),
		comments: append([]string{
			"lingbotmap " + w.o.version,
			"source " + rec.Input.Path,
			fmt.Sprintf("frames %d", w.frames.Results),
			"frame world = first camera, OpenCV axes (x right, y down, z forward)",
		}, w.m.FilterComments()...),
		// ranges only grows: the rows up to here stay as they are while
		// later frames append
		ranges: w.ranges[:len(w.ranges):len(w.ranges)],
		rec:    *rec,
	}
	if final {
		for _, p := range w.m.Path() {
			s.path = append(s.path, p.T)
		}
	}
	return s
}

// write writes a snapshot's files in the order that keeps them consistent
// on a crash, then runs the onCheckpoint hook.
func (w *runWriter) write(ctx context.Context, s *snapshot) error {
	out := w.o.out
	// the trajectory's rows up to the snapshot (and maybe more) are in the
	// file already; syncfs covers it with the images
	var errs []error
	if w.o.saveDepth || w.o.saveConf {
		errs = append(errs, mapio.SyncFS(out))
	} else {
		errs = append(errs, syncFile(filepath.Join(out, mapio.TrajectoryFile)))
	}
	errs = append(errs, atomicfile.WriteFile(filepath.Join(out, mapio.MapFile), func(f io.Writer) error {
		return mapio.WritePLY(f, s.points, s.comments...)
	}))
	if w.o.saveDepth {
		errs = append(errs, atomicfile.WriteFile(filepath.Join(out, "depth_color", "ranges.tsv"), func(f io.Writer) error {
			fmt.Fprintln(f, "# frame\tnear\tfar (model depth units; depth_color/NNNNNN.png spans near = yellow to far = purple)")
			for _, r := range s.ranges {
				if _, err := fmt.Fprintf(f, "%06d\t%.6g\t%.6g\n", r.seq, r.r.Near, r.r.Far); err != nil {
					return err
				}
			}
			return nil
		}))
	}
	if s.final {
		errs = append(errs, w.writePreview(s.path, s.points))
	}
	// run.json only when the files it describes are whole.
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if err := writeRecordFile(out, &s.rec); err != nil {
		return err
	}
	if w.o.onCheckpoint != nil {
		cp := runCheckpoint{Out: out, Results: s.results, Final: s.final, Status: s.status}
		if err := w.o.onCheckpoint(ctx, cp); err != nil {
			return fmt.Errorf("checkpoint at %d frames: %w", s.results, err)
		}
	}
	return nil
}

// syncFile makes a file's written data durable.
func syncFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", path, err)
	}
	return nil
}

// writePreview draws the trajectory over the map's points into preview.png.
func (w *runWriter) writePreview(positions [][3]float64, pts []geom.Point) error {
	img, err := render.TopView(positions, pts, render.TopViewOptions{
		Title: fmt.Sprintf("%d poses, %d map points (x right, z forward up)", len(positions), len(pts)),
	})
	if err != nil {
		return err
	}
	return writePNGFile(filepath.Join(w.o.out, "preview.png"), img)
}

// fillRecord fills run.json's counts and timings from what was written so
// far.
func (w *runWriter) fillRecord(rec *runRecord, start time.Time) {
	st := w.m.Stats()
	dev, host := w.m.PointFrames()
	rec.Map = runMap{ConfThreshold: w.o.confThreshold, VoxelSize: w.o.voxel, PixelStride: w.o.pixelStride, PointsIn: st.PointsIn, Points: st.Voxels,
		FramesDevice: dev, FramesHost: host}
	rec.Depth = w.depth
	rec.Frames.Results, rec.Frames.Scale, rec.Frames.Keyframes = w.frames.Results, w.frames.Scale, w.frames.Keyframes
	rec.Frames.NonKeyframes, rec.Frames.Windows = w.frames.NonKeyframes, w.frames.Windows
	rec.Outputs = map[string]string{"trajectory": mapio.TrajectoryFile, "map": mapio.MapFile, "preview": "preview.png"}
	if w.o.saveDepth {
		rec.Outputs["depth"] = "depth/"
		rec.Outputs["depth_color"] = "depth_color/"
		rec.Depth.ColorRanges = "depth_color/ranges.tsv"
	}
	if w.o.saveConf {
		rec.Outputs["conf"] = "conf/"
	}
	rec.Finished = time.Now().UTC()
	total := time.Since(start)
	rec.Timings.TotalS = total.Seconds()
	rec.Timings.OutputS = w.output.Seconds()
	rec.Timings.PrepareS = w.prepare.Seconds()
	rec.Timings.MsPerFrame, rec.Timings.FramesPerS, rec.Timings.OverallFramesPS, rec.Timings.ModelFramesPS = 0, 0, 0, 0
	rec.Timings.Medians = w.stages.medians()
	if n := w.frames.Results; n > 0 {
		rec.Timings.MsPerFrame = rec.Timings.ModelS * 1000 / float64(n)
		rec.Timings.OverallFramesPS = float64(n) / total.Seconds()
		if !w.mapStart.IsZero() {
			rec.Timings.MappingS = time.Since(w.mapStart).Seconds()
			rec.Timings.FramesPerS = float64(n-w.resumedResults) / rec.Timings.MappingS
		}
		if rec.Timings.ModelS > 0 {
			rec.Timings.ModelFramesPS = float64(n-w.resumedResults) / rec.Timings.ModelS
		}
	}
}

// writeRecord fills run.json from what was written so far and replaces it
// atomically.
func (w *runWriter) writeRecord(rec *runRecord, start time.Time) error {
	w.fillRecord(rec, start)
	return writeRecordFile(w.o.out, rec)
}

func writeRecordFile(out string, rec *runRecord) error {
	return atomicfile.WriteFile(filepath.Join(out, "run.json"), func(f io.Writer) error {
		e := json.NewEncoder(f)
		e.SetIndent("", "  ")
		return e.Encode(rec)
	})
}

// finish writes the last checkpoint with the run's final status, the
// preview included, and closes the trajectory.
func (w *runWriter) finish(ctx context.Context, rec *runRecord, start time.Time) error {
	// The hook runs even after a cancelled run: it gets a live context.
	err := w.checkpoint(context.WithoutCancel(ctx), rec, start, true)
	if w.tum != nil {
		err = errors.Join(err, w.tum.Close())
		w.tum = nil
	}
	return err
}

// engineRecord lists the engine settings that ran under their keys: the
// arithmetic actually used as the precision (fp32 on the CPU), and the cuda
// section only on the GPU.
func engineRecord(c engine.Config) map[string]any {
	out := config.Values(&c)
	out["precision"] = c.ComputePrecision()
	if c.Device != "cuda" {
		for k := range out {
			if strings.HasPrefix(k, "cuda.") {
				delete(out, k)
			}
		}
	}
	return out
}

// progress reports frames done: a bar on a terminal, log lines otherwise.
type progress interface {
	add(n int)
	finish()
}

func newProgress(o *runOptions, total int, log *slog.Logger) progress {
	if f, ok := o.stderr.(*os.File); ok && !o.noProgress && !o.quiet && term.IsTerminal(int(f.Fd())) {
		bar := progressbar.NewOptions(total,
			progressbar.OptionSetWriter(f),
			progressbar.OptionSetDescription("mapping"),
			progressbar.OptionShowCount(),
			progressbar.OptionShowIts(),
			progressbar.OptionSetItsString("frames"),
			progressbar.OptionSetPredictTime(true),
			progressbar.OptionThrottle(200*time.Millisecond),
			progressbar.OptionSetWidth(30),
		)
		return barProgress{bar, f}
	}
	return &logProgress{log: log, total: total, start: time.Now(), last: time.Now(), every: 5 * time.Second}
}

type barProgress struct {
	bar *progressbar.ProgressBar
	w   io.Writer
}

func (b barProgress) add(n int) { _ = b.bar.Add(n) }
func (b barProgress) finish() {
	_ = b.bar.Finish()
	fmt.Fprintln(b.w)
}

// logProgress writes a progress line every few seconds.
type logProgress struct {
	log         *slog.Logger
	total, done int
	start, last time.Time
	every       time.Duration
}

func (p *logProgress) add(n int) {
	p.done += n
	if time.Since(p.last) < p.every {
		return
	}
	p.last = time.Now()
	el := time.Since(p.start).Seconds()
	fps := float64(p.done) / el
	args := []any{"frames", p.done, "frames_per_s", fmt.Sprintf("%.2f", fps)}
	if p.total > 0 {
		args = append(args, "of", p.total)
		if fps > 0 {
			eta := time.Duration(float64(p.total-p.done) / fps * float64(time.Second))
			args = append(args, "eta", eta.Round(time.Second).String())
		}
	}
	p.log.Info("progress", args...)
}

func (p *logProgress) finish() {}

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
