package engine

import (
	"context"
	"fmt"
	"math"

	"github.com/lingbotmap/lingbotmap/engine/geom"
	"github.com/lingbotmap/lingbotmap/engine/model"
)

// Live windows start the next window early. The next window re-runs only
// its scale frames (nextLiveWindow), which are known as they arrive, so a
// second model state (a fork of the weights) runs them in the background,
// a bounded slice of work after each frame of the current window, and takes
// over when the current window ends without running anything then. Its
// phase 1 needs all its scale frames: their DINO encodings run one by one
// as they arrive, and the rest of the phase (aggregator and heads) spreads
// over the overlap frames after the last one, so that no frame carries more
// than a share of a frame's work. The values are those of changing windows
// serially: each state's calls see only its own caches, so interleaving
// changes no result, and the encoder works on each frame alone.

// warmup is a next window warming up.
type warmup struct {
	win  *window
	m    *model.Model
	p1   []input           // its scale frames so far
	encs []*model.Encoding // their encodings so far, in order
	enc  *model.Pass       // the encoding in progress, of p1[len(encs)]
	call *call             // its phase 1, run step by step
	raw  []Result          // its results: the re-runs its alignment needs
	// aligned gets the window's similarity, worked out on a goroutine of
	// its own once raw is complete (a median over every depth pixel of the
	// scale frames: too long for the frame that changes windows); nil
	// until then.
	aligned chan alignment
}

// alignment is a warmed window's similarity to the window before it.
type alignment struct {
	sim geom.Similarity
	err error
}

// startAlign works out the warmed window's similarity in the background from
// its re-run results and the results emitted for the same frames, when
// those are still held (they are: the warm-up ends within the overlap).
func (s *stream) startAlign(nx *warmup) {
	lo := len(s.held) - len(nx.raw)
	for ; lo >= 0; lo-- {
		if s.held[lo].Seq == nx.raw[0].Seq {
			break
		}
	}
	if lo < 0 || lo+len(nx.raw) > len(s.held) {
		return // the switch aligns as a serial change does
	}
	prev := s.held[lo : lo+len(nx.raw)]
	for i, r := range prev {
		if r.Seq != nx.raw[i].Seq {
			return
		}
	}
	pf, cf, n := framesOf(prev), framesOf(nx.raw), len(nx.raw)
	nx.aligned = make(chan alignment, 1)
	go func() {
		sim, err := geom.PairwiseAlignment(pf, cf, n)
		nx.aligned <- alignment{sim, err}
	}()
}

// WarmupStats describes the live windows' background work during the last
// Push: where window changes happen and how much of the next window's
// warm-up each frame carried.
type WarmupStats struct {
	// Window is the window warming up (0 when none is).
	Window int `json:"window"`
	// Frames the warming window has run so far.
	Frames int `json:"frames"`
	// Steps and Cost are the warm-up steps the last Push ran after its frame
	// and their cost (model.Pass units: a transformer block on one frame).
	Steps int `json:"steps"`
	Cost  int `json:"cost"`
	// Switched says that the last Push changed windows; SwitchSteps and
	// SwitchCost are what was left of the warm-up then (the stall).
	Switched    bool `json:"switched"`
	SwitchSteps int  `json:"switch_steps"`
	SwitchCost  int  `json:"switch_cost"`
	// AlignedAhead says that the change took the new window's alignment
	// from the goroutine that worked it out while the warm-up ended.
	AlignedAhead bool `json:"aligned_ahead"`
	// KVBytes is the second model state's KV storage.
	KVBytes int64 `json:"kv_bytes"`
	// IdleSteps and IdleCost are the warm-up steps Idle ran since the
	// Push before the last one: work done while no frame waited.
	IdleSteps int `json:"idle_steps"`
	IdleCost  int `json:"idle_cost"`
}

// Idler is a Stream with work that may run between frames: the next live
// window's warm-up. A caller that runs the stream calls Idle when no frame
// is waiting for it; Idle runs a bounded slice of that work (at most half
// a frame's) and returns. What Idle runs, the frames after it need not
// carry, so that on a camera slower than the model a window change costs
// the frames nothing; the results are the same either way. An error is
// returned by the next Push.
type Idler interface {
	Idle(ctx context.Context)
}

var _ Idler = (*stream)(nil)

// Idle runs up to half a frame's worth of the next window's warm-up steps
// that are ready (none before its scale frames are all in).
func (s *stream) Idle(ctx context.Context) {
	if s.closed || s.idleErr != nil || s.next == nil {
		return
	}
	if _, ok := s.warmupSteps(); !ok {
		return // the ready work, the scale frames' encodings, ran with them
	}
	steps, cost, err := s.advance(ctx, max(s.m.CallCost(1)/2, 1))
	s.idle.IdleSteps += steps
	s.idle.IdleCost += cost
	if err != nil {
		s.idleErr = err
	}
}

// WindowReporter is a Stream that reports its live windows' background work
// (New's streams are).
type WindowReporter interface {
	Warmup() WarmupStats
}

var _ WindowReporter = (*stream)(nil)

// Warmup reports the background work of the last Push.
func (s *stream) Warmup() WarmupStats {
	st := s.bg
	if s.next != nil {
		st.Window, st.Frames = s.next.win.index, s.next.win.n
		st.KVBytes = s.next.m.KVBytes()
	} else if s.spare != nil {
		st.KVBytes = s.spare.KVBytes()
	}
	return st
}

// warmUp runs after the current window has taken in: the schedule says
// whether a warm-up of the next window starts (on a second model state) or
// takes in, and the warm-up advances by its share of the work left.
func (s *stream) warmUp(ctx context.Context, in input) error {
	ws, ok := s.warm(in, s.next != nil)
	if !ok {
		return nil
	}
	if ws.start != nil {
		m := s.spare
		if m == nil {
			var err error
			if m, err = s.m.Fork(); err != nil {
				return fmt.Errorf("engine: a second model state for the next window: %w", err)
			}
		}
		s.spare = nil
		m.Reset()
		s.next = &warmup{win: ws.start, m: m}
	}
	s.next.p1 = append(s.next.p1, ws.take...)
	// Until the last scale frame is in, the work ready is their encodings,
	// run as they come. Then the steps left are split over the frames left
	// in this window, this one included, with the least largest share, so
	// that the warm-up is done when the window ends. Costs are estimates,
	// not timings: on a GPU a step returns as soon as its work is queued.
	budget := math.MaxInt
	if ws.left > 1 {
		if steps, ok := s.warmupSteps(); ok {
			budget = minShare(steps, ws.left)
		}
	}
	steps, cost, err := s.advance(ctx, budget)
	s.bg.Steps += steps
	s.bg.Cost += cost
	return err
}

// warmupSteps lists the costs of the warm-up's steps left, in order, once
// all its scale frames are in.
func (s *stream) warmupSteps() ([]int, bool) {
	nx := s.next
	switch {
	case nx.call != nil:
		return nx.call.pass.StepCosts(nil), true
	case nx.win.n > 0:
		return nil, true
	case len(nx.p1) < nx.win.rerun:
		return nil, false
	}
	var c []int
	todo := len(nx.p1) - len(nx.encs)
	if nx.enc != nil {
		c = nx.enc.StepCosts(c)
		todo--
	}
	for range todo {
		c = s.m.EncodeStepCosts(c)
	}
	return s.m.EncodedStepCosts(c, nx.win.rerun, model.Step{FrameHeads: true}), true
}

// minShare is the least budget under which steps, run in order with each
// frame taking as many as fit, fit in frames.
func minShare(steps []int, frames int) int {
	lo, hi := 0, 0
	for _, c := range steps {
		lo, hi = max(lo, c), hi+c
	}
	lo = max(lo, (hi+frames-1)/frames)
	fits := func(b int) bool {
		used, n := 0, 1
		for _, c := range steps {
			if used+c > b {
				used, n = 0, n+1
			}
			used += c
		}
		return n <= frames
	}
	for lo < hi {
		if mid := (lo + hi) / 2; fits(mid) {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo
}

// advance runs the warm-up steps that are ready (phase 1 waits for all its
// frames) as long as their cost stays within budget; the first step runs
// whatever its cost.
func (s *stream) advance(ctx context.Context, budget int) (steps, cost int, err error) {
	nx := s.next
	for {
		var next int // the next step's cost
		switch {
		case nx.call != nil:
		case nx.win.n > 0:
			return steps, cost, nil
		case len(nx.encs) == nx.win.rerun:
			encs := nx.encs
			nx.encs = nil
			if nx.call, err = s.startCall(ctx, s.phase1(nx.win, nx.p1), nx.m, encs, true); err != nil {
				return steps, cost, err
			}
			nx.p1 = nil
		case nx.enc == nil && len(nx.encs) < len(nx.p1):
			// encode the scale frames as they come
			if nx.enc, err = nx.m.Encode(ctx, nx.p1[len(nx.encs)].pix, s.h, s.w); err != nil {
				return steps, cost, err
			}
		case nx.enc == nil:
			return steps, cost, nil
		}
		if nx.call != nil {
			next = nx.call.pass.NextCost()
		} else {
			next = nx.enc.NextCost()
		}
		if cost+next > budget && steps > 0 {
			return steps, cost, nil
		}
		cost += next
		steps++
		if nx.call == nil {
			done, err := nx.enc.Step()
			if err != nil {
				return steps, cost, err
			}
			if done {
				nx.encs = append(nx.encs, nx.enc.Encoding())
				nx.enc = nil
			}
			continue
		}
		done, err := s.stepCall(nx.call)
		if err != nil {
			return steps, cost, err
		}
		if done {
			nx.raw = append(nx.raw, s.finishCall(nx.call)...)
			nx.call = nil
			if len(nx.raw) == nx.win.rerun {
				s.startAlign(nx)
			}
		}
	}
}

// switchWindow ends the current window: the warm-up finishes what is left
// (nothing when it kept pace), the warmed window aligns to the results
// emitted for its scale frames and takes over, and the old model state
// becomes the spare for the next warm-up.
func (s *stream) switchWindow(ctx context.Context) ([]Result, error) {
	steps, cost, err := s.advance(ctx, math.MaxInt)
	s.bg.Switched, s.bg.SwitchSteps, s.bg.SwitchCost = true, steps, cost
	if err != nil {
		return nil, err
	}
	nx := s.next
	if nx.call != nil || nx.win.n != nx.win.rerun {
		return nil, fmt.Errorf("engine: window %d has not run its %d scale frames at the change", nx.win.index, nx.win.rerun)
	}
	s.next = nil
	raw, ahead := nx.raw, false
	var a alignment
	if nx.aligned != nil {
		if a = <-nx.aligned; a.err != nil {
			return nil, fmt.Errorf("engine: aligning window %d: %w", nx.win.index, a.err)
		}
		// the re-runs served the alignment only: nothing to emit
		s.sims = append(s.sims, a.sim)
		s.bg.AlignedAhead = true
		raw, ahead = nil, true
	}
	old := s.m
	old.Reset()
	s.m, s.spare = nx.m, old
	s.takeOver(nx.win)
	s.begin(nx.win.index)
	if ahead {
		s.sim, s.aligned = a.sim, true
	}
	s.trace(TraceEvent{Event: "reset", Frames: nx.win.n})
	s.log.Info("new window", "window", s.win.index, "rerun_frames", nx.win.n, "gap_frames", nx.win.gap, "switch_steps", steps)
	return s.emitLive(s.win, raw)
}

// dropWarmup abandons a warm-up (reset, end of input, a saved state that
// does not hold it): its model state becomes the spare.
func (s *stream) dropWarmup() {
	if s.next == nil {
		return
	}
	if s.next.enc != nil {
		s.next.enc.Abort()
	}
	for _, e := range s.next.encs {
		e.Free()
	}
	s.next.m.Reset()
	if s.spare == nil {
		s.spare = s.next.m
	} else {
		s.next.m.Close()
	}
	s.next = nil
}
