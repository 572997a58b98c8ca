package engine

import (
	"context"
	"errors"
	"fmt"
)

// Frames queued ahead (Config.OverlapFrames). Without them a frame's call
// ends with a wait for its outputs, and the device idles while the host
// makes the results, returns them, and prepares and queues the next frame.
// With them a streaming frame's call stops once its work and its copies to
// the host are queued; the frame is held, and the next frame's call is
// queued before the held frame's copies are waited for and its results
// made. The model state, the schedule and the trace advance when a call is
// queued, in frame order as before; only the host's work on the outputs
// moves, so the results are the same.

var _ Drainer = (*stream)(nil)

// overlaps says whether st may be queued ahead: a streaming frame of the
// streaming schedule, of a kind fixed before it runs (not a flow frame),
// whose result gets no device points (those wait for its final pose).
// Windowed schedules align and stitch results between frames and warm
// the next window up, so their frames run as before.
func (s *stream) overlaps(st step) bool {
	return s.cfg.OverlapFrames && st.op == opFrame && !s.cfg.Windowed && !s.keepDepth(st.w, st.kind, false)
}

// runAhead queues st's call with its copies in flight and holds it; the
// frame held before it, if any, is collected after, its results returned.
func (s *stream) runAhead(ctx context.Context, st step) ([]Result, error) {
	c, err := s.startCall(ctx, st, s.m, nil, false)
	for err == nil && !c.pass.Queued() {
		var done bool
		if done, err = c.pass.Step(); err == nil && done {
			err = errors.New("engine: a call queued ahead completed without its copies in flight")
			c.pass.Abort()
		}
	}
	if err != nil {
		// the frame held before comes out first, then the error, which is
		// this frame's
		out, cerr := s.collect()
		if cerr != nil {
			return out, cerr
		}
		return out, err
	}
	// an interval frame's schedule step needs no pose (schedule.done)
	s.ran(c, [9]float32{})
	prev := s.ahead
	s.ahead = c
	return s.collectCall(prev)
}

// collect hands out the frame held ahead, if any.
func (s *stream) collect() ([]Result, error) {
	c := s.ahead
	s.ahead = nil
	return s.collectCall(c)
}

// collectCall waits for c's copies and makes its results (c nil: none).
func (s *stream) collectCall(c *call) ([]Result, error) {
	if c == nil {
		return nil, nil
	}
	done, err := s.stepCall(c)
	if err == nil && !done {
		err = fmt.Errorf("engine: frame %d held ahead did not complete", c.st.ins[0].seq)
		c.pass.Abort()
	}
	if err != nil {
		return nil, err
	}
	return s.emit(c.st.w, s.results(c, c.pass.Output()))
}

// dropAhead ends the frame held ahead without results (Reset, Close).
func (s *stream) dropAhead() {
	if s.ahead != nil {
		s.ahead.pass.Abort()
		s.ahead = nil
	}
}

// Drain hands out the results of the frame held ahead (Drainer).
func (s *stream) Drain(ctx context.Context) ([]Result, error) {
	if s.closed {
		return nil, errors.New("engine: stream is closed")
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	out, err := s.collect()
	return dropMaps(out), err
}
