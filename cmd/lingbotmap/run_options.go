package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"

	"github.com/spf13/pflag"

	"github.com/lingbotmap/lingbotmap/config"
	"github.com/lingbotmap/lingbotmap/engine"
	"github.com/lingbotmap/lingbotmap/engine/geom"
	"github.com/lingbotmap/lingbotmap/engine/mapio"
	"github.com/lingbotmap/lingbotmap/engine/output"
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
	// offline, a frame's results one call later cost nothing, and the
	// GPU no longer waits for the host between frames
	d.Engine.OverlapFrames = true
	return d
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

// bindFlags binds run's settings (the schema's, as flags) and its own
// flags; an error binding the settings is returned when the command runs.
func (o *runOptions) bindFlags(f *pflag.FlagSet) error {
	var err error
	o.settings, err = bindSettings(f, runDefaults(), runSettings())
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
	return err
}

// useSettings takes the loaded settings into the options and says whether
// the keyframe interval is left to the input's length.
func (o *runOptions) useSettings(all node.Config, src config.Sources) (autoKF bool) {
	o.cfg, o.sources = all.Engine, src
	o.scale, o.cameraFrame, o.baseFrame, o.baseToCamera, o.odomFrame = all.Scale, all.CameraFrame, all.BaseFrame, all.BaseToCamera, all.OdomFrame
	o.confThreshold, o.voxel, o.pixelStride = all.ConfThreshold, all.MapVoxel, all.CloudStride
	out := all.Output
	o.saveDepth, o.saveConf, o.depthScale, o.confScale, o.checkpointEvery = out.SaveDepth, out.SaveConf, out.DepthScale, out.ConfScale, out.CheckpointEvery
	// The reference's default: one keyframe in ⌈N/320⌉ for long
	// streaming runs, unless the user chose.
	return !src.Given("keyframe_interval") && !src.Given("flow_threshold") && !o.cfg.Windowed
}

// settle takes a resumed session's settings (refusing flags that differ
// from them), sets the session cadence and checks the options. autoKF is
// false for a resume: the saved settings already hold the chosen interval.
func (o *runOptions) settle(autoKF bool, log *slog.Logger) (bool, error) {
	if o.session.resume != "" {
		if err := o.session.load(o, log); err != nil {
			return false, err
		}
		autoKF = false
	}
	if o.saveSessions || o.session.resume != "" {
		// A resumed run keeps saving its session, so it can be resumed again.
		o.session.every = o.checkpointEvery
	}
	if err := errors.Join(o.validate(), o.src.Validate()); err != nil {
		return false, &exitCodeError{code: exitUsage, err: err}
	}
	return autoKF, nil
}
