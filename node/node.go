// Package node is the LingBot-Map ROS 1 node: it subscribes to a camera's
// images, feeds them through a bounded queue to an engine.Stream, and
// publishes poses, the path, odometry, point clouds, the accumulated map,
// depth images, TF and diagnostics, with services to reset, pause, resume and
// save the map. It speaks ROS 1 through goroslib and re-registers by itself
// when the master restarts.
package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bluenviron/goroslib/v2"
	"github.com/bluenviron/goroslib/v2/pkg/apimaster"

	"github.com/lingbotmap/lingbotmap/config"
	"github.com/lingbotmap/lingbotmap/engine"
	"github.com/lingbotmap/lingbotmap/engine/mapio"
)

// StreamFactory builds the engine once the configuration is final (ROS
// parameters can change engine settings).
type StreamFactory func(ctx context.Context, cfg Config) (engine.Stream, error)

// Options are what Run needs.
type Options struct {
	Config Config
	ROS    ROSEnv
	// NewStream builds the engine; the node closes the stream when it ends.
	NewStream StreamFactory
	// Log defaults to slog.Default().
	Log *slog.Logger
}

// Node is one running lingbotmap node.
type Node struct {
	cfg       Config
	ros       ROSEnv
	log       *slog.Logger
	newStream StreamFactory

	stream    engine.Stream
	engineMu  sync.Mutex // serialises calls into stream
	queue     *frameQueue
	baseToCam *[4][4]float64 // camera pose in base_frame, nil without base_frame
	paused    atomic.Bool
	nextSeq   atomic.Uint64

	mu       sync.Mutex // guards the map state and the counters below
	path     []poseRecord
	grid     *mapio.VoxelGrid
	mapDirty bool
	lastMap  time.Time
	size     [2]int            // input size the stream started with; 0 until the first frame
	frameIDs map[uint64]string // header frame ids of frames inside the engine
	stats    counters
	// cacheStats is the engine's last Stats(), read after each frame so that
	// diagnostics never wait for the model.
	cacheStats engine.CacheStats

	sessMu sync.RWMutex
	sess   *session

	killed     chan struct{} // closed when the master asks us to shut down
	killedOnce sync.Once
}

// poseRecord is one trajectory entry, kept for ~path and ~save_map.
type poseRecord struct {
	seq   uint64
	stamp time.Time
	c2w   [4][4]float64
}

// New checks the options; Run does the work.
func New(opts Options) (*Node, error) {
	if opts.NewStream == nil {
		return nil, errors.New("node: no engine (NewStream is nil)")
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
		ros:       opts.ROS,
		log:       log.With("node", opts.ROS.FullName()),
		newStream: opts.NewStream,
		frameIDs:  map[uint64]string{},
		killed:    make(chan struct{}),
	}
	nd.stats.init()
	return nd, nil
}

// Run connects to the master (waiting for it if needed), applies the ROS
// private parameters, starts the engine and serves until ctx ends or the
// master asks the node to shut down (rosnode kill). It then processes what
// is queued, flushes the engine, publishes the final map and unregisters.
// Run is called once per Node.
func (n *Node) Run(ctx context.Context) error {
	gn, err := n.dial(ctx)
	if err != nil {
		if ctx.Err() != nil {
			n.log.Info("stopped before the ROS master answered")
			return nil
		}
		return err
	}
	cfg, taken, err := ApplyParams(n.cfg, rosParams{gn, n.ros})
	if err != nil {
		gn.Close()
		return fmt.Errorf("node: %w", err)
	}
	if len(taken) > 0 {
		n.log.Info("ROS parameters override the configuration", "keys", strings.Join(taken, ","))
	}
	n.cfg = cfg
	if err := n.setup(ctx); err != nil {
		gn.Close()
		return err
	}
	defer func() {
		if err := n.stream.Close(); err != nil {
			n.log.Warn("closing the engine", "err", err)
		}
	}()
	sess, err := n.attach(gn)
	if err != nil {
		gn.Close()
		return err
	}
	n.setSession(sess)
	n.log.Info("node running", "master", n.ros.MasterAddress, "image", n.topic("image"),
		"transport", n.cfg.ImageTransport, "queue", n.cfg.QueueSize, "policy", n.queue.policy)

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	wg.Add(4)
	go func() { defer wg.Done(); n.engineLoop(runCtx) }()
	go func() { defer wg.Done(); n.mapLoop(runCtx) }()
	go func() { defer wg.Done(); n.diagnosticsLoop(runCtx) }()
	go func() { defer wg.Done(); n.watchMaster(runCtx) }()

	select {
	case <-ctx.Done():
		n.log.Info("stopping", "reason", context.Cause(ctx))
	case <-n.killed:
		n.log.Info("stopping: the ROS master asked this node to shut down")
	}
	cancel()
	wg.Wait()
	if n.finish() > 0 {
		// goroslib drops what is still queued for a subscriber when a
		// publisher closes; give the last messages a moment to leave.
		time.Sleep(200 * time.Millisecond)
	}
	n.setSession(nil)
	return nil
}

// setup builds what depends on the final configuration.
func (n *Node) setup(ctx context.Context) error {
	pol, err := ParsePolicy(n.cfg.QueuePolicy)
	if err != nil {
		return fmt.Errorf("node: %w", err)
	}
	n.queue = newFrameQueue(n.cfg.QueueSize, pol)
	if n.cfg.BaseFrame != "" {
		m, err := ParseTransform(n.cfg.BaseToCamera)
		if err != nil {
			return fmt.Errorf("node: parameter 'base_to_camera': %w", err)
		}
		n.baseToCam = &m
	}
	n.grid = mapio.NewVoxelGrid(n.cfg.MapVoxel)
	st, err := n.newStream(ctx, n.cfg)
	if err != nil {
		return fmt.Errorf("node: starting the engine: %w", err)
	}
	n.stream = st
	return nil
}

// finish runs after the loops stopped: the frames still queued go through
// the engine, the engine is flushed, and the final map is published. It
// returns the number of results published.
func (n *Node) finish() int {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	before := n.stats.processed.Load()
	for {
		qf, ok := n.queue.TryPop()
		if !ok {
			break
		}
		n.process(ctx, qf)
	}
	n.engineMu.Lock()
	res, err := n.stream.Flush(ctx)
	n.engineMu.Unlock()
	if err != nil {
		n.log.Warn("flushing the engine", "err", err)
	}
	for _, r := range res {
		n.publishResult(r)
	}
	n.publishMap(true)
	return int(n.stats.processed.Load() - before)
}

// dial creates a goroslib node, retrying until the master answers or ctx ends.
func (n *Node) dial(ctx context.Context) (*goroslib.Node, error) {
	for attempt := 0; ; attempt++ {
		gn, err := goroslib.NewNode(goroslib.NodeConf{
			Name:            n.ros.Name,
			Namespace:       n.ros.Namespace,
			MasterAddress:   n.ros.MasterAddress,
			Host:            n.ros.Host,
			LogDestinations: goroslib.LogDestinationRosout | goroslib.LogDestinationCallback,
			OnLog:           n.onRosLog,
		})
		if err == nil {
			return gn, nil
		}
		if attempt%20 == 0 {
			n.log.Warn("cannot register with the ROS master; retrying", "master", n.ros.MasterAddress, "err", err)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("node: gave up reaching the ROS master at %s: %w", n.ros.MasterAddress, ctx.Err())
		case <-n.killed:
			return nil, errors.New("node: shut down by the ROS master")
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// onRosLog forwards goroslib's log to slog and catches the shutdown request
// that `rosnode kill` (or a node taking our name) sends: goroslib v2.1.5
// cancels itself then but offers no other signal.
func (n *Node) onRosLog(level goroslib.LogLevel, msg string) {
	if strings.HasPrefix(msg, "got shutdown request") {
		n.killedOnce.Do(func() { close(n.killed) })
	}
	// Errors included: goroslib reports routine events, such as a bag player
	// going away, as errors, so they stay at debug level here.
	n.log.Debug("goroslib", "level", int(level), "msg", msg)
}

// watchMaster asks the master every MasterCheckInterval whether it still
// knows this node. A restarted master has forgotten every registration and
// goroslib does not notice, so the node then rebuilds its whole session.
func (n *Node) watchMaster(ctx context.Context) {
	client := apimaster.NewClient(n.ros.MasterAddress, n.ros.FullName(), &http.Client{Timeout: 2 * time.Second})
	tick := time.NewTicker(time.Duration(n.cfg.MasterCheckInterval * float64(time.Second)))
	defer tick.Stop()
	lost := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if _, err := client.LookupNode(n.ros.FullName()); err == nil {
			continue
		} else if !lost {
			lost = true
			n.log.Warn("the ROS master no longer knows this node (master restarted or unreachable); re-registering", "err", err)
		}
		n.setSession(nil)
		gn, err := n.dial(ctx)
		if err != nil {
			return
		}
		sess, err := n.attach(gn)
		if err != nil {
			n.log.Warn("re-registering with the ROS master", "err", err)
			gn.Close()
			continue
		}
		n.setSession(sess)
		n.stats.reconnects.Add(1)
		lost = false
		n.log.Info("re-registered with the ROS master", "master", n.ros.MasterAddress)
		n.republishLatched()
	}
}

// setSession swaps the current session and closes the old one.
func (n *Node) setSession(s *session) {
	n.sessMu.Lock()
	old := n.sess
	n.sess = s
	n.sessMu.Unlock()
	if old != nil {
		old.close()
	}
}

// withSession runs f with the current session, if there is one.
func (n *Node) withSession(f func(s *session)) {
	n.sessMu.RLock()
	defer n.sessMu.RUnlock()
	if n.sess != nil {
		f(n.sess)
	}
}

// topic resolves a graph name against the node's namespace, name and remaps.
func (n *Node) topic(name string) string { return n.ros.Resolve(name) }

// compressedTopic follows image_transport: "<image>/compressed" after the
// image topic's remap, unless image/compressed is remapped itself.
func (n *Node) compressedTopic() string {
	if to, ok := n.ros.Remaps[n.ros.resolveNoRemap("image/compressed")]; ok {
		return to
	}
	return n.topic("image") + "/compressed"
}

// engineLoop feeds queued frames to the engine until ctx ends.
func (n *Node) engineLoop(ctx context.Context) {
	for {
		qf, err := n.queue.Pop(ctx)
		if err != nil {
			return
		}
		n.process(ctx, qf)
	}
}

// process runs one frame through the engine and publishes what comes out.
func (n *Node) process(ctx context.Context, qf queuedFrame) {
	n.mu.Lock()
	n.frameIDs[qf.frame.Seq] = qf.frameID
	n.mu.Unlock()
	t0 := time.Now()
	n.engineMu.Lock()
	res, err := n.stream.Push(ctx, qf.frame)
	st := n.stream.Stats()
	n.engineMu.Unlock()
	n.mu.Lock()
	n.cacheStats = st
	n.mu.Unlock()
	dt := time.Since(t0)
	if err != nil {
		if ctx.Err() != nil {
			return
		}
		n.stats.engineErrors.Add(1)
		if errors.Is(err, engine.ErrCacheFull) {
			// every later frame fails the same way until ~reset: say it once
			if n.stats.cacheFull.CompareAndSwap(false, true) {
				n.log.Error("the KV cache is full: no more frames are mapped until ~reset; use windowed mode, a keyframe interval or flow keyframes for long runs", "seq", qf.frame.Seq, "err", err)
			}
		} else {
			n.log.Error("the engine failed on a frame; skipping it", "seq", qf.frame.Seq, "err", err)
		}
		n.mu.Lock()
		delete(n.frameIDs, qf.frame.Seq)
		n.mu.Unlock()
		return
	}
	n.stats.recordModelTime(dt)
	for _, r := range res {
		n.publishResult(r)
	}
}

// reset starts a new map: engine caches, queue, path, map and input size.
func (n *Node) reset() error {
	n.engineMu.Lock()
	err := n.stream.Reset()
	n.engineMu.Unlock()
	n.stats.cacheFull.Store(false)
	drained := n.queue.Drain()
	n.mu.Lock()
	n.path = nil
	n.grid.Reset()
	n.mapDirty = true
	n.size = [2]int{}
	clear(n.frameIDs)
	n.mu.Unlock()
	n.log.Info("map reset", "dropped_queued_frames", drained)
	n.publishMap(true)
	n.publishPath()
	if err != nil {
		return fmt.Errorf("resetting the engine: %w", err)
	}
	return nil
}

// rosParams adapts a goroslib node to ParamSource. goroslib v2.1.5 rejects
// the master's answer for "~x" keys (the master echoes the resolved name), so
// private names are resolved here first.
type rosParams struct {
	n   *goroslib.Node
	ros ROSEnv
}

func (p rosParams) key(k string) string               { return p.ros.resolveNoRemap(config.ParamName(k)) }
func (p rosParams) ParamName(k string) string         { return config.ParamName(k) }
func (p rosParams) IsSet(k string) (bool, error)      { return p.n.ParamIsSet(p.key(k)) }
func (p rosParams) Bool(k string) (bool, error)       { return p.n.ParamGetBool(p.key(k)) }
func (p rosParams) Int(k string) (int, error)         { return p.n.ParamGetInt(p.key(k)) }
func (p rosParams) Float64(k string) (float64, error) { return p.n.ParamGetFloat64(p.key(k)) }
func (p rosParams) String(k string) (string, error)   { return p.n.ParamGetString(p.key(k)) }
