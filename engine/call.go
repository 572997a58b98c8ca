package engine

import (
	"context"
	"fmt"

	"github.com/lingbotmap/lingbotmap/engine/backend"
	"github.com/lingbotmap/lingbotmap/engine/geom"
	"github.com/lingbotmap/lingbotmap/engine/model"
)

// call is a step of the schedule running on a model state. The current
// window runs a call whole; a next window warming up runs it step by step
// between frames.
type call struct {
	st   step
	m    *model.Model
	pass *model.Pass
	bg   bool // a next window's warm-up
}

// startCall begins st on m: phase 1 or one interval frame, of the kind the
// schedule gave it. encs, when set, are the frames' DINO encodings, run
// ahead; the call takes them.
func (s *stream) startCall(ctx context.Context, st step, m *model.Model, encs []*model.Encoding, bg bool) (*call, error) {
	c := &call{st: st, m: m, bg: bg}
	// a warm-up's heads frame by frame: its steps are slices of a frame
	ahead := !bg && s.overlaps(st)
	ms := model.Step{FrameHeads: bg, SkipAppend: st.kind == NonKeyframe, DeferFetch: ahead, PauseAtHeads: ahead && s.cfg.EncodeBesideHeads}
	ms.KeepDepth = s.keepDepth(st.w, st.kind, bg)
	var p *model.Pass
	var err error
	if encs != nil {
		if p, err = m.BeginEncoded(ctx, encs, ms); err != nil {
			for _, e := range encs {
				e.Free()
			}
		}
	} else {
		imgs := make([][]float32, len(st.ins))
		for i, in := range st.ins {
			imgs[i] = in.pix
		}
		p, err = m.Begin(ctx, imgs, s.h, s.w, ms)
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

// finishCall turns a completed call into results and tells the schedule
// it ran.
func (s *stream) finishCall(c *call) []Result {
	out := c.pass.Output()
	s.ran(c, out.PoseEnc[len(c.st.ins)-1])
	return s.results(c, out)
}

// ran tells the schedule that c ran; last is the pose of its last frame,
// which only a phase 1 needs (schedule.done).
func (s *stream) ran(c *call, last [9]float32) {
	st := c.st
	s.trace(TraceEvent{Event: "call", Frames: len(st.ins), SkipAppend: st.kind == NonKeyframe, Background: c.bg})
	s.done(st, last)
	// phase 1 works on several frames at once; a GPU backend can give the
	// memory it cached for those shapes back now. Live windows run a phase 1
	// every window, beside the frames: there the cached memory is kept, so
	// that the memory held stays flat and no frame waits for allocations.
	if st.op == opPhase1 && (!s.live() || st.w.index == 0) {
		s.trimBackend()
	}
}

// results are a completed call's results.
func (s *stream) results(c *call, out *model.Output) []Result {
	st := c.st
	res := make([]Result, len(st.ins))
	for i, in := range st.ins {
		res[i] = s.result(st.w, in, out, i, st.kind)
		s.keepMaps(&res[i], out.DeviceDepth, out.DeviceConf, i)
	}
	return res
}

// runCall runs st whole on m.
func (s *stream) runCall(ctx context.Context, st step, m *model.Model) ([]Result, error) {
	c, err := s.startCall(ctx, st, m, nil, false)
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
// keyframe, lets the schedule decide and then commits the frame or rolls it
// back (reference §12).
func (s *stream) runFlowFrame(ctx context.Context, st step) (Result, error) {
	w, in := st.w, st.ins[0]
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
	kf := s.decide(st, float64(flow), pose)
	kind, ev := NonKeyframe, "rollback"
	if kf {
		s.m.Commit()
		kind, ev = Keyframe, "commit"
	} else if err := s.m.Rollback(); err != nil {
		return Result{}, fmt.Errorf("engine: rollback: %w", err)
	}
	s.trace(TraceEvent{Event: ev, Flow: float64(flow)})
	r := s.result(w, in, out, 0, kind)
	r.Flow = float64(flow)
	r.dev = dev
	return r, nil
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

// trimBackend lets a GPU backend give the buffers it cached back to the
// driver: after phase 1 (its eight-frame shapes do not come again) and at a
// reset (the next phase 1 would otherwise come on top of the steady state's
// buffers).
func (s *stream) trimBackend() {
	if t, ok := s.be.(backend.Trimmer); ok {
		t.Trim()
	}
}
