package model

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/lingbotmap/lingbotmap/engine/backend"
	"github.com/lingbotmap/lingbotmap/engine/kvcache"
)

// A Pass is one call of the model cut into bounded steps, so that a caller
// can interleave the call with other work on the same goroutine (the engine
// warms a next window up between the frames of the current one). Forward is
// Begin followed by every Step, so a sliced call computes exactly what
// Forward does. A step is one DINO block over the call's frames, one
// aggregator frame/global block pair, the camera head, or the dense heads
// (of all frames, or of one with Step.FrameHeads) with the copies to the
// host after the last. While a pass is open its model takes no other
// call; other states of the same weights (Fork) may run.
type Pass struct {
	m     *Model
	ctx   context.Context
	imgs  [][]float32
	h, w  int
	step  Step
	call  aggCall
	stage passStage
	i     int // step inside the stage

	seq    backend.Tensor // DINO token sequences between blocks
	encs   []*Encoding    // a call on frames encoded ahead (BeginEncoded)
	encode bool           // an encoding pass (Encode): DINO only
	enc    *Encoding      // its result
	agg    *aggRun
	layers []backend.Tensor
	dl     downloads
	flight *inflight // the copies in flight (Step.DeferFetch)
	out    *Output
	err    error
	// paused: Step.PauseAtHeads stopped the pass before its heads, and no
	// Step has run since
	paused bool
}

type passStage uint8

const (
	stageDINO passStage = iota
	stageAggregator
	stageCamera
	stageHeads
	stageFetch // Step.DeferFetch: the copies to the host are in flight
	stageDone
)

// Step costs, in units of one transformer block on one frame. Timed step by
// step on the CPU (tiny and full-size random models), a DINO block and an
// aggregator block cost about the same (same width, about the same tokens),
// the camera head far less (one token per frame), and the dense heads of a
// frame as much as many blocks, because the CPU's convolutions at image size
// are slow. On a GPU the dense heads are a small share of a frame, a handful
// of blocks by the design's budget; the costs below follow the GPU, where live
// windows matter. They spread work, they do not measure it: a caller that
// runs what is left at a deadline finishes on time even where they are off
// (on the CPU the heads' step is then a larger slice than the others).
const (
	costHeadsPerFrame  = 8
	costCameraPerFrame = 1
)

// ErrBusy is returned for a call on a model whose sliced call (Pass) has not
// finished.
var ErrBusy = errors.New("model: a sliced call is in progress on this model state")

// Begin starts a call as Forward would (same arguments and checks) and
// returns it as a pass to be run with Step. The cache pages are reserved
// now; the work happens in the steps.
func (m *Model) Begin(ctx context.Context, images [][]float32, h, w int, step Step) (*Pass, error) {
	return m.begin(ctx, images, nil, h, w, step)
}

// BeginEncoded starts a call as Begin does on frames whose DINO encoding ran
// ahead (Encode): the pass starts at the aggregator. It takes the encodings
// and frees them.
func (m *Model) BeginEncoded(ctx context.Context, encs []*Encoding, step Step) (*Pass, error) {
	if len(encs) == 0 {
		return nil, errors.New("model: BeginEncoded needs at least one encoding")
	}
	h, w := encs[0].h, encs[0].w
	for i, e := range encs {
		if e == nil || e.t == nil || e.h != h || e.w != w {
			return nil, fmt.Errorf("model: encoding %d is missing, freed or of another size than encoding 0 (%d×%d)", i, w, h)
		}
	}
	p, err := m.begin(ctx, nil, encs, h, w, step)
	if err != nil {
		return nil, err
	}
	p.stage = stageAggregator
	return p, nil
}

func (m *Model) begin(ctx context.Context, images [][]float32, encs []*Encoding, h, w int, step Step) (*Pass, error) {
	s := len(images)
	if encs != nil {
		s = len(encs)
	}
	if err := m.checkInput(images, s, h, w, step); err != nil {
		return nil, err
	}
	gh, gw := h/m.sizes.PatchSize, w/m.sizes.PatchSize
	if err := m.ensureCache(h, w, gh*gw); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("model: forward cancelled: %w", err)
	}
	if m.committed+s > m.opt.MaxFrames {
		return nil, fmt.Errorf("model: %d frames committed since the last reset reach the limit of %d (MaxFrames); reset or start a new window", m.committed, m.opt.MaxFrames)
	}

	// Reserve the cache pages first: the bookkeeping is shared by all global
	// blocks, so it runs once per call and each block writes where it says.
	call := aggCall{
		s:            s,
		cachedFrames: m.cache.Stats().FrameCount,
		scaleFor:     m.opt.ScaleFrames,
		timeIndex:    m.committed,
		dense:        s > 1,
		keepLayers:   m.opt.SelectedLayers,
		store:        m.store,
	}
	if s > 1 {
		call.scaleFor = s
	}
	switch {
	case s > 1:
		for f := 0; f < s; f++ {
			plan, err := m.cache.Append(m.agg.numSpecial)
			if err != nil {
				m.cache.Reset()
				return nil, fmt.Errorf("model: phase 1 with %d frames: %w", s, err)
			}
			plan.Special = slices.Clone(plan.Special)
			call.plans = append(call.plans, plan)
			m.cache.Evict()
		}
	case step.SkipAppend || step.DeferEviction:
		m.cache.SetDeferEviction(true)
		plan, err := m.cache.Append(m.agg.numSpecial)
		if err != nil {
			m.cache.SetDeferEviction(false)
			return nil, fmt.Errorf("model: %w", err)
		}
		call.plans = []kvcache.AppendPlan{plan}
	default:
		plan, err := m.cache.Append(m.agg.numSpecial)
		if err != nil {
			return nil, fmt.Errorf("model: %w", err)
		}
		call.plans = []kvcache.AppendPlan{plan}
		m.cache.Evict()
	}
	if s == 1 {
		call.pages, call.lastPageLen = m.cache.Visible(m.visibleBuf)
		m.visibleBuf = call.pages
	}
	p := &Pass{m: m, ctx: ctx, imgs: images, encs: encs, h: h, w: w, step: step, call: call, out: &Output{}}
	m.busy = p
	return p, nil
}

// Step runs the next bounded part of the call and reports whether the call
// is complete (then Output holds its result). After an error the pass is
// over, its model's cache is as before the call where it can be (as after a
// failed Forward), and Step returns the same error.
func (p *Pass) Step() (done bool, err error) {
	if p.err != nil {
		return false, p.err
	}
	if p.stage == stageDone {
		return true, nil
	}
	p.paused = false
	// the wait for copies in flight is not cut short: the work is queued
	// already, and the caller of a later call collects them
	if err := p.ctx.Err(); err != nil && p.stage != stageFetch {
		return false, p.fail(fmt.Errorf("model: forward cancelled: %w", err))
	}
	m, be := p.m, p.m.be
	s := p.call.s
	gh, gw := p.h/m.sizes.PatchSize, p.w/m.sizes.PatchSize
	switch p.stage {
	case stageDINO:
		p.embed()
		p.seq = m.dino.block(be, p.i, p.seq)
		p.i++
		if p.i < len(m.dino.blocks) {
			return false, nil
		}
		patches := m.dino.patchTokens(be, p.seq)
		p.seq = nil
		if p.encode {
			p.enc = &Encoding{be: be, t: patches, h: p.h, w: p.w}
			p.stage = stageDone
			return true, nil
		}
		if m.opt.KeepIntermediates {
			host := be.ToHost(patches)
			n := len(host) / s
			for f := 0; f < s; f++ {
				p.out.DinoTokens = append(p.out.DinoTokens, host[f*n:(f+1)*n])
			}
		}
		m.agg.prepare(be, gh, gw)
		p.agg = m.agg.begin(be, patches, p.call)
		be.Free(patches)
		p.stage, p.i = stageAggregator, 0
	case stageAggregator:
		if p.agg == nil {
			// frames encoded ahead: their tokens together, as DINO gives them
			patches := p.takeEncodings()
			m.agg.prepare(be, gh, gw)
			p.agg = m.agg.begin(be, patches, p.call)
			be.Free(patches)
		}
		m.agg.pair(be, p.agg, p.i)
		p.i++
		if p.i < m.agg.depth() {
			return false, nil
		}
		p.layers = p.agg.finish(be)
		p.agg = nil
		if p.step.SkipAppend {
			if err := m.cache.Rollback(); err != nil {
				return false, p.fail(fmt.Errorf("model: rolling back a non-keyframe: %w", err))
			}
		} else {
			m.committed += s
			m.pending = p.step.DeferEviction
		}
		if m.opt.KeepIntermediates {
			for _, l := range p.layers {
				p.out.AggLayers = append(p.out.AggLayers, be.ToHost(l))
			}
		}
		p.stage = stageCamera
		p.paused = p.step.PauseAtHeads
	case stageCamera:
		// Queue all heads before the first copy to the host synchronises.
		// The camera head, a chain of small kernels, runs as a branch
		// beside the dense heads; nothing reads its outputs before the
		// merge below.
		backend.Branch(be, p.cameraHead)
		p.stage, p.i = stageHeads, 0
	case stageHeads:
		if p.frameHeads() {
			// frame p.i's tokens of every selected layer
			one := make([]backend.Tensor, len(p.layers))
			for l, t := range p.layers {
				one[l] = be.SliceRows(t, p.i, 1)
			}
			err := m.heads.run(be, one, m.agg.numSpecial, gh, gw, p.h, p.w, p.i, s, p.step.KeepDepth, &p.dl, p.out)
			for _, t := range one {
				be.Free(t)
			}
			if err != nil {
				return false, p.fail(err)
			}
			p.i++
			if p.i < s {
				return false, nil
			}
		} else if err := m.heads.run(be, p.layers, m.agg.numSpecial, gh, gw, p.h, p.w, 0, s, p.step.KeepDepth, &p.dl, p.out); err != nil {
			return false, p.fail(err)
		}
		backend.Merge(be)
		if p.step.DeferFetch {
			f := p.dl.start(be)
			p.flight = &f
			p.end()
			p.stage = stageFetch
			return false, nil
		}
		p.dl.fetch(be)
		p.out.PoseEnc = p.out.PoseIters[len(p.out.PoseIters)-1]
		p.end()
		p.stage = stageDone
		return true, nil
	case stageFetch:
		p.flight.finish(be)
		p.flight = nil
		p.out.PoseEnc = p.out.PoseIters[len(p.out.PoseIters)-1]
		p.stage = stageDone
		return true, nil
	}
	return false, nil
}

// Queued says whether a Step.DeferFetch pass has queued all its work and
// left the model: only the wait for its copies to the host is left.
func (p *Pass) Queued() bool { return p.stage == stageFetch && p.err == nil }

// Paused says whether a Step.PauseAtHeads pass stopped before its heads:
// its aggregator is queued, and nothing since.
func (p *Pass) Paused() bool { return p.paused && p.err == nil }

// embed queues the encoding's first part, the image's copy to the device
// and the patch embedding, unless it ran already.
func (p *Pass) embed() {
	if p.stage == stageDINO && p.i == 0 && p.seq == nil {
		p.seq = p.m.dino.embed(p.m.be, p.imgs, p.h, p.w)
	}
}

// cameraHead queues the camera head on the selected layers' last.
func (p *Pass) cameraHead() {
	m := p.m
	last := p.layers[len(p.layers)-1]
	m.camera.forward(m.be, &m.cam, last, !p.step.SkipAppend, &p.dl, &p.out.PoseIters)
}

// HeadsBeside runs the heads of p, paused before them (Paused), with enc,
// the next frame's encoding pass (Encode) not yet stepped, beside them:
// enc's image is copied to the device and embedded first, then p's camera
// head and enc's DINO blocks go to one branch (backend.Brancher) and p's
// dense heads are queued after it, so that on a device with room for both
// the encoder's blocks fill what the heads' kernels leave idle. Neither
// reads what the other makes. The values are those of Step for p and of
// stepping enc to its end: each runs the same operations, in the same
// order. p is then where Step would have left it after its heads (Queued,
// with Step.DeferFetch); enc is done (Encoding), or failed with its own
// error, which HeadsBeside returns after p's error if any.
func (p *Pass) HeadsBeside(enc *Pass) error {
	switch {
	case p.err != nil:
		return p.err
	case !p.paused || p.stage != stageCamera:
		return errors.New("model: HeadsBeside needs a pass paused before its heads (Step.PauseAtHeads)")
	case enc == nil || !enc.encode || enc.stage != stageDINO || enc.i != 0 || enc.err != nil:
		return errors.New("model: HeadsBeside needs an encoding pass that has not started (Encode)")
	case enc.m.be != p.m.be:
		return errors.New("model: HeadsBeside needs the encoding on the pass's backend")
	}
	if err := enc.ctx.Err(); err != nil {
		// p stays paused: its heads run on their own later
		return enc.fail(fmt.Errorf("model: encoding cancelled: %w", err))
	}
	p.paused = false
	if err := p.ctx.Err(); err != nil {
		return p.fail(fmt.Errorf("model: forward cancelled: %w", err))
	}
	// the copy to the device ends a branch on the host's side
	enc.embed()
	var encErr error
	backend.Branch(p.m.be, func() {
		p.cameraHead()
		for {
			done, err := enc.Step()
			if err != nil || done {
				encErr = err
				return
			}
		}
	})
	p.stage, p.i = stageHeads, 0
	var err error
	for err == nil && p.stage == stageHeads {
		_, err = p.Step()
	}
	return errors.Join(err, encErr)
}

// frameHeads says whether the heads stage runs frame by frame.
func (p *Pass) frameHeads() bool { return p.step.FrameHeads && p.call.s > 1 }

// Output is the call's result once Step reported it done, else nil.
func (p *Pass) Output() *Output {
	if p.stage != stageDone {
		return nil
	}
	return p.out
}

// Cost is the work left in the pass, in units of one transformer block on
// one frame (see the step costs above).
func (p *Pass) Cost() int {
	s := p.call.s
	m := p.m
	if p.encode {
		return s * (len(m.dino.blocks) - p.i) * btoi(p.stage == stageDINO)
	}
	switch p.stage {
	case stageDINO:
		return s*(len(m.dino.blocks)-p.i) + 2*s*m.agg.depth() + s*(costCameraPerFrame+costHeadsPerFrame)
	case stageAggregator:
		return 2*s*(m.agg.depth()-p.i) + s*(costCameraPerFrame+costHeadsPerFrame)
	case stageCamera:
		return s * (costCameraPerFrame + costHeadsPerFrame)
	case stageHeads:
		return (s - p.i) * costHeadsPerFrame
	}
	return 0
}

// NextCost is the cost of the next Step alone.
func (p *Pass) NextCost() int {
	s := p.call.s
	switch p.stage {
	case stageDINO:
		return s
	case stageAggregator:
		return 2 * s
	case stageCamera:
		return s * costCameraPerFrame
	case stageHeads:
		if p.frameHeads() {
			return costHeadsPerFrame
		}
		return s * costHeadsPerFrame
	}
	return 0
}

// StepCosts appends the costs of the steps left, in order, to dst.
func (p *Pass) StepCosts(dst []int) []int {
	if p.err != nil {
		return dst
	}
	s, m := p.call.s, p.m
	stage, i := p.stage, p.i
	for stage != stageDone {
		switch stage {
		case stageDINO:
			for ; i < len(m.dino.blocks); i++ {
				dst = append(dst, s)
			}
			stage, i = stageAggregator, 0
			if p.encode {
				stage = stageDone
			}
		case stageAggregator:
			for ; i < m.agg.depth(); i++ {
				dst = append(dst, 2*s)
			}
			stage = stageCamera
		case stageCamera:
			dst = append(dst, s*costCameraPerFrame)
			stage, i = stageHeads, 0
		case stageHeads:
			if p.frameHeads() {
				for ; i < s; i++ {
					dst = append(dst, costHeadsPerFrame)
				}
			} else {
				dst = append(dst, s*costHeadsPerFrame)
			}
			stage = stageDone
		case stageFetch:
			dst = append(dst, 0) // the wait for the copies
			stage = stageDone
		}
	}
	return dst
}

// EncodedStepCosts appends the step costs of a call on frames encoded
// ahead (BeginEncoded) with step's options to dst.
func (m *Model) EncodedStepCosts(dst []int, frames int, step Step) []int {
	p := &Pass{m: m, call: aggCall{s: frames}, step: step, stage: stageAggregator}
	return p.StepCosts(dst)
}

// EncodeStepCosts appends the step costs of one frame's encoding (Encode)
// to dst.
func (m *Model) EncodeStepCosts(dst []int) []int {
	p := &Pass{m: m, call: aggCall{s: 1}, encode: true}
	return p.StepCosts(dst)
}

// CallCost is what a whole call of frames costs, in Cost's units.
func (m *Model) CallCost(frames int) int {
	return frames * (len(m.dino.blocks) + 2*m.agg.depth() + costCameraPerFrame + costHeadsPerFrame)
}

// Abort ends an unfinished pass: what it holds is freed and its model's
// cache is put back as far as it can be (as after a failed Forward), so the
// model takes calls again. A finished pass is left alone.
func (p *Pass) Abort() {
	if p.stage == stageDone || p.err != nil {
		return
	}
	p.fail(errors.New("model: sliced call aborted"))
}

// fail ends the pass with err.
func (p *Pass) fail(err error) error {
	m, be := p.m, p.m.be
	backend.Merge(be) // a failed heads stage may leave the camera head's branch unmerged
	be.Free(p.seq)
	p.seq = nil
	for _, e := range p.encs {
		e.Free()
	}
	p.encs = nil
	if p.encode {
		p.stage = stageDone
		p.err = err
		return err
	}
	if p.flight != nil {
		// the call left the model already: its copies end, their
		// tensors go, and the model's next call is not disturbed
		p.flight.free(be)
		p.flight = nil
		p.dl.free(be, p.out)
		p.err = err
		return err
	}
	if p.agg != nil {
		p.agg.free(be)
		p.agg = nil
	}
	if p.stage <= stageAggregator {
		// the frames are not committed yet: give their pages back
		switch {
		case p.call.s > 1:
			m.cache.Reset()
		case p.step.SkipAppend || p.step.DeferEviction:
			_ = m.cache.Rollback()
		}
		// A committed keyframe whose eviction already ran cannot be undone;
		// the caller must Reset after an error.
	}
	p.dl.free(be, p.out)
	p.end()
	p.err = err
	return err
}

// end frees the selected layers and frees the model for its next call.
func (p *Pass) end() {
	for _, l := range p.layers {
		p.m.be.Free(l)
	}
	p.layers = nil
	p.m.cache.SetDeferEviction(false)
	if p.m.busy == p {
		p.m.busy = nil
	}
}

// Encoding is one frame's DINO patch tokens, computed ahead of the call that
// takes it (BeginEncoded), so that a phase 1 whose frames arrive one by one
// can encode each as it comes. Encoding frames one at a time computes what
// the call's own DINO stage would: the encoder works on each frame alone.
type Encoding struct {
	be   backend.Backend
	t    backend.Tensor // [1, NP, E]
	h, w int
}

// Free releases the tokens (BeginEncoded frees the encodings it takes).
func (e *Encoding) Free() {
	if e != nil && e.t != nil {
		e.be.Free(e.t)
		e.t = nil
	}
}

// Encode begins the DINO encoding of one frame (CHW in [0,1], h×w) as a pass
// of one step per DINO block; Encoding gives the result once it is done. It
// reads only the weights, so it runs beside any call of any model state.
func (m *Model) Encode(ctx context.Context, img []float32, h, w int) (*Pass, error) {
	ps := m.sizes.PatchSize
	switch {
	case m.closed:
		return nil, errors.New("model: Encode after Close")
	case h <= 0 || w <= 0 || h%ps != 0 || w%ps != 0:
		return nil, fmt.Errorf("model: image size %d×%d (h×w) must be positive multiples of the patch size %d", h, w, ps)
	case len(img) != 3*h*w:
		return nil, fmt.Errorf("model: image has %d values, want 3·%d·%d = %d (CHW)", len(img), h, w, 3*h*w)
	}
	return &Pass{m: m, ctx: ctx, imgs: [][]float32{img}, h: h, w: w, call: aggCall{s: 1}, encode: true, out: &Output{}}, nil
}

// Encoding is an encoding pass's result once it is done, else nil. The
// caller owns it.
func (p *Pass) Encoding() *Encoding {
	if !p.encode || p.err != nil {
		return nil
	}
	return p.enc
}

// EncodeCost is what encoding one frame costs, in Cost's units.
func (m *Model) EncodeCost() int { return len(m.dino.blocks) }

// takeEncodings concatenates the pass's encodings into [S, NP, E] and frees
// them.
func (p *Pass) takeEncodings() backend.Tensor {
	be := p.m.be
	parts := make([]backend.Tensor, len(p.encs))
	var np, e int
	for i, enc := range p.encs {
		sh := enc.t.Shape()
		np, e = sh[len(sh)-2], sh[len(sh)-1]
		parts[i] = be.Reshape(enc.t, np, e)
	}
	all := be.Reshape(be.ConcatRows(parts...), len(parts), np, e)
	for _, enc := range p.encs {
		enc.Free()
	}
	p.encs = nil
	return all
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
