package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/lingbotmap/lingbotmap/engine/backend"
	"github.com/lingbotmap/lingbotmap/engine/model"
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
//
// A frame whose points are made on the device (points.go) is held twice.
// Its points need its final pose as the kernel's parameters, made on the
// host from the downloaded pose encoding (geom: float64 arithmetic and
// math.Tan, which a device kernel would not reproduce to the bit), so they
// cannot be queued right behind its heads. Instead, when the frame's
// copies are collected (behind the next frame's queued call), its points
// are queued behind that next call (backend.AsyncUnprojector) and the
// frame is held again, its results made; it comes out with the call after,
// once its points have come back. The device always has the next frame's
// model work queued while the host waits or works.

var _ Drainer = (*stream)(nil)

// overlaps says whether st may be queued ahead: a streaming frame of the
// streaming schedule, of a kind fixed before it runs (not a flow frame),
// whose result gets no device points or gets them from a backend that
// queues them without waiting. Windowed schedules align and stitch results
// between frames and warm the next window up, so their frames run as
// before.
func (s *stream) overlaps(st step) bool {
	if !s.cfg.OverlapFrames || st.op != opFrame || s.cfg.Windowed {
		return false
	}
	return !s.keepDepth(st.w, st.kind, false) || s.points.async != nil
}

// pointsAhead is a collected frame's results held while their device
// points are in flight.
type pointsAhead struct {
	res  []Result
	pend []pendingPoints
}

// pendingPoints are res[i]'s points in flight and the maps they are made
// from, freed once they came back.
type pendingPoints struct {
	i int
	p backend.PendingPoints
	d *devMaps
}

// runAhead queues st's call with its copies in flight and holds it; the
// frames held before it, if any, are collected after: the one whose points
// are in flight comes out, and the one whose copies are does too, or is
// held for its points. With Config.EncodeBesideHeads the call is held
// before its heads instead, and the next one runs them with its own
// encoding beside (startBeside).
func (s *stream) runAhead(ctx context.Context, st step) ([]Result, error) {
	var c *call
	var err error
	if held := s.ahead; held != nil && held.pass.Paused() {
		c, err = s.startBeside(ctx, st, held)
	} else {
		c, err = s.startCall(ctx, st, s.m, nil, false)
	}
	for err == nil && !c.pass.Queued() && !c.pass.Paused() {
		var done bool
		if done, err = c.pass.Step(); err == nil && done {
			err = errors.New("engine: a call queued ahead completed without its copies in flight")
			c.pass.Abort()
		}
	}
	if err != nil {
		// the frames held before come out first, then the error, which is
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
	// a failed frame's points, as without overlap, fail its Push alone:
	// the next frame comes out as it would
	out, perr := s.collectPoints()
	res, err := s.collectCall(prev)
	if err == nil {
		out = append(out, s.startPoints(res)...)
	}
	if perr != nil {
		return out, perr
	}
	return out, err
}

// startBeside starts st's call with its frame's DINO encoding queued beside
// the heads of held, the frame held ahead and paused before them: the
// encoder's upload, then held's camera head and the encoder as a branch,
// then held's dense heads and copies (model.Pass.HeadsBeside). held's own
// failure stays with held, for its collection; the error returned is st's.
func (s *stream) startBeside(ctx context.Context, st step, held *call) (*call, error) {
	enc, err := s.m.Encode(ctx, st.ins[0].pix, s.h, s.w)
	if err != nil {
		// held's heads still run, as the collection steps it
		return nil, err
	}
	if err := held.pass.HeadsBeside(enc); err != nil && enc.Encoding() == nil {
		return nil, fmt.Errorf("engine: encoding frame %d beside the heads of frame %d: %w", st.ins[0].seq, held.st.ins[0].seq, err)
	}
	s.beside++
	return s.startCall(ctx, st, s.m, []*model.Encoding{enc.Encoding()}, false)
}

// startPoints queues the device points of the results of a frame collected
// ahead and holds them (pointsAhead); it returns the results when none of
// them gets points.
func (s *stream) startPoints(res []Result) []Result {
	if s.points == nil || s.points.async == nil {
		return res
	}
	h := &pointsAhead{res: res}
	for i := range res {
		r := &res[i]
		d := r.dev
		if !s.wantsPoints(r, d) {
			continue
		}
		r.dev = nil
		// the maps are the held frame's now, not the Push's (freeMaps)
		s.kept = slices.DeleteFunc(s.kept, func(k *devMaps) bool { return k == d })
		h.pend = append(h.pend, pendingPoints{i: i, p: s.points.async.StartUnproject(d.depth, d.conf, s.unprojection(r, d)), d: d})
	}
	if len(h.pend) == 0 {
		return res
	}
	s.pointsAhead = h
	return nil
}

// collectPoints waits for the points in flight and hands out their frame's
// results.
func (s *stream) collectPoints() ([]Result, error) {
	h := s.pointsAhead
	if h == nil {
		return nil, nil
	}
	s.pointsAhead = nil
	var first error
	for _, p := range h.pend {
		xyz, pix, err := p.p.Wait()
		s.freeDev(p.d)
		if first != nil {
			continue
		}
		first = s.keptPoints(&h.res[p.i], xyz, pix, err)
	}
	return h.res, first
}

// queueHeads queues the heads and copies of c (nil: none) where it is held
// before them (Config.EncodeBesideHeads) with nothing beside them: it is
// then held as a call with its copies in flight is. A failure stays with
// the pass, for its next step.
func queueHeads(c *call) {
	if c == nil || !c.pass.Paused() {
		return
	}
	for !c.pass.Queued() {
		if done, err := c.pass.Step(); done || err != nil {
			return
		}
	}
}

// collect hands out every frame held ahead, with its device points.
func (s *stream) collect() ([]Result, error) {
	c := s.ahead
	s.ahead = nil
	// the held call's heads first: the device runs them while the host
	// waits for the points in flight
	queueHeads(c)
	out, perr := s.collectPoints()
	res, err := s.collectCall(c)
	if err == nil {
		err = s.makePoints(res)
	}
	out = append(out, res...)
	if perr != nil {
		return out, perr
	}
	return out, err
}

// collectCall waits for c's copies and makes its results (c nil: none).
func (s *stream) collectCall(c *call) ([]Result, error) {
	if c == nil {
		return nil, nil
	}
	// c's heads are queued (HeadsBeside, or collect's queueHeads): one
	// step waits for the copies in flight, or gives the error of heads
	// that failed to queue
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

// dropCall ends c without results (c nil: none).
func dropCall(c *call) {
	if c != nil {
		c.pass.Abort()
	}
}

// freeDev frees the maps d holds.
func (s *stream) freeDev(d *devMaps) {
	s.be.Free(d.depth)
	s.be.Free(d.conf)
	d.depth, d.conf = nil, nil
}

// dropAhead ends the frames held ahead without results (Reset, Close).
func (s *stream) dropAhead() {
	dropCall(s.ahead)
	s.ahead = nil
	if h := s.pointsAhead; h != nil {
		for _, p := range h.pend {
			// the copies' memory is the backend's until they are waited for
			p.p.Wait()
			s.freeDev(p.d)
		}
		s.pointsAhead = nil
	}
}

// heldSeq is the first frame held ahead, if any.
func (s *stream) heldSeq() (uint64, bool) {
	switch {
	case s.pointsAhead != nil:
		return s.pointsAhead.res[0].Seq, true
	case s.ahead != nil:
		return s.ahead.st.ins[0].seq, true
	}
	return 0, false
}

// Drain hands out the results of the frame held ahead (Drainer).
func (s *stream) Drain(ctx context.Context) ([]Result, error) {
	if s.closed {
		return nil, errors.New("engine: stream is closed")
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	defer s.freeMaps()
	out, err := s.collect()
	return dropMaps(out), err
}
