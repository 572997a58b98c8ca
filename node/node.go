// Package node is the LingBot-Map mapping node's core, free of any
// middleware: it takes camera images from a Transport, runs them through
// engine/pipeline's staged frame path (decoding ahead of the model, message
// building behind it, bounded hand-offs), and hands poses, the path, odometry,
// point clouds, the accumulated map, depth images, TF and diagnostics back to
// the Transport as plain message values, with services to reset, pause,
// resume and save the map. The ROS 1 transport is package node/ros1; the
// command picks one and composes it with the core.
package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bluenviron/goroslib/v2/pkg/msgs/std_msgs"

	"github.com/lingbotmap/lingbotmap/engine"
	"github.com/lingbotmap/lingbotmap/engine/geom"
	"github.com/lingbotmap/lingbotmap/engine/mapframe"
	"github.com/lingbotmap/lingbotmap/engine/mapio"
	"github.com/lingbotmap/lingbotmap/engine/pipeline"
	"github.com/lingbotmap/lingbotmap/node/tf"
)

// StreamFactory builds the engine once the configuration is final
// (parameters can change engine settings).
type StreamFactory func(ctx context.Context, cfg Config) (engine.Stream, error)

// Options are what Run needs.
type Options struct {
	Config Config
	// Transport is the middleware; Run connects it and closes it when done.
	Transport Transport
	// NewStream builds the engine; the node closes the stream when it ends.
	NewStream StreamFactory
	// Resume, when set, is a save_dir whose saved session (~save_session)
	// the node starts from, with ResumeStream building the engine from it.
	Resume       string
	ResumeStream ResumeFactory
	// Log defaults to slog.Default().
	Log *slog.Logger
	// Abort, when closed while the node stops, gives up the frames still
	// in the pipeline: the model stops at its next step (a second Ctrl-C).
	Abort <-chan struct{}
	// Observe, when set, is told of every frame the node finished with, in
	// frame order, on the delivering goroutine (benchmarks, tests). It must
	// return quickly.
	Observe func(FrameReport)
}

// Node is one running lingbotmap node.
type Node struct {
	cfg       Config
	tr        Transport
	log       *slog.Logger
	newStream StreamFactory

	// stream is called only by the pipeline (pipe.Do for the services)
	// once the pipeline runs.
	stream engine.Stream
	// cur is the stream the pipeline drives (statStream): stream, read
	// also by the pipeline's prepare workers; ~load_map swaps both.
	cur  atomic.Pointer[engine.Stream]
	pipe *pipeline.Pipeline[std_msgs.Header]
	sink *publisher
	// held are the headers of the frames a resumed engine holds, for the
	// pipeline (session.go)
	held    []pipeline.Held[std_msgs.Header]
	observe func(FrameReport)
	// baseToCam is base_to_camera, the fallback camera pose in base_frame;
	// nil when unset
	baseToCam *[4][4]float64
	// frame is the map frame (REP 103/105) over the engine's world; the
	// trajectory and the voxel map stay in the engine's world and every
	// output converts through it
	frame *mapframe.Frame
	// tfl holds the robot's TF tree (tfio.go); lastBaseCam is the last
	// base → camera it gave (the early goroutine's)
	tfl *tfListener
	// lastMapOdom is the last map → odom sent, re-published at
	// tf_publish_rate (publisher.go)
	lastMapOdom lastTF
	// scale is the metric scale's component (scale.go); nil without a
	// source
	scale       *nodeScale
	lastBaseCam *geom.Mat4
	paused      atomic.Bool
	nextSeq     atomic.Uint64
	firstSeq    uint64   // nextSeq when the pipeline started (a resumed session's)
	notices     sync.Map // kinds of lossy input already reported (noticeOnce)
	out         outputs  // opened once in Run before any loop starts

	// saved sessions (session.go)
	resume       string
	resumeStream ResumeFactory
	// stepsSinceSave counts delivered results for session_save_every (the
	// delivering goroutine only); saveNow asks sessionLoop for a save.
	stepsSinceSave int
	saveNow        chan struct{}
	// abort is Options.Abort.
	abort <-chan struct{}

	// pubMu keeps ~map and ~path publications whole and in order (a reset's
	// empty map never overtaken by an older one).
	pubMu sync.Mutex

	mu        sync.Mutex // guards the map state and the counters below
	m         *mapio.Map // the trajectory and the voxel map
	lastStamp time.Time  // of the newest pose, for ~map; zero after ~reset
	mapDirty  bool
	pathDirty bool
	lastMap   time.Time
	size      [2]int // input size the stream started with; 0 until the first frame
	stats     counters
	// live holds the settings as they are now: the dynamic ones change
	// through SetParams (params.go) while the node runs.
	live liveSettings
	// cacheStats is the engine's last Stats(), stored after each frame so
	// that diagnostics never wait for the model; atomic, so that the model's
	// thread never waits for mu, which the in-order step holds while it maps.
	cacheStats atomic.Pointer[engine.CacheStats]
}

// New checks the options; Run does the work.
func New(opts Options) (*Node, error) {
	if opts.NewStream == nil {
		return nil, errors.New("node: no engine (NewStream is nil)")
	}
	if opts.Transport == nil {
		return nil, errors.New("node: no transport (Transport is nil)")
	}
	if err := opts.Config.Validate(); err != nil {
		return nil, err
	}
	log := opts.Log
	if log == nil {
		log = slog.Default()
	}
	nd := &Node{
		cfg:       opts.Config,
		tr:        opts.Transport,
		log:       log.With("node", opts.Transport.FullName()),
		newStream: opts.NewStream,
		observe:   opts.Observe,
		saveNow:   make(chan struct{}, 1),
		frame:     mapframe.New(),
		tfl:       newTFListener(),
	}
	nd.resume, nd.resumeStream = opts.Resume, opts.ResumeStream
	nd.abort = opts.Abort
	sc, err := newNodeScale(nd.cfg.Scale, nd.frame)
	if err != nil {
		return nil, err
	}
	if sc != nil {
		sc.odomTF, sc.lookup = tf.Name(nd.cfg.OdomFrame), nd.tfl.buf.Lookup
	}
	nd.scale = sc
	nd.stats.init()
	if err := nd.live.init(nd.cfg); err != nil {
		return nil, err
	}
	return nd, nil
}

// Run starts the engine, connects the transport (waiting for the ROS graph
// if needed), applies its parameters (restarting the engine if they change
// its settings) and serves until ctx ends or the middleware asks the node to
// shut down (rosnode kill). It then processes what is queued, flushes the
// engine, publishes the final map and closes the transport. Run is called
// once per Node.
func (n *Node) Run(ctx context.Context) error {
	// The engine starts before the node waits for the ROS graph, so a bad
	// weights file or setting is reported at once, not once a master answers.
	if err := engine.CheckInputSize(n.cfg.Engine.ImageWidth, minInputSide); err != nil {
		return fmt.Errorf("node: 'image_width': %w", err)
	}
	built := n.cfg
	if n.resume == "" {
		st, err := n.newStream(ctx, built)
		if err != nil {
			return fmt.Errorf("node: starting the engine: %w", err)
		}
		n.stream = st
	} else if _, err := os.Stat(filepath.Join(n.resume, SessionDir, SessionFile)); err != nil {
		return fmt.Errorf("node: resume: %w", err)
	}
	defer func() {
		if n.stream == nil {
			return
		}
		if err := n.stream.Close(); err != nil {
			n.log.Warn("closing the engine", "err", err)
		}
	}()
	if err := n.tr.Connect(ctx); err != nil {
		if ctx.Err() != nil {
			n.log.Info("stopped before the ROS graph answered")
			return nil
		}
		return fmt.Errorf("node: %w", err)
	}
	defer func() {
		t := time.Now()
		if err := n.tr.Close(); err != nil {
			n.log.Warn("leaving the ROS graph", "err", err)
		}
		n.log.Info("stopped: left the ROS graph", "took", time.Since(t).Round(time.Millisecond))
	}()
	cfg, taken, err := ApplyParams(n.cfg, n.tr.Params())
	if err != nil {
		return fmt.Errorf("node: %w", err)
	}
	if len(taken) > 0 {
		n.log.Info("parameters override the configuration", "keys", strings.Join(taken, ","))
	}
	n.cfg = cfg
	if err := n.live.init(cfg); err != nil {
		return fmt.Errorf("node: %w", err)
	}
	if err := n.setup(ctx); err != nil {
		return err
	}
	if n.resume == "" && !sameEngine(built, cfg) {
		n.log.Info("parameters change the engine's settings: restarting it")
		old := n.stream
		n.stream = nil
		if err := old.Close(); err != nil {
			n.log.Warn("closing the engine", "err", err)
		}
		st, err := n.newStream(ctx, cfg)
		if err != nil {
			return fmt.Errorf("node: starting the engine: %w", err)
		}
		n.stream = st
	}

	if err := n.tellPoints(); err != nil {
		return err
	}
	// The pipeline outlives ctx: finish closes it, flushing what is queued.
	pipeCtx, stopPipe := context.WithCancel(context.WithoutCancel(ctx))
	defer stopPipe()
	if err := n.startPipeline(pipeCtx); err != nil {
		return err
	}
	// Callbacks may block on a full queue (policy all): runCtx releases
	// them when the node stops.
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	if err := n.advertise(); err != nil {
		n.pipe.Close(pipeCtx)
		return err
	}
	// the TF tree first, so that the first frame finds what is latched
	tfSubs, err := n.listenTF()
	if err != nil {
		n.pipe.Close(pipeCtx)
		return err
	}
	if n.scale != nil {
		// the robot's odometry or depth topic, before the images
		scaleSubs, err := n.scale.subscribe(n.tr)
		if err != nil {
			closeAll(tfSubs)
			n.pipe.Close(pipeCtx)
			return err
		}
		tfSubs = append(tfSubs, scaleSubs...)
	}
	n.waitBaseCamera(runCtx)
	inputs, err := n.subscribe(runCtx)
	if err != nil {
		closeAll(tfSubs)
		n.pipe.Close(pipeCtx)
		return err
	}
	inputs = append(inputs, tfSubs...)
	services, err := n.serve()
	if err != nil {
		closeAll(inputs)
		n.pipe.Close(pipeCtx)
		return err
	}
	if ps, ok := n.tr.(ParamServer); ok {
		c, err := ps.ServeParams(n)
		if err != nil {
			closeAll(inputs)
			closeAll(services)
			n.pipe.Close(pipeCtx)
			return fmt.Errorf("node: serving parameters: %w", err)
		}
		services = append(services, c)
	}
	n.log.Info("node running", "image", n.tr.Resolve("image"),
		"transport", n.cfg.ImageTransport, "queue", n.cfg.QueueSize, "policy", n.cfg.QueuePolicy,
		"windowed", n.cfg.Engine.Windowed)

	var wg sync.WaitGroup
	wg.Add(4)
	go func() { defer wg.Done(); n.tfLoop(runCtx) }()
	go func() { defer wg.Done(); n.sessionLoop(runCtx) }()
	go func() { defer wg.Done(); n.mapLoop(runCtx) }()
	go func() { defer wg.Done(); n.diagnosticsLoop(runCtx) }()

	select {
	case <-ctx.Done():
		n.log.Info("stopping", "reason", context.Cause(ctx))
	case <-n.tr.Shutdown():
		n.log.Info("stopping: the middleware asked this node to shut down")
	}
	cancel()
	closeAll(inputs)
	closeAll(services)
	wg.Wait()
	n.finish(stopPipe)
	return nil
}

func closeAll(cs []io.Closer) {
	for _, c := range cs {
		c.Close()
	}
}

// setup builds what depends on the final configuration.
// tellPoints gives the engine the map's point filter, so that a GPU makes
// the keyframes' points where their depth maps are (engine.PointMaker);
// the map unprojects the rest itself.
func (n *Node) tellPoints() error {
	pm, ok := n.stream.(engine.PointMaker)
	if !ok {
		return nil
	}
	dev, err := pm.MakePoints(n.m.Config().Filter, true)
	if err != nil {
		return fmt.Errorf("node: %w", err)
	}
	n.log.Info("keyframe points", "on_device", dev)
	return nil
}

func (n *Node) setup(ctx context.Context) error {
	if n.cfg.BaseToCamera != "" {
		m, err := geom.ParseTransform(n.cfg.BaseToCamera)
		if err != nil {
			return fmt.Errorf("node: parameter 'base_to_camera': %w", err)
		}
		n.baseToCam = &m
		if n.scale != nil {
			n.scale.baseToCam = &m
		}
	}
	var err error
	n.m, err = mapio.NewMap(mapio.MapConfig{
		VoxelSize: n.cfg.MapVoxel,
		Filter:    geom.PointFilter{ConfThreshold: n.cfg.ConfThreshold, Stride: n.cfg.CloudStride},
		MaxPoses:  n.cfg.MaxPathLength,
	})
	if err != nil {
		return fmt.Errorf("node: %w", err)
	}
	if n.resume != "" {
		// A resumed engine needs the map (restored with it), so it starts here.
		st, err := n.resumeSession(ctx, n.resume)
		if err != nil {
			return fmt.Errorf("node: starting the engine: %w", err)
		}
		n.stream = st
	}
	return nil
}

// minInputSide is the smallest model input side: one patch.
const minInputSide = 14

// sameEngine says whether a and b build the same engine: the engine's
// settings and the replay case, which are all a StreamFactory reads.
func sameEngine(a, b Config) bool {
	return reflect.DeepEqual(a.Engine, b.Engine) && a.Replay == b.Replay
}

// finish runs after the loops stopped: the frames still queued go through
// the engine, the engine is flushed, and the final map and path are
// published; Abort cuts that short (stopModel ends the pipeline's
// context, which the engine checks between blocks).
func (n *Node) finish(stopModel context.CancelFunc) {
	// said before the wait, which a phase 1 in progress makes long (the
	// model runs on its frames together)
	st := n.pipe.Stats()
	msg := "stopping: mapping the frames still in the pipeline, then publishing the final map and path"
	if n.abort != nil {
		msg += " (stop again to skip them)"
	}
	n.log.Info(msg, "queued", st.Queued, "in_flight", st.Waiting)
	t := time.Now()
	done := make(chan struct{})
	defer close(done)
	var aborted atomic.Bool
	if n.abort != nil {
		go func() {
			select {
			case <-n.abort:
				aborted.Store(true)
				n.log.Warn("stopping now: the frames still in the pipeline are not mapped")
				stopModel()
			case <-done:
			}
		}()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := n.pipe.Close(ctx); err != nil && !aborted.Load() {
		n.log.Warn("finishing the frames in the pipeline", "err", err)
	}
	_ = n.sink.Close(ctx)
	n.log.Info("stopping: the engine is done; leaving the ROS graph", "took", time.Since(t).Round(time.Millisecond))
}

// compressedTopic follows image_transport: "<image>/compressed" after the
// image topic's remap, unless image/compressed is remapped itself (it then
// resolves to something other than its plain name in the node's namespace).
func (n *Node) compressedTopic() string {
	plain := path.Join(path.Dir(n.tr.FullName()), "image/compressed")
	if c := n.tr.Resolve("image/compressed"); c != plain {
		return c
	}
	return n.tr.Resolve("image") + "/compressed"
}
