package engine

import (
	"context"
	"fmt"
	"math"

	"github.com/lingbotmap/lingbotmap/engine/model"
)

// Live windows start the next window early: the frames it re-runs (the
// current window's last overlap frames) are known as they arrive, so a
// second model state (a fork of the weights) runs them in the background,
// a bounded slice of work after each frame of the current window, and takes
// over when the current window ends without re-running anything then. Its
// phase 1 needs all its scale frames, so their DINO encodings run one by one
// as they arrive, and the rest of the phase when the last one is in. The
// values are those of running the window change serially: each state's
// calls see only its own caches, so interleaving changes no result, and the
// encoder works on each frame alone.

// warmup is a next window warming up.
type warmup struct {
	win   *window
	m     *model.Model
	p1    []input           // its phase-1 frames so far
	encs  []*model.Encoding // their encodings so far, in order
	enc   *model.Pass       // the encoding in progress, of p1[len(encs)]
	queue []input           // later frames it has not started yet
	call  *call             // the call in progress, run step by step
	raw   []Result          // its results: the re-runs its alignment needs
}

// add takes an arrived re-run frame.
func (nx *warmup) add(in input, scaleFrames int) {
	if nx.win.n == 0 && nx.call == nil && len(nx.p1) < scaleFrames {
		nx.p1 = append(nx.p1, in)
		return
	}
	nx.queue = append(nx.queue, in)
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
	// KVBytes is the second model state's KV storage.
	KVBytes int64 `json:"kv_bytes"`
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

// early says whether live windows start early. It needs fixed-interval
// windows (a flow window's end is known only when it comes) whose re-run
// frames hold the next window's whole phase 1 and begin after the current
// window's phase 1.
func (s *stream) early() bool {
	if !s.live() || s.serialWindows || s.cfg.FlowThreshold > 0 {
		return false
	}
	ov := s.overlap()
	return ov >= s.cfg.ScaleFrames && s.windowFrames()-ov >= s.cfg.ScaleFrames
}

// warm runs after the current window has run in's frame: once the frame is
// one the next window re-runs, it joins the next window's queue and the
// warm-up advances by its share of the work left.
func (s *stream) warm(ctx context.Context, in input) error {
	w := s.win
	start := s.windowFrames() - s.overlap() // the next window's first frame, in this window
	if w.n <= start {
		return nil
	}
	if s.next == nil {
		m := s.spare
		if m == nil {
			var err error
			if m, err = s.m.Fork(); err != nil {
				return fmt.Errorf("engine: a second model state for the next window: %w", err)
			}
		}
		s.spare = nil
		m.Reset()
		nx := &warmup{win: s.newWindow(w.index + 1), m: m}
		nx.win.rerun = s.overlap()
		// every re-run frame so far: in, and the earlier ones when the warm-up
		// starts late (a stream resumed from a saved state)
		first := w.n - len(w.tail)
		for i, t := range w.tail {
			if first+i >= start {
				nx.add(t, s.cfg.ScaleFrames)
			}
		}
		s.next = nx
	} else {
		s.next.add(in, s.cfg.ScaleFrames)
	}
	// Spread the work left evenly over the frames left in this window,
	// this one included, so that the warm-up is done when the window ends.
	// Costs are estimates, not timings: on a GPU a step returns as soon as
	// its work is queued.
	left := s.windowFrames() - w.n + 1
	work := s.warmupCost(left - 1)
	steps, cost, err := s.advance(ctx, (work+left-1)/left)
	s.bg.Steps += steps
	s.bg.Cost += cost
	return err
}

// warmupCost is the warm-up's work left with notYet frames still to come.
func (s *stream) warmupCost(notYet int) int {
	nx := s.next
	c := s.m.CallCost(len(nx.queue) + notYet)
	if nx.call != nil {
		c += nx.call.pass.Cost()
	} else if nx.win.n == 0 {
		c += s.m.CallCost(len(nx.p1)) - len(nx.encs)*s.m.EncodeCost()
		if nx.enc != nil {
			c -= s.m.EncodeCost() - nx.enc.Cost()
		}
	}
	return c
}

// advance runs warm-up steps until their cost reaches budget or no work is
// ready (phase 1 waits for all its frames).
func (s *stream) advance(ctx context.Context, budget int) (steps, cost int, err error) {
	nx := s.next
	for cost < budget {
		if nx.call == nil {
			switch {
			case nx.win.n == 0 && len(nx.encs) == s.cfg.ScaleFrames:
				ins, encs := nx.p1, nx.encs
				nx.p1, nx.encs = nil, nil
				if nx.call, err = s.startCall(ctx, nx.win, nx.m, ins, encs, true); err != nil {
					return steps, cost, err
				}
			case nx.win.n == 0:
				// encode the phase-1 frames as they come
				if nx.enc == nil {
					if len(nx.encs) == len(nx.p1) {
						return steps, cost, nil
					}
					if nx.enc, err = nx.m.Encode(ctx, nx.p1[len(nx.encs)].pix, s.h, s.w); err != nil {
						return steps, cost, err
					}
				}
				cost += nx.enc.NextCost()
				steps++
				done, err := nx.enc.Step()
				if err != nil {
					return steps, cost, err
				}
				if done {
					nx.encs = append(nx.encs, nx.enc.Encoding())
					nx.enc = nil
				}
				continue
			case len(nx.queue) > 0:
				ins := []input{nx.queue[0]}
				nx.queue = nx.queue[1:]
				if nx.call, err = s.startCall(ctx, nx.win, nx.m, ins, nil, true); err != nil {
					return steps, cost, err
				}
			default:
				return steps, cost, nil
			}
		}
		cost += nx.call.pass.NextCost()
		steps++
		done, err := s.stepCall(nx.call)
		if err != nil {
			return steps, cost, err
		}
		if done {
			nx.raw = append(nx.raw, s.finishCall(nx.call)...)
			nx.call = nil
		}
	}
	return steps, cost, nil
}

// switchWindow ends the current window: the warm-up finishes what is left
// (nothing when it kept pace), the warmed window aligns to the emitted tail
// and takes over, and the old model state becomes the spare for the next
// warm-up.
func (s *stream) switchWindow(ctx context.Context) ([]Result, error) {
	steps, cost, err := s.advance(ctx, math.MaxInt)
	s.bg.Switched, s.bg.SwitchSteps, s.bg.SwitchCost = true, steps, cost
	if err != nil {
		return nil, err
	}
	nx := s.next
	if nx.call != nil || len(nx.queue) > 0 || nx.win.n != nx.win.rerun {
		return nil, fmt.Errorf("engine: window %d warmed up on %d of its %d frames", nx.win.index, nx.win.n, nx.win.rerun)
	}
	s.next = nil
	old := s.m
	old.Reset()
	s.m, s.spare = nx.m, old
	s.win = nx.win
	s.trace(TraceEvent{Event: "reset", Frames: nx.win.n})
	s.log.Info("new window", "window", s.win.index, "overlap_frames", nx.win.n, "switch_steps", steps)
	return s.emitLive(nx.raw)
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
