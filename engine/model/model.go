// Package model is the LingBot-Map network written once against
// backend.Backend: the DINOv2 patch embedding, the aggregator with its paged
// KV cache, the causal camera head and the DPT heads (reference-model.md
// §3–§11). Sizes come from the weights, so the tiny golden model and the
// released checkpoint load through the same code.
//
// A Model is stateful (its caches follow the stream) and not safe for
// concurrent use. The streaming schedule (phase 1, keyframes, flow, windows)
// belongs to the caller (engine.Stream); the model runs one call at a time:
//
//	out, err := m.Forward(ctx, scaleFrames, h, w, model.Step{})   // phase 1
//	out, err  = m.Forward(ctx, [][]float32{img}, h, w, model.Step{}) // keyframe
package model

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"

	"github.com/lingbotmap/lingbotmap/engine/backend"
	"github.com/lingbotmap/lingbotmap/engine/kvcache"
	"github.com/lingbotmap/lingbotmap/engine/weights"
)

// Options configure a Model. Zero fields take the reference demo's defaults.
type Options struct {
	// ScaleFrames are the frames of phase 1, never evicted (default 8).
	ScaleFrames int
	// SlidingWindow is the number of live frames kept in the cache (default 64).
	SlidingWindow int
	// MaxFrames caps the frames committed per reset: the 3D RoPE table and the
	// special-token pages (default 1024). The reference sizes its special
	// pages for 100 frames more, which its RoPE table never lets it commit.
	MaxFrames int
	// CacheHeadroom is the number of spare patch pages beyond scale + window
	// (default 16).
	CacheHeadroom int
	// CameraIterations of the camera head (default 4).
	CameraIterations int
	// SelectedLayers are the aggregator layers fed to the heads, ascending; they
	// cannot be read from the weights (default SelectedLayersFor(depth)).
	SelectedLayers []int
	// KeepIntermediates fills Output.DinoTokens and Output.AggLayers.
	KeepIntermediates bool
	// AllowUnusedWeights loads a checkpoint with keys the model does not use
	// (they are logged); by default they are an error, because a wrong file
	// would otherwise load silently.
	AllowUnusedWeights bool
	// Log receives load-time notes (default slog.Default()).
	Log *slog.Logger
}

// DefaultOptions are the reference demo's settings; engine.DefaultConfig
// takes its defaults from here.
func DefaultOptions() Options {
	return Options{
		ScaleFrames:      8,
		SlidingWindow:    64,
		MaxFrames:        1024, // the reference's max_frame_num
		CacheHeadroom:    16,   // the reference cache manager's spare patch pages
		CameraIterations: 4,
	}
}

func (o Options) withDefaults() Options {
	d := DefaultOptions()
	if o.ScaleFrames == 0 {
		o.ScaleFrames = d.ScaleFrames
	}
	if o.SlidingWindow == 0 {
		o.SlidingWindow = d.SlidingWindow
	}
	if o.MaxFrames == 0 {
		o.MaxFrames = d.MaxFrames
	}
	if o.CacheHeadroom == 0 {
		o.CacheHeadroom = d.CacheHeadroom
	}
	if o.CameraIterations == 0 {
		o.CameraIterations = d.CameraIterations
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	return o
}

// SelectedLayersFor is the reference's choice of aggregator outputs for a
// trunk of the given depth: [4, 11, 17, 23] for the released depth 24, and the
// same fractions of the depth otherwise.
func SelectedLayersFor(depth int) []int {
	if depth == 24 {
		return []int{4, 11, 17, 23}
	}
	out := make([]int, 0, 4)
	for _, l := range []int{4, 11, 17, 23} {
		v := min(depth-1, l*depth/24)
		if len(out) > 0 && v <= out[len(out)-1] {
			v = out[len(out)-1] + 1
		}
		out = append(out, min(v, depth-1))
	}
	return slices.Compact(out)
}

// Sizes are the dimensions read from the weights.
type Sizes struct {
	Embed, Heads, Depth   int // aggregator width, heads (of 64), frame/global block pairs
	DinoDepth, DinoGrid   int // DINO blocks; side of its trained position grid
	PatchSize             int
	Registers, NumSpecial int // aggregator register tokens; specials per frame (1+registers+1)
	CamDim, CamDepth      int // camera head width (2·Embed) and trunk blocks
	HasDepthHead          bool
	HasPointHead          bool
	SelectedLayers        []int
}

// Step says how the cache treats a single-frame call.
type Step struct {
	// SkipAppend: an interval non-keyframe. It attends to the cache and itself
	// but leaves no trace (aggregator rolled back, camera head not stored, RoPE
	// frame counter not advanced).
	SkipAppend bool
	// DeferEviction (flow mode): the frame is appended with eviction deferred;
	// the caller then calls Commit (keep it) or Rollback (drop it).
	DeferEviction bool
	// FrameHeads runs a call's dense heads one frame per Pass step instead
	// of all its frames in one, so that a sliced multi-frame call (a phase 1
	// warmed up in the background) has no step far larger than the others.
	// Each frame's heads see only that frame's tokens, so the values are the
	// same.
	FrameHeads bool
	// KeepDepth keeps the call's depth and confidence maps on the device
	// too (Output.DeviceDepth, DeviceConf), for work that follows on the
	// device (backend.Unprojector); the caller frees them.
	KeepDepth bool
	// DeferFetch leaves the call's copies to the host in flight: the step
	// that queues the heads also queues the copies (backend.StartDownload)
	// and ends the call's use of the model, which Pass.Queued then reports
	// and which takes its next call at once; the step after waits for the
	// copies and completes the pass. A caller so queues the next frame
	// before it waits for this one's outputs.
	DeferFetch bool
	// PauseAtHeads stops the pass once its aggregator is queued, before the
	// camera and dense heads: Paused then reports it, and either the next
	// Step goes on as if there had been no pause or HeadsBeside runs the
	// heads with the next frame's encoding beside them.
	PauseAtHeads bool
}

// Output is what one call produces, per frame of the call.
type Output struct {
	PoseEnc   [][9]float32   // [S] final encoding: t, quaternion XYZW, fov_h, fov_w
	PoseIters [][][9]float32 // [iterations][S]
	// Depth and DepthConf are H·W per frame; Points (3·H·W, HWC) and PointsConf
	// only with a point head. Nil while the weights have no such head.
	Depth, DepthConf, Points, PointsConf [][]float32
	// With KeepIntermediates: DinoTokens[f] is frame f's DINO patch tokens
	// [NP·Embed]; AggLayers[l] is selected layer l for all frames [S·P·2·Embed].
	DinoTokens, AggLayers [][]float32
	// With Step.KeepDepth: the depth and confidence maps of each frame
	// ([H·W] tensors) as the backend holds them; whoever took the Output
	// frees them (backend.Free).
	DeviceDepth, DeviceConf []backend.Tensor
}

// Model is a loaded network and its caches.
type Model struct {
	be     backend.Backend
	opt    Options
	sizes  Sizes
	dino   *dino
	agg    *aggregator
	camera *cameraHead
	heads  heads

	// The state: everything a call changes. A fork has its own and shares
	// the rest (weights, per-resolution tables, the backend).
	forked     bool
	cam        camCache
	cache      *kvcache.Cache
	store      backend.KVStore
	storeSpec  backend.KVSpec
	h, w       int
	committed  int // RoPE time index of the next frame: frames committed since reset
	pending    bool
	busy       *Pass // the sliced call in progress
	visibleBuf []int32
	closed     bool
}

// Load builds the model from a weight store, checking every shape and the
// full key set.
func Load(be backend.Backend, store weights.Store, opt Options) (*Model, error) {
	opt = opt.withDefaults()
	if opt.ScaleFrames < 1 || opt.SlidingWindow < 1 || opt.MaxFrames < 1 || opt.CameraIterations < 1 || opt.CacheHeadroom < 0 {
		return nil, fmt.Errorf("model: scale frames (%d), sliding window (%d), max frames (%d) and camera iterations (%d) must all be at least 1, cache headroom (%d) at least 0",
			opt.ScaleFrames, opt.SlidingWindow, opt.MaxFrames, opt.CameraIterations, opt.CacheHeadroom)
	}
	root := weights.NewCursor(store)
	ac := root.Sub("aggregator")
	camShape, err := ac.Shape("camera_token")
	if err != nil {
		return nil, fmt.Errorf("model: not a LingBot-Map checkpoint: %w", err)
	}
	if len(camShape) != 4 || camShape[3]%aggHeadDim != 0 {
		return nil, fmt.Errorf("model: %q has shape %v, want [1, 2, 1, a multiple of %d]", ac.Key("camera_token"), camShape, aggHeadDim)
	}
	e := camShape[3]
	m := &Model{be: be, opt: opt}

	if m.dino, err = loadDINO(be, ac.Sub("patch_embed"), aggHeadDim); err != nil {
		return nil, fmt.Errorf("model: DINO patch embedding: %w", err)
	}
	if m.dino.dim != e {
		return nil, fmt.Errorf("model: DINO width %d differs from the aggregator width %d", m.dino.dim, e)
	}
	if m.agg, err = loadAggregator(be, ac, e); err != nil {
		return nil, fmt.Errorf("model: aggregator: %w", err)
	}
	depth := m.agg.depth()
	sel := opt.SelectedLayers
	if sel == nil {
		sel = SelectedLayersFor(depth)
	}
	if len(sel) == 0 || !slices.IsSorted(sel) || sel[0] < 0 || sel[len(sel)-1] >= depth || len(slices.Compact(slices.Clone(sel))) != len(sel) {
		return nil, fmt.Errorf("model: selected layers %v must be distinct, ascending and inside the aggregator's %d blocks", sel, depth)
	}
	m.opt.SelectedLayers = slices.Clone(sel)

	if m.camera, err = loadCameraHead(be, root.Sub("camera_head"), 2*e, opt.CameraIterations); err != nil {
		return nil, fmt.Errorf("model: camera head: %w", err)
	}
	if m.heads, err = loadHeads(be, root, len(sel)); err != nil {
		return nil, fmt.Errorf("model: %w", err)
	}

	if unused := root.Unused(""); len(unused) > 0 {
		msg := fmt.Sprintf("%d checkpoint tensors are not used by the model: %s", len(unused), summarizeKeys(unused))
		if !opt.AllowUnusedWeights {
			return nil, fmt.Errorf("model: %s (is this a LingBot-Map checkpoint?)", msg)
		}
		opt.Log.Warn("model: "+msg, "count", len(unused))
	}
	m.cam = newCamCache(opt.CameraIterations, len(m.camera.trunk))
	m.sizes = Sizes{
		Embed: e, Heads: e / aggHeadDim, Depth: depth,
		DinoDepth: len(m.dino.blocks), DinoGrid: m.dino.grid, PatchSize: m.dino.patch,
		Registers: m.agg.registers, NumSpecial: m.agg.numSpecial,
		CamDim: 2 * e, CamDepth: len(m.camera.trunk),
		HasDepthHead: m.heads.depth != nil, HasPointHead: m.heads.point != nil,
		SelectedLayers: slices.Clone(sel),
	}
	return m, nil
}

func summarizeKeys(keys []string) string {
	if len(keys) > 5 {
		return strings.Join(keys[:5], ", ") + ", …"
	}
	return strings.Join(keys, ", ")
}

// Fork returns a second model state over the same weights: it shares every
// weight, the per-resolution tables and the backend, and has its own KV
// cache (a new store from the backend, sized at its first call), camera-head
// cache, RoPE frame counter and pending flags. The two may run calls
// interleaved on one goroutine (not at once) at the same resolution. Closing
// a fork frees only its caches; the weights live as long as the model that
// loaded them, which must outlive its forks.
func (m *Model) Fork() (*Model, error) {
	if m.closed {
		return nil, errors.New("model: Fork after Close")
	}
	return &Model{
		be: m.be, opt: m.opt, sizes: m.sizes,
		dino: m.dino, agg: m.agg, camera: m.camera, heads: m.heads,
		forked: true,
		cam:    newCamCache(m.opt.CameraIterations, len(m.camera.trunk)),
	}, nil
}

// Sizes reports the dimensions read from the weights.
func (m *Model) Sizes() Sizes {
	s := m.sizes
	s.SelectedLayers = slices.Clone(s.SelectedLayers)
	return s
}

// Options returns the options in effect (defaults filled in).
func (m *Model) Options() Options { return m.opt }

// ErrPending is returned when a DeferEviction step was neither committed nor
// rolled back before the next call.
var ErrPending = errors.New("model: the previous deferred-eviction frame was neither committed nor rolled back")

// Forward runs one call: several frames (phase 1, on an empty cache) or one.
// images are CHW float32 in [0,1], 3·h·w values each, h and w multiples of the
// patch size; the resolution stays fixed until Reset. It is Begin and then
// every Step of the pass.
func (m *Model) Forward(ctx context.Context, images [][]float32, h, w int, step Step) (*Output, error) {
	p, err := m.Begin(ctx, images, h, w, step)
	if err != nil {
		return nil, err
	}
	for {
		done, err := p.Step()
		if err != nil {
			return nil, err
		}
		if done {
			return p.Output(), nil
		}
	}
}

// checkInput vets a call of s frames: images, or their encodings when
// images is nil.
func (m *Model) checkInput(images [][]float32, s, h, w int, step Step) error {
	if m.closed {
		return errors.New("model: Forward after Close")
	}
	if m.busy != nil {
		return ErrBusy
	}
	if m.pending {
		return ErrPending
	}
	ps := m.sizes.PatchSize
	switch {
	case s == 0:
		return errors.New("model: Forward needs at least one image")
	case h <= 0 || w <= 0 || h%ps != 0 || w%ps != 0:
		return fmt.Errorf("model: image size %d×%d (h×w) must be positive multiples of the patch size %d", h, w, ps)
	case step.SkipAppend && step.DeferEviction:
		return errors.New("model: a step cannot both skip the append and defer eviction")
	}
	for i, img := range images {
		if len(img) != 3*h*w {
			return fmt.Errorf("model: image %d has %d values, want 3·%d·%d = %d (CHW)", i, len(img), h, w, 3*h*w)
		}
	}
	if s > 1 {
		if step.SkipAppend || step.DeferEviction {
			return fmt.Errorf("model: a call of %d frames is phase 1; it cannot be a non-keyframe or a deferred step", s)
		}
		if m.cache != nil && (m.cache.Stats().FrameCount > 0 || m.committed > 0) {
			return fmt.Errorf("model: a call of %d frames (phase 1) needs an empty cache; Reset first", s)
		}
	}
	if m.cache != nil && (h != m.h || w != m.w) && m.cache.Stats().FrameCount > 0 {
		return fmt.Errorf("model: image size %d×%d differs from the stream's %d×%d; Reset before changing resolution", h, w, m.h, m.w)
	}
	return nil
}

// ensureCache sizes the KV cache and its storage for NP patch tokens per frame.
func (m *Model) ensureCache(h, w, np int) error {
	if m.cache != nil && m.h == h && m.w == w {
		return nil
	}
	cache, err := kvcache.New(kvcache.Config{
		ScaleFrames:   m.opt.ScaleFrames,
		SlidingWindow: m.opt.SlidingWindow,
		PageSize:      np,
		MaxFrames:     m.opt.MaxFrames,
		Headroom:      m.opt.CacheHeadroom,
	})
	if err != nil {
		return fmt.Errorf("model: %w", err)
	}
	spec := backend.KVSpec{Layers: m.sizes.Depth, Pages: cache.NumPages(), PageSize: np, Heads: m.sizes.Heads, HeadDim: aggHeadDim}
	m.releaseStore() // free the old storage before the new one is allocated
	store, err := m.be.NewKVStore(spec)
	if err != nil {
		m.cache = nil
		return fmt.Errorf("model: KV cache for %d×%d images: %w", h, w, err)
	}
	m.cache, m.store, m.storeSpec, m.h, m.w = cache, store, spec, h, w
	m.cam.reset(m.be)
	m.committed = 0
	m.pending = false
	return nil
}

// Commit keeps the frame of the last DeferEviction step: the eviction it
// deferred runs now.
func (m *Model) Commit() {
	if !m.pending {
		return
	}
	m.cache.ExecuteDeferredEviction()
	m.pending = false
}

// Rollback drops the frame of the last DeferEviction step from the aggregator
// cache and the RoPE frame counter. As in the reference, the camera head keeps
// its camera token.
func (m *Model) Rollback() error {
	if !m.pending {
		return errors.New("model: nothing to roll back: the last call was not a DeferEviction step, or it was already committed")
	}
	if err := m.cache.Rollback(); err != nil {
		return fmt.Errorf("model: %w", err)
	}
	m.committed--
	m.pending = false
	return nil
}

// Reset clears every cache (clean_kv_cache): aggregator pages, camera head and
// frame counters. The storage is kept for the next stream.
func (m *Model) Reset() {
	if m.busy != nil {
		m.busy.Abort()
	}
	if m.cache != nil {
		m.cache.Reset()
	}
	m.cam.reset(m.be)
	m.committed = 0
	m.pending = false
}

// ReleaseCache lets the KV storage give its memory back while the cache
// holds no frames (after Reset), where the backend's store can: a GPU store
// unmaps its pages, which get memory again as frames are written. A store
// that cannot shrink keeps its memory.
func (m *Model) ReleaseCache() error {
	if m.cache != nil && m.cache.Stats().FrameCount > 0 {
		return errors.New("model: ReleaseCache while the cache holds frames (call Reset first)")
	}
	if r, ok := m.store.(backend.KVReleaser); ok {
		if err := r.Release(); err != nil {
			return fmt.Errorf("model: giving the KV cache's memory back: %w", err)
		}
	}
	return nil
}

// Stats describes the aggregator cache (zero before the first call).
func (m *Model) Stats() kvcache.Stats {
	if m.cache == nil {
		return kvcache.Stats{}
	}
	return m.cache.Stats()
}

// Width and Height are the resolution the caches are sized for (0 before
// the first call).
func (m *Model) Width() int  { return m.w }
func (m *Model) Height() int { return m.h }

// CameraFrames is the number of frames in the camera head's cache,
// counting those of a pass paused before its heads (Step.PauseAtHeads),
// which the cache holds once they run: a call's statistics are the same
// whether it pauses or not.
func (m *Model) CameraFrames() int {
	n := m.cam.frames
	if p := m.busy; p != nil && p.paused && !p.step.SkipAppend {
		n += p.call.s
	}
	return n
}

// KVBytes is the storage of the aggregator KV cache at float32 plus the camera
// head's cache now (a backend storing bf16 uses half of the first part).
func (m *Model) KVBytes() int64 {
	var n int64
	if b, ok := m.store.(backend.KVSizer); ok {
		n = b.Bytes() // the backend's own element size (bf16 on the GPU)
	} else if m.store != nil {
		n = m.storeSpec.Bytes(4)
	}
	return n + int64(m.CameraFrames())*int64(len(m.cam.k)*len(m.camera.trunk))*2*int64(m.sizes.CamDim)*4
}

// Close releases the caches and per-resolution tables. The backend owns the
// weights and is closed by its owner.
func (m *Model) Close() {
	if m.closed {
		return
	}
	if m.busy != nil {
		m.busy.Abort()
	}
	m.cam.reset(m.be)
	if !m.forked {
		m.dino.release(m.be)
		m.agg.release(m.be)
	}
	m.releaseStore()
	m.cache = nil
	m.closed = true
}

// releaseStore frees the KV storage now when the backend's store can be
// closed (device memory); a CPU store is left to the garbage collector.
func (m *Model) releaseStore() {
	if c, ok := m.store.(io.Closer); ok {
		if err := c.Close(); err != nil && m.opt.Log != nil {
			m.opt.Log.Warn("releasing the KV cache storage", "err", err)
		}
	}
	m.store = nil
}
