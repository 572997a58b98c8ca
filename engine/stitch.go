package engine

import (
	"context"
	"fmt"

	"github.com/lingbotmap/lingbotmap/engine/geom"
)

// stitch joins the windows' results into one map (windowed mode): each
// window is aligned to the one before by the similarity of their shared
// frames, and its results are warped by it. Reference windows hold back the
// results a next window replaces (the reference stitches overlap frames from
// the later window); live windows emit at once and keep the last results
// for the next window's alignment.
type stitch struct {
	// the current window's
	sim     geom.Similarity
	aligned bool
	raw     []Result // results not yet aligned (windows after the first)

	held     []Result // reference: results that a next window may still replace; live: the last Overlap results emitted
	prevTail *geom.WindowFrames
	sims     []geom.Similarity

	windowed bool
	liveJoin bool // windows joined live (Config.WindowMode)
	shared   int  // frames consecutive windows share (Config.OverlapSize)
}

func newStitch(cfg Config) stitch {
	t := stitch{windowed: cfg.Windowed, liveJoin: cfg.Windowed && cfg.WindowMode == WindowLive, shared: cfg.OverlapSize}
	t.begin(0)
	return t
}

// clear forgets every window (a new map).
func (t *stitch) clear() {
	t.held, t.prevTail, t.sims = nil, nil, nil
	t.begin(0)
}

// begin starts window index's stitching: window 0 needs no alignment.
func (t *stitch) begin(index int) {
	t.sim, t.aligned, t.raw = geom.Identity(), index == 0, nil
}

// emit passes results on. Streaming mode returns them at once. Windowed mode
// aligns them to the previous window and holds back the last Overlap results,
// which a next window would replace (the reference stitches overlap frames from
// the later window); window 0 is held whole until a second window exists or the
// input ends, because the reference re-encodes window 0's quaternions only when
// there are two or more windows.
func (t *stitch) emit(w *window, res []Result) ([]Result, error) {
	if !t.windowed {
		return res, nil
	}
	if t.liveJoin {
		return t.emitLive(w, res)
	}
	if !t.aligned {
		t.raw = append(t.raw, res...)
		need := min(t.shared, len(t.prevTail.PoseEnc))
		if len(t.raw) < need {
			return nil, nil
		}
		if err := t.align(w); err != nil {
			return nil, err
		}
		res, t.raw = t.raw, nil
	}
	for i := range res {
		t.warp(w, &res[i])
	}
	t.held = append(t.held, res...)
	if w.index == 0 {
		return nil, nil
	}
	return t.release(t.shared), nil
}

// emitLive passes results on at once (live windows): window 0 as produced,
// later windows warped by their similarity. A window's re-runs (its scale
// frames) only serve its alignment: those frames were emitted already. The
// last Overlap results emitted are kept for the next window's alignment.
func (t *stitch) emitLive(w *window, res []Result) ([]Result, error) {
	if !t.aligned {
		t.raw = append(t.raw, res...)
		if len(t.raw) < w.rerun {
			return nil, nil
		}
		if err := t.align(w); err != nil {
			return nil, err
		}
		res, t.raw = t.raw[w.rerun:], nil
	}
	if w.index > 0 {
		for i := range res {
			warpResult(&res[i], t.sim)
		}
	}
	t.held = keepLast(append(t.held, res...), t.shared)
	return res, nil
}

// release returns all held results but the newest keep.
func (t *stitch) release(keep int) []Result {
	n := max(len(t.held)-keep, 0)
	out := append([]Result(nil), t.held[:n]...)
	t.held = append(t.held[:0], t.held[n:]...)
	return out
}

// align computes the current window w's similarity to the previous
// (aligned) one.
func (t *stitch) align(w *window) error {
	cur := framesOf(t.raw)
	overlap := t.shared
	if t.liveJoin {
		overlap = w.rerun // prevTail holds exactly the re-run frames' results
	}
	sim, err := geom.PairwiseAlignment(*t.prevTail, cur, overlap)
	if err != nil {
		return fmt.Errorf("engine: aligning window %d: %w", w.index, err)
	}
	t.sim, t.aligned = sim, true
	t.sims = append(t.sims, sim)
	return nil
}

// warp applies window w's similarity to a result; windowed mode re-encodes
// every pose (the reference warps every window once there are two or more).
func (t *stitch) warp(w *window, r *Result) {
	if w.index == 0 && len(t.sims) == 0 {
		return // window 0 is warped when the second window starts
	}
	warpResult(r, t.sim)
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

// nextWindow closes the current window and starts the next one on the
// frames the schedule retained (c): the held results but the overlap go
// out, the overlap's become what the new window aligns to, and the new
// window re-runs the retained frames on a cleared cache.
func (s *stream) nextWindow(ctx context.Context, c change) ([]Result, error) {
	if c.dropped > 0 {
		s.log.Warn("windowed flow mode: overlap larger than the window's streamed frames; the reference drops these frames", "frames", c.dropped)
	}
	if s.live() {
		return s.nextLiveWindow(ctx, c)
	}
	if s.win.index == 0 {
		s.sims = append(s.sims, geom.Identity())
		// window 0 becomes part of a multi-window map: warp it by the
		// identity, which re-encodes its quaternions as the reference does.
		for i := range s.held {
			warpResult(&s.held[i], geom.Identity())
		}
	}
	out := s.release(s.overlap())
	// the held tail (aligned) is what the next window aligns to; it is not emitted
	tail := framesOf(s.held)
	s.prevTail = &tail
	s.held = s.held[:0]
	s.m.Reset()
	s.trimBackend()
	s.startWindow(c)
	s.begin(c.index)
	s.trace(TraceEvent{Event: "reset"})
	s.log.Info("new window", "window", c.index, "overlap_frames", len(c.retained))
	for _, in := range c.retained {
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
// aligns to the results emitted for the same frames; a warm-up (warmup.go)
// has run the re-runs already.
func (s *stream) nextLiveWindow(ctx context.Context, c change) ([]Result, error) {
	if s.win.index == 0 {
		s.sims = append(s.sims, geom.Identity())
	}
	prev, err := s.emittedFor(c)
	if err != nil {
		return nil, err
	}
	s.prevTail = &prev
	if s.next != nil {
		return s.switchWindow(ctx)
	}
	s.m.Reset()
	s.startWindow(c)
	s.begin(c.index)
	s.trace(TraceEvent{Event: "reset"})
	s.log.Info("new window", "window", c.index, "rerun_frames", c.rerun, "gap_frames", c.gap)
	var out []Result
	for _, in := range c.retained[:c.rerun] {
		res, err := s.feed(ctx, in)
		if err != nil {
			return out, err
		}
		out = append(out, res...)
	}
	return out, nil
}

// emittedFor is what live windows emitted for the frames c's window
// re-runs, the first of its retained frames, the latest frames pushed
// before the current Push (all emitted already), for the next window's
// alignment: matched by position, checked by sequence number.
func (t *stitch) emittedFor(c change) (geom.WindowFrames, error) {
	lo := len(t.held) - len(c.retained)
	if lo < 0 {
		return geom.WindowFrames{}, fmt.Errorf("engine: window %d: %d results kept for %d re-run frames", c.index, len(t.held), len(c.retained))
	}
	res := t.held[lo : lo+c.rerun]
	for i, r := range res {
		if r.Seq != c.retained[i].seq {
			return geom.WindowFrames{}, fmt.Errorf("engine: window %d: re-run frame %d is frame %d, but the result emitted there is frame %d", c.index, i, c.retained[i].seq, r.Seq)
		}
	}
	return framesOf(res), nil
}

// flush ends the input's stitching: a reference window's results not
// aligned yet align to what there is, and everything held goes out; live
// windows have emitted everything, and what is not aligned yet re-runs
// frames emitted already.
func (t *stitch) flush(w *window) ([]Result, error) {
	if t.liveJoin {
		t.raw = nil
		return nil, nil
	}
	if !t.aligned && len(t.raw) > 0 {
		if err := t.align(w); err != nil {
			return nil, err
		}
		res := t.raw
		t.raw = nil
		for i := range res {
			t.warp(w, &res[i])
		}
		t.held = append(t.held, res...)
	}
	return t.release(0), nil
}
