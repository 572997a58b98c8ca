package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lingbotmap/lingbotmap/engine/backend"
	"github.com/lingbotmap/lingbotmap/engine/geom"
	"github.com/lingbotmap/lingbotmap/engine/model"
	"github.com/lingbotmap/lingbotmap/engine/preprocess"
	"github.com/lingbotmap/lingbotmap/engine/weights"
)

// ErrCacheFull is returned by a streaming (non-windowed) Stream once the number
// of committed frames reaches MaxFrames: the 3D RoPE table and the special-token
// pool are sized for that many. Use windowed mode or a larger keyframe interval
// for longer runs, or Reset.
var ErrCacheFull = errors.New("engine: KV cache full")

// BackendFactory starts the backend a configuration names (cfg.Device,
// cfg.Threads, cfg.Precision). The program that composes the engine chooses
// the backends; the engine imports none of them.
type BackendFactory func(cfg Config) (backend.Backend, error)

// New builds a Stream from cfg: loads the checkpoint (or makes a random model),
// starts the backend with newBackend and sizes the caches. The stream owns
// the backend and closes it (when it is an io.Closer) with itself.
func New(ctx context.Context, cfg Config, newBackend BackendFactory, log *slog.Logger) (Stream, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("engine: invalid config: %w", err)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	store, err := openWeights(cfg)
	if err != nil {
		return nil, err
	}
	defer store.Close()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if newBackend == nil {
		return nil, errors.New("engine: no backend factory")
	}
	be, err := newBackend(cfg)
	if err != nil {
		return nil, fmt.Errorf("engine: %w", err)
	}
	m, err := model.Load(be, store, model.Options{
		ScaleFrames:      cfg.ScaleFrames,
		SlidingWindow:    cfg.SlidingWindow,
		MaxFrames:        cfg.MaxFrames,
		CameraIterations: cfg.CameraIterations,
		CacheHeadroom:    cfg.CacheHeadroom,
		SelectedLayers:   cfg.SelectedLayers,
		Log:              log,
	})
	if err != nil {
		if c, ok := be.(io.Closer); ok {
			c.Close()
		}
		return nil, fmt.Errorf("engine: %w", err)
	}
	id, err := weightsFingerprint(cfg, store)
	if err != nil {
		m.Close()
		if c, ok := be.(io.Closer); ok {
			c.Close()
		}
		return nil, err
	}
	log.Info("model ready", "backend", be.Name(), "capabilities", backend.Capabilities(be, nil), "weights", weightsName(cfg))
	s := newStream(cfg, log, be, m)
	s.weightsID = id
	return s, nil
}

func weightsName(cfg Config) string {
	if cfg.Weights != "" {
		return cfg.Weights
	}
	return fmt.Sprintf("random %s model (seed %d)", cfg.ModelSize, cfg.Seed)
}

// openWeights opens the checkpoint, or makes the random model of cfg.ModelSize.
func openWeights(cfg Config) (weights.Store, error) {
	if cfg.Weights != "" {
		s, err := weights.Open(cfg.Weights)
		if err != nil {
			return nil, fmt.Errorf("engine: %w", err)
		}
		// the whole key set at once: missing, extra and mis-shaped keys by name
		if _, err := weights.Check(s); err != nil {
			s.Close()
			return nil, fmt.Errorf("engine: checkpoint %s: %w", cfg.Weights, err)
		}
		return s, nil
	}
	arch := weights.TinyArch()
	if cfg.ModelSize == "full" {
		arch = weights.FullArch()
	}
	return weights.Random(arch, cfg.Seed), nil
}

// input is a preprocessed frame.
type input struct {
	seq   uint64
	stamp time.Time
	pix   []float32
	rgb   *rgbJob
}

// rgbJob converts a frame's pixels to the 8-bit colours of its Result in a
// goroutine, so that on a GPU the conversion overlaps the frame's model run
// instead of following it.
type rgbJob struct {
	done chan struct{}
	rgb  []uint8
}

func startRGB(pix []float32) *rgbJob {
	j := &rgbJob{done: make(chan struct{})}
	go func() {
		j.rgb = preprocess.ToRGB8(pix)
		close(j.done)
	}()
	return j
}

// doneRGB is the job for colours made already (Prepare), or nil when there
// are none to match pix.
func doneRGB(rgb []uint8, pix []float32) *rgbJob {
	if rgb == nil || len(rgb) != len(pix) {
		return nil
	}
	j := &rgbJob{done: make(chan struct{}), rgb: rgb}
	close(j.done)
	return j
}

// get waits for the colours; results share them read-only.
func (j *rgbJob) get() []uint8 {
	<-j.done
	return j.rgb
}

// window is the state of one cache lifetime: from a reset to the next.
type window struct {
	index  int
	scaleN int     // scale frames of this window
	buf    []input // phase-1 buffer
	n      int     // frames processed
	kfs    int     // keyframes committed after phase 1
	lastKF [9]float32
	lastKn int // local index of the last keyframe

	// windowed mode
	sim     geom.Similarity
	aligned bool
	raw     []Result // results not yet aligned (windows after the first)
	tail    []input  // reference mode: the last Overlap inputs, re-run by the next window
	rerun   int      // leading frames that re-run the previous window's frames
	gap     int      // live windows: overlap frames after the re-runs that this window did not run
}

type stream struct {
	cfg Config
	log *slog.Logger
	be  backend.Backend
	m   *model.Model

	weightsID string // the checkpoint's fingerprint, for session state files

	h, w     int // model resolution, fixed by the first frame
	pre      preprocess.Preprocessor
	prePool  sync.Pool // of *preprocess.Preprocessor, for Prepare
	framesIn int64
	win      *window
	flowDecs int // flow keyframe decisions so far, for Config.Decide

	// windowed mode
	held     []Result // reference: results that a next window may still replace; live: the last Overlap results emitted
	recent   []input  // live: the last Overlap inputs pushed, whichever window ran them
	prevTail *geom.WindowFrames
	sims     []geom.Similarity
	closed   bool

	// live windows (warmup.go): the next window warming up, the model state
	// it takes when none is (a fork of the first), the last Push's
	// background work, and a test hook that switches the early start off
	next          *warmup
	spare         *model.Model
	bg            WarmupStats
	idle          WarmupStats // Idle's steps since the last Push
	idleErr       error       // a failed Idle step, for the next Push
	serialWindows bool

	// device points (points.go): what MakePoints asked for, the maps kept
	// during the current Push, and the frames given points so far
	points       *pointRequest
	kept         []*devMaps
	devicePoints atomic.Int64
}

func newStream(cfg Config, log *slog.Logger, be backend.Backend, m *model.Model) *stream {
	s := &stream{cfg: cfg, log: log, be: be, m: m}
	s.pre = preprocess.Preprocessor{Width: cfg.ImageWidth, Patch: m.Sizes().PatchSize, Workers: cfg.Threads}
	s.prePool.New = func() any {
		p := s.pre
		return &p
	}
	s.win = s.newWindow(0)
	if cfg.Windowed && cfg.WindowMode == WindowLive && !cfg.canStartEarly() {
		log.Info("live windows change serially: the next window warms up early only with fixed-interval windows and overlap_size ≥ scale_frames+1",
			"overlap_size", cfg.OverlapSize, "scale_frames", cfg.ScaleFrames, "flow_threshold", cfg.FlowThreshold)
	}
	return s
}

// Prepare preprocesses a frame's image into the pixels and colours Push
// takes; it may run on any goroutine, several at once.
func (s *stream) Prepare(f Frame) (Frame, error) {
	if f.Pixels != nil {
		return f, nil
	}
	if f.Image == nil {
		return Frame{}, fmt.Errorf("engine: frame %d has no image", f.Seq)
	}
	p := s.prePool.Get().(*preprocess.Preprocessor)
	defer s.prePool.Put(p)
	pix, w, h, err := p.Run(f.Image, nil)
	if err != nil {
		return Frame{}, fmt.Errorf("engine: frame %d: %w", f.Seq, err)
	}
	return Frame{Seq: f.Seq, Stamp: f.Stamp, Pixels: pix, Width: w, Height: h, RGB: p.Colours(), prepared: true}, nil
}

func (s *stream) newWindow(index int) *window {
	return &window{index: index, sim: geom.Identity(), aligned: index == 0}
}

// live says whether windows are joined live (Config.WindowMode).
func (s *stream) live() bool { return s.cfg.Windowed && s.cfg.WindowMode == WindowLive }

// overlap is the number of frames consecutive windows share.
func (s *stream) overlap() int { return s.cfg.OverlapSize }

// windowFrames is a fixed-interval window's length in frames (positions).
// A live window after the first re-runs its scale frames and skips the rest
// of the overlap (its gap), so its cache holds gap frames fewer than its
// length; live window 0 has no gap and ends that many frames early, so that
// its cache never holds more frames than a later window's and its last
// frames cost the model no more than theirs. It keeps at least its scale
// frames before the overlap, so that the next window's scale frames follow
// its phase 1.
func (s *stream) windowFrames(w *window) int {
	ws := s.cfg.ScaleFrames
	n := ws + max(s.cfg.WindowSize-ws, 0)*max(s.cfg.KeyframeInterval, 1)
	if w.index == 0 && s.live() && s.cfg.FlowThreshold == 0 {
		if short := n - max(s.overlap()-ws, 0); short-s.overlap() >= ws {
			return short
		}
	}
	return n
}

// push preprocesses a frame and runs it.
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
	if s.cfg.Windowed && s.windowDone() {
		res, err := s.nextWindow(ctx)
		if err != nil {
			return nil, err
		}
		out = append(out, res...)
	}
	if s.live() {
		s.recent = keepLast(append(s.recent, in), s.overlap())
	}
	res, err := s.feed(ctx, in)
	if err != nil {
		return out, err
	}
	out = append(out, res...)
	if err := s.makePoints(out); err != nil {
		return out, err
	}
	if s.early() {
		if err := s.warm(ctx, in); err != nil {
			return out, err
		}
	}
	return out, nil
}

// prepare brings a frame to the model resolution.
func (s *stream) prepare(f Frame) (input, error) {
	var pix []float32
	var w, h int
	switch {
	case f.Pixels != nil:
		if f.Width <= 0 || f.Height <= 0 || len(f.Pixels) != 3*f.Width*f.Height {
			return input{}, fmt.Errorf("engine: frame %d: %d pixel values for %d×%d", f.Seq, len(f.Pixels), f.Width, f.Height)
		}
		if f.Width%s.m.Sizes().PatchSize != 0 || f.Height%s.m.Sizes().PatchSize != 0 {
			return input{}, fmt.Errorf("engine: frame %d: preprocessed size %d×%d is not a multiple of the patch size %d", f.Seq, f.Width, f.Height, s.m.Sizes().PatchSize)
		}
		if !f.prepared {
			if i := firstNonFinite(f.Pixels); i >= 0 {
				return input{}, fmt.Errorf("engine: frame %d: pixel value %d is %v", f.Seq, i, f.Pixels[i])
			}
		}
		pix, w, h = f.Pixels, f.Width, f.Height
	case f.Image != nil:
		var err error
		// a new buffer per frame: windowed mode keeps inputs for the next window
		pix, w, h, err = s.pre.Run(f.Image, nil)
		if err != nil {
			return input{}, fmt.Errorf("engine: frame %d: %w", f.Seq, err)
		}
	default:
		return input{}, fmt.Errorf("engine: frame %d has no image", f.Seq)
	}
	if s.h == 0 {
		s.h, s.w = h, w
	} else if h != s.h || w != s.w {
		return input{}, fmt.Errorf("engine: frame %d is %d×%d at model resolution but the stream runs at %d×%d: the image size changed", f.Seq, w, h, s.w, s.h)
	}
	rgb := doneRGB(f.RGB, pix)
	if rgb == nil {
		rgb = startRGB(pix)
	}
	return input{seq: f.Seq, stamp: f.Stamp, pix: pix, rgb: rgb}, nil
}

// windowDone says whether the current window has taken all its frames.
func (s *stream) windowDone() bool {
	w := s.win
	if len(w.buf) > 0 || w.n == 0 {
		return false
	}
	if s.cfg.FlowThreshold > 0 {
		return w.n > w.scaleN && w.kfs >= s.cfg.WindowSize-w.scaleN
	}
	return w.n+w.gap >= s.windowFrames(w)
}

// feed runs one input through the current window.
func (s *stream) feed(ctx context.Context, in input) ([]Result, error) {
	w := s.win
	if w.n == 0 {
		// phase 1: buffer the scale frames and run them together
		w.buf = append(w.buf, in)
		if len(w.buf) < s.cfg.ScaleFrames {
			return nil, nil
		}
		return s.runPhase1(ctx)
	}
	if !s.cfg.Windowed && s.m.Stats().FrameCount >= s.cfg.MaxFrames {
		return nil, fmt.Errorf("%w: %d frames committed since the last reset (max_frames %d); use windowed mode, a larger keyframe interval or reset", ErrCacheFull, s.m.Stats().FrameCount, s.cfg.MaxFrames)
	}
	if s.cfg.FlowThreshold > 0 {
		r, err := s.runFlowFrame(ctx, in, w.n)
		if err == nil {
			err = s.deviceErr()
		}
		if err != nil {
			return nil, err
		}
		w.n++
		s.remember(w, in)
		return s.emit([]Result{r})
	}
	res, err := s.runCall(ctx, w, s.m, []input{in})
	if err != nil {
		return nil, err
	}
	return s.emit(res)
}

func (s *stream) runPhase1(ctx context.Context) ([]Result, error) {
	res, err := s.runCall(ctx, s.win, s.m, s.win.buf)
	if err != nil {
		return nil, err
	}
	return s.emit(res)
}

// call is one model call of a window: its phase 1 (the scale frames
// together) or one interval frame. The current window runs a call whole;
// a next window warming up runs it step by step between frames.
type call struct {
	w    *window
	m    *model.Model
	ins  []input
	kind FrameKind
	pass *model.Pass
	bg   bool // a next window's warm-up
}

// startCall begins w's next call on ins: phase 1 while w has run nothing,
// else one frame, a keyframe or not by the interval rule relative to the
// window's first streaming frame.
// encs, when set, are the frames' DINO encodings, run ahead; the call takes
// them.
func (s *stream) startCall(ctx context.Context, w *window, m *model.Model, ins []input, encs []*model.Encoding, bg bool) (*call, error) {
	c := &call{w: w, m: m, ins: ins, kind: Scale, bg: bg}
	// a warm-up's heads frame by frame: its steps are slices of a frame
	step := model.Step{FrameHeads: bg}
	if w.n > 0 {
		kf := s.cfg.KeyframeInterval <= 1 || (w.n-w.scaleN)%s.cfg.KeyframeInterval == 0
		c.kind = Keyframe
		if !kf {
			c.kind, step.SkipAppend = NonKeyframe, true
		}
	}
	step.KeepDepth = s.keepDepth(w, c.kind, bg)
	var p *model.Pass
	var err error
	if encs != nil {
		if p, err = m.BeginEncoded(ctx, encs, step); err != nil {
			for _, e := range encs {
				e.Free()
			}
		}
	} else {
		imgs := make([][]float32, len(ins))
		for i, in := range ins {
			imgs[i] = in.pix
		}
		p, err = m.Begin(ctx, imgs, s.h, s.w, step)
	}
	if err != nil {
		return nil, err
	}
	c.pass = p
	return c, nil
}

// stepCall runs the next step of c and, when that completes the call,
// checks the device.
func (s *stream) stepCall(c *call) (bool, error) {
	done, err := c.pass.Step()
	if err == nil && done {
		err = s.deviceErr()
	}
	return done, err
}

// finishCall turns a completed call into results and advances its window.
func (s *stream) finishCall(c *call) []Result {
	out, w := c.pass.Output(), c.w
	s.trace(TraceEvent{Event: "call", Frames: len(c.ins), SkipAppend: c.kind == NonKeyframe, Background: c.bg})
	res := make([]Result, len(c.ins))
	for i, in := range c.ins {
		res[i] = s.result(w, in, out, i, c.kind)
		s.keepMaps(&res[i], out.DeviceDepth, out.DeviceConf, i)
		s.remember(w, in)
	}
	if c.kind != Scale {
		w.n++
		return res
	}
	w.scaleN = len(c.ins)
	w.n = len(c.ins)
	w.lastKF = out.PoseEnc[len(c.ins)-1]
	w.lastKn = len(c.ins) - 1
	w.buf = nil
	// phase 1 works on several frames at once; a GPU backend can give the
	// memory it cached for those shapes back now. Live windows run a phase 1
	// every window, beside the frames: there the cached memory is kept, so
	// that the memory held stays flat and no frame waits for allocations.
	if !s.live() || w.index == 0 {
		s.trimBackend()
	}
	return res
}

// runCall runs a call of w whole.
func (s *stream) runCall(ctx context.Context, w *window, m *model.Model, ins []input) ([]Result, error) {
	c, err := s.startCall(ctx, w, m, ins, nil, false)
	if err != nil {
		return nil, err
	}
	for {
		done, err := s.stepCall(c)
		if err != nil {
			return nil, err
		}
		if done {
			return s.finishCall(c), nil
		}
	}
}

// runFlowFrame attends with eviction deferred, measures the flow to the last
// keyframe and then commits the frame or rolls it back (reference §12).
func (s *stream) runFlowFrame(ctx context.Context, in input, local int) (Result, error) {
	w := s.win
	// kept whatever the decision: a non-keyframe's maps are freed unused
	keep := s.keepDepth(w, Keyframe, false)
	out, err := s.m.Forward(ctx, [][]float32{in.pix}, s.h, s.w, model.Step{DeferEviction: true, KeepDepth: keep})
	if err != nil {
		return Result{}, err
	}
	var dev *devMaps
	if keep {
		var r Result
		s.keepMaps(&r, out.DeviceDepth, out.DeviceConf, 0)
		dev = r.dev
	}
	s.trace(TraceEvent{Event: "call", Frames: 1})
	pose := out.PoseEnc[0]
	flow := float32(s.cfg.FlowThreshold) + 1
	if len(out.Depth) > 0 {
		flow, err = geom.MeanFlow(pose, w.lastKF, out.Depth[0], s.w, s.h, 8)
		if err != nil {
			return Result{}, fmt.Errorf("engine: flow: %w", err)
		}
	}
	kf := w.kfs == 0 || float64(flow) > s.cfg.FlowThreshold || local-w.lastKn >= s.cfg.MaxNonKeyframeGap
	if s.cfg.Decide != nil {
		kf = s.cfg.Decide(s.flowDecs, float64(flow), kf)
	}
	s.flowDecs++
	kind := NonKeyframe
	if kf {
		s.m.Commit()
		w.lastKF, w.lastKn = pose, local
		w.kfs++
		kind = Keyframe
	} else if err := s.m.Rollback(); err != nil {
		return Result{}, fmt.Errorf("engine: rollback: %w", err)
	}
	ev := "rollback"
	if kf {
		ev = "commit"
	}
	s.trace(TraceEvent{Event: ev, Flow: float64(flow)})
	r := s.result(w, in, out, 0, kind)
	r.Flow = float64(flow)
	r.dev = dev
	return r, nil
}

// remember keeps the inputs a next window re-runs (reference mode; live
// windows keep the stream's last inputs, Push).
func (s *stream) remember(w *window, in input) {
	if !s.cfg.Windowed || s.live() {
		return
	}
	w.tail = keepLast(append(w.tail, in), s.overlap())
}

// keepLast trims xs to its last n elements in place.
func keepLast[T any](xs []T, n int) []T {
	if len(xs) > n {
		xs = append(xs[:0], xs[len(xs)-n:]...)
	}
	return xs
}

// result turns frame i of a model output of window w into a Result.
func (s *stream) result(w *window, in input, out *model.Output, i int, kind FrameKind) Result {
	enc := out.PoseEnc[i]
	r := Result{
		Seq: in.seq, Stamp: in.stamp, Kind: kind,
		PoseEnc: enc, Width: s.w, Height: s.h,
		Window: w.index,
		RGB:    in.rgb.get(),
	}
	r.CamToWorld = geom.PoseEncToCamToWorld(enc)
	r.Intrinsics = geom.IntrinsicsFromPoseEnc(enc, s.w, s.h)
	if len(out.Depth) > i {
		r.Depth, r.Conf = out.Depth[i], out.DepthConf[i]
	}
	if len(out.Points) > i {
		r.Points, r.PointsConf = out.Points[i], out.PointsConf[i]
	}
	return r
}

// emit passes results on. Streaming mode returns them at once. Windowed mode
// aligns them to the previous window and holds back the last Overlap results,
// which a next window would replace (the reference stitches overlap frames from
// the later window); window 0 is held whole until a second window exists or the
// input ends, because the reference re-encodes window 0's quaternions only when
// there are two or more windows.
func (s *stream) emit(res []Result) ([]Result, error) {
	if !s.cfg.Windowed {
		return res, nil
	}
	if s.live() {
		return s.emitLive(res)
	}
	w := s.win
	if !w.aligned {
		w.raw = append(w.raw, res...)
		need := min(s.overlap(), len(s.prevTail.PoseEnc))
		if len(w.raw) < need {
			return nil, nil
		}
		if err := s.align(); err != nil {
			return nil, err
		}
		res, w.raw = w.raw, nil
	}
	for i := range res {
		s.warp(&res[i], w.sim)
	}
	s.held = append(s.held, res...)
	if w.index == 0 {
		return nil, nil
	}
	return s.release(s.overlap()), nil
}

// emitLive passes results on at once (live windows): window 0 as produced,
// later windows warped by their similarity. A window's re-runs (its scale
// frames) only serve its alignment: those frames were emitted already. The
// last Overlap results emitted are kept for the next window's alignment.
func (s *stream) emitLive(res []Result) ([]Result, error) {
	w := s.win
	if !w.aligned {
		w.raw = append(w.raw, res...)
		if len(w.raw) < w.rerun {
			return nil, nil
		}
		if err := s.align(); err != nil {
			return nil, err
		}
		res, w.raw = w.raw[w.rerun:], nil
	}
	if w.index > 0 {
		for i := range res {
			warpResult(&res[i], w.sim)
		}
	}
	s.held = keepLast(append(s.held, res...), s.overlap())
	return res, nil
}

// release returns all held results but the newest keep.
func (s *stream) release(keep int) []Result {
	n := max(len(s.held)-keep, 0)
	out := append([]Result(nil), s.held[:n]...)
	s.held = append(s.held[:0], s.held[n:]...)
	return out
}

// align computes the current window's similarity to the previous (aligned) one.
func (s *stream) align() error {
	w := s.win
	cur := framesOf(w.raw)
	overlap := s.overlap()
	if s.live() {
		overlap = w.rerun // prevTail holds exactly the re-run frames' results
	}
	sim, err := geom.PairwiseAlignment(*s.prevTail, cur, overlap)
	if err != nil {
		return fmt.Errorf("engine: aligning window %d: %w", w.index, err)
	}
	w.sim, w.aligned = sim, true
	s.sims = append(s.sims, sim)
	return nil
}

// warp applies a window's similarity to a result; windowed mode re-encodes every
// pose (the reference warps every window once there are two or more).
func (s *stream) warp(r *Result, sim geom.Similarity) {
	if s.win.index == 0 && len(s.sims) == 0 {
		return // window 0 is warped when the second window starts
	}
	warpResult(r, sim)
}

func warpResult(r *Result, sim geom.Similarity) {
	if r.dev != nil {
		r.dev.scale = float32(sim.Scale)
		r.dev.warps++
	}
	r.PoseEnc = sim.ApplyPose(r.PoseEnc)
	r.CamToWorld = geom.PoseEncToCamToWorld(r.PoseEnc)
	r.Intrinsics = geom.IntrinsicsFromPoseEnc(r.PoseEnc, r.Width, r.Height)
	if sim.Scale != 1 && r.Depth != nil {
		d := make([]float32, len(r.Depth))
		for i, v := range r.Depth {
			d[i] = v * float32(sim.Scale)
		}
		r.Depth = d
	}
	if r.Points != nil {
		p := make([]float32, len(r.Points))
		for i := 0; i+2 < len(r.Points); i += 3 {
			q := sim.Apply([3]float64{float64(r.Points[i]), float64(r.Points[i+1]), float64(r.Points[i+2])})
			p[i], p[i+1], p[i+2] = float32(q[0]), float32(q[1]), float32(q[2])
		}
		r.Points = p
	}
}

// framesOf collects the per-frame data alignment needs.
func framesOf(res []Result) geom.WindowFrames {
	f := geom.WindowFrames{}
	for _, r := range res {
		f.PoseEnc = append(f.PoseEnc, r.PoseEnc)
		f.Depth = append(f.Depth, r.Depth)
		f.Keyframe = append(f.Keyframe, r.Kind != NonKeyframe)
	}
	if len(f.Depth) > 0 && f.Depth[0] == nil {
		f.Depth = nil
	}
	return f
}

// nextWindow closes the current window and starts the next one on its tail.
func (s *stream) nextWindow(ctx context.Context) ([]Result, error) {
	if s.live() {
		return s.nextLiveWindow(ctx)
	}
	old := s.win
	// next window start: fixed windows step by (length − overlap); flow windows
	// restart overlap frames back, but never inside the old window's scale frames.
	retained := old.tail
	if s.cfg.FlowThreshold > 0 {
		maxBack := old.n - old.scaleN
		if len(retained) > maxBack {
			dropped := len(retained) - maxBack
			s.log.Warn("windowed flow mode: overlap larger than the window's streamed frames; the reference drops these frames", "frames", dropped)
			retained = retained[dropped:]
		}
	}
	var out []Result
	if old.index == 0 {
		s.sims = append(s.sims, geom.Identity())
		// window 0 becomes part of a multi-window map: warp it by the
		// identity, which re-encodes its quaternions as the reference does.
		for i := range s.held {
			warpResult(&s.held[i], geom.Identity())
		}
	}
	out = append(out, s.release(s.overlap())...)
	// the held tail (aligned) is what the next window aligns to; it is not emitted
	tail := framesOf(s.held)
	s.prevTail = &tail
	s.held = s.held[:0]
	s.m.Reset()
	s.trimBackend()
	s.win = s.newWindow(old.index + 1)
	s.win.rerun = len(retained)
	s.trace(TraceEvent{Event: "reset"})
	s.log.Info("new window", "window", s.win.index, "overlap_frames", len(retained))
	for _, in := range retained {
		res, err := s.feed(ctx, in)
		if err != nil {
			return out, err
		}
		out = append(out, res...)
	}
	return out, nil
}

// nextLiveWindow changes live windows. The next window re-runs only its
// scale frames, the first ScaleFrames of the overlap; the overlap frames
// after them were emitted by the current window and the next window does not
// run them at all, so its first streaming frame is the first frame after the
// change. Its cache then has a gap after the scale frames, as after a
// keyframe interval of that many frames (the time index and the keyframe
// rule count only the frames a window ran), which the reference itself
// uses on long inputs; the scale frames, which anchor the window, are the
// reference's. Without that cut, every re-run frame after the scale frames
// would cost a full forward on top of the current window's. The window
// aligns to the results emitted for the same frames.
func (s *stream) nextLiveWindow(ctx context.Context) ([]Result, error) {
	old := s.win
	retained := s.recent
	if s.cfg.FlowThreshold > 0 {
		// never inside the old window's scale frames, as the reference
		if maxBack := old.n + old.gap - old.scaleN; len(retained) > maxBack {
			s.log.Warn("windowed flow mode: overlap larger than the window's streamed frames; the reference drops these frames", "frames", len(retained)-maxBack)
			retained = retained[len(retained)-maxBack:]
		}
	}
	rerun := min(s.cfg.ScaleFrames, len(retained))
	if old.index == 0 {
		s.sims = append(s.sims, geom.Identity())
	}
	prev, err := s.emittedFor(retained, rerun)
	if err != nil {
		return nil, err
	}
	s.prevTail = &prev
	if s.next != nil {
		return s.switchWindow(ctx)
	}
	s.m.Reset()
	s.win = s.newWindow(old.index + 1)
	s.win.rerun, s.win.gap = rerun, len(retained)-rerun
	s.trace(TraceEvent{Event: "reset"})
	s.log.Info("new window", "window", s.win.index, "rerun_frames", rerun, "gap_frames", s.win.gap)
	var out []Result
	for _, in := range retained[:rerun] {
		res, err := s.feed(ctx, in)
		if err != nil {
			return out, err
		}
		out = append(out, res...)
	}
	return out, nil
}

// emittedFor is what live windows emitted for the first n of retained, the
// latest frames pushed before the current Push (all emitted already), for
// the next window's alignment: matched by position, checked by sequence
// number.
func (s *stream) emittedFor(retained []input, n int) (geom.WindowFrames, error) {
	lo := len(s.held) - len(retained)
	if lo < 0 {
		return geom.WindowFrames{}, fmt.Errorf("engine: window %d: %d results kept for %d re-run frames", s.win.index+1, len(s.held), len(retained))
	}
	res := s.held[lo : lo+n]
	for i, r := range res {
		if r.Seq != retained[i].seq {
			return geom.WindowFrames{}, fmt.Errorf("engine: window %d: re-run frame %d is frame %d, but the result emitted there is frame %d", s.win.index+1, i, retained[i].seq, r.Seq)
		}
	}
	return framesOf(res), nil
}

// flush runs a partial phase 1 and releases everything held.
func (s *stream) flush(ctx context.Context) ([]Result, error) {
	var out []Result
	if len(s.win.buf) > 0 {
		res, err := s.runPhase1(ctx)
		if err != nil {
			return nil, err
		}
		out = append(out, res...)
	}
	if s.live() {
		// what is not aligned yet re-runs frames emitted already, and so
		// does a warm-up
		s.win.raw = nil
		s.dropWarmup()
		return out, nil
	}
	if s.cfg.Windowed {
		w := s.win
		if !w.aligned && len(w.raw) > 0 {
			if err := s.align(); err != nil {
				return out, err
			}
			res := w.raw
			w.raw = nil
			for i := range res {
				s.warp(&res[i], w.sim)
			}
			s.held = append(s.held, res...)
		}
		out = append(out, s.release(0)...)
	}
	return out, nil
}

// deviceErr returns a backend's sticky device failure (out of memory, a failed
// launch): a GPU backend's operations return no errors, so the stream asks
// after every call and stops instead of publishing garbage.
func (s *stream) deviceErr() error {
	if e, ok := s.be.(backend.ErrorReporter); ok {
		if err := e.Err(); err != nil {
			return fmt.Errorf("engine: %s backend: %w", s.be.Name(), err)
		}
	}
	return nil
}

func (s *stream) trace(ev TraceEvent) {
	if s.cfg.Trace != nil {
		ev.Stats = s.Stats()
		s.cfg.Trace(ev)
	}
}

// Aligner is a Stream that reports its window alignments (windowed mode).
type Aligner interface {
	// Alignments returns the similarity of every window so far: the
	// reference's chunk_scales and chunk_transforms.
	Alignments() []geom.Similarity
}

// What New's streams offer beyond Stream: the backend's measuring hooks
// (bench) and the window alignments (verify).
var (
	_ Aligner                = (*stream)(nil)
	_ Preparer               = (*stream)(nil)
	_ backend.MemoryReporter = (*stream)(nil)
	_ backend.Profiler       = (*stream)(nil)
)

// Alignments returns the similarity of every window so far (windowed mode):
// the reference's chunk_scales and chunk_transforms.
func (s *stream) Alignments() []geom.Similarity {
	return append([]geom.Similarity(nil), s.sims...)
}

// Stats describes the cache.
func (s *stream) Stats() CacheStats {
	st := s.m.Stats()
	return CacheStats{
		FrameCount: st.FrameCount, ScalePages: st.ScalePages, LivePages: st.LivePages,
		FreePages: st.FreePages, SpecialTokens: st.SpecialTokens, VisiblePages: st.VisiblePages,
		LastPageLen: st.LastPageLen, PageSize: st.PageSize,
		CameraFrames: s.m.CameraFrames(), KVBytes: s.m.KVBytes(),
		Window: s.win.index, FramesIn: s.framesIn,
		PointsOnDevice: s.devicePoints.Load(),
	}
}

// Reset starts a new map.
func (s *stream) Reset() error {
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
	s.win = s.newWindow(0)
	s.held, s.recent, s.prevTail, s.sims = nil, nil, nil, nil
	s.h, s.w = 0, 0
	return nil
}

// trimBackend lets a GPU backend give the buffers it cached back to the
// driver: after phase 1 (its eight-frame shapes do not come again) and at a
// reset (the next phase 1 would otherwise come on top of the steady state's
// buffers).
func (s *stream) trimBackend() {
	if t, ok := s.be.(backend.Trimmer); ok {
		t.Trim()
	}
}

// ResetMemoryPeak starts the backend's peak device memory afresh, where it
// tracks one.
func (s *stream) ResetMemoryPeak() {
	if r, ok := s.be.(backend.MemoryReporter); ok {
		r.ResetMemoryPeak()
	}
}

// RestartProfile starts the backend's operation profile afresh, where it
// keeps one.
func (s *stream) RestartProfile() {
	if r, ok := s.be.(backend.Profiler); ok {
		r.RestartProfile()
	}
}

// MemoryUsage reports the backend's device memory (current, peak) in bytes,
// or zeros when the backend does not track it (the CPU backend).
func (s *stream) MemoryUsage() (current, peak int64) {
	if m, ok := s.be.(backend.MemoryReporter); ok {
		return m.MemoryUsage()
	}
	return 0, 0
}

// MemoryParts is the backend's breakdown of the memory it holds, where it
// keeps one.
func (s *stream) MemoryParts() []backend.MemoryPart {
	if m, ok := s.be.(backend.MemoryParter); ok {
		return m.MemoryParts()
	}
	return nil
}

// Close releases the model.
func (s *stream) Close() error {
	if s.closed {
		return nil
	}
	s.closed = true
	s.dropWarmup()
	if s.spare != nil {
		s.spare.Close()
	}
	s.m.Close()
	if c, ok := s.be.(io.Closer); ok {
		return c.Close()
	}
	return nil
}
