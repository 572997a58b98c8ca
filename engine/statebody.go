package engine

import (
	"fmt"
	"time"

	"github.com/lingbotmap/lingbotmap/engine/binstate"
	"github.com/lingbotmap/lingbotmap/engine/geom"
)

// The stream's part of a session state file (state.go), after the model's:
// the schedule's counters and buffers and the stitching's results and
// similarities, in the order the format fixes.

func (s *stream) saveStream(w *binstate.Writer) {
	w.Int(s.h)
	w.Int(s.w)
	w.I64(s.framesIn)
	w.Int(s.flowDecs)
	win := s.win
	w.Int(win.index)
	w.Int(win.scaleN)
	w.Int(win.n)
	w.Int(win.kfs)
	w.F32Raw(win.lastKF[:])
	w.Int(win.lastKn)
	saveSim(w, s.sim)
	w.Bool(s.aligned)
	saveInputs(w, win.buf)
	saveResults(w, s.raw)
	saveInputs(w, win.tail)
	w.Int(win.rerun)
	w.Int(win.gap)
	saveResults(w, s.held)
	saveInputs(w, s.recent)
	w.Bool(s.prevTail != nil)
	if s.prevTail != nil {
		pt := s.prevTail
		w.Int(len(pt.PoseEnc))
		for _, p := range pt.PoseEnc {
			w.F32Raw(p[:])
		}
		w.Bool(pt.Depth != nil)
		if pt.Depth != nil {
			for _, d := range pt.Depth {
				w.F32s(d)
			}
		}
		w.Bool(pt.Keyframe != nil)
		for _, k := range pt.Keyframe {
			w.Bool(k)
		}
	}
	w.Int(len(s.sims))
	for _, sim := range s.sims {
		saveSim(w, sim)
	}
}

// maxListFrames bounds the per-list frame counts a state file may declare.
const maxListFrames = 1 << 16

func (s *stream) loadStream(r *binstate.Reader) {
	s.h = r.Int("stream height", 0, 1<<14)
	s.w = r.Int("stream width", 0, 1<<14)
	s.framesIn = r.I64()
	s.flowDecs = r.Int("flow decisions", 0, 1<<40)
	if st := s.m.Stats(); r.Err() == nil && st.FrameCount > 0 && s.h*s.w == 0 {
		r.Fail(fmt.Errorf("%w: cached frames without a resolution", binstate.ErrCorrupt))
	}
	px := 3 * s.h * s.w
	win := &window{index: r.Int("window index", 0, 1<<40)}
	win.scaleN = r.Int("window scale frames", 0, s.cfg.ScaleFrames)
	win.n = r.Int("window frames", 0, 1<<40)
	win.kfs = r.Int("window keyframes", 0, 1<<40)
	r.F32Raw(win.lastKF[:])
	win.lastKn = r.Int("last keyframe", -1, 1<<40)
	s.sim = loadSim(r)
	s.aligned = r.Bool("window aligned")
	win.buf = loadInputs(r, px, s.cfg.ScaleFrames)
	s.raw = loadResults(r, s.h, s.w)
	win.tail = loadInputs(r, px, max(s.cfg.OverlapSize, 0))
	win.rerun = r.Int("re-run frames", 0, max(s.cfg.OverlapSize, 0))
	win.gap = r.Int("gap frames", 0, max(s.cfg.OverlapSize, 0))
	s.win = win
	s.held = loadResults(r, s.h, s.w)
	s.recent = loadInputs(r, px, max(s.cfg.OverlapSize, 0))
	s.prevTail = nil
	if r.Bool("previous tail") {
		n := r.Int("previous tail frames", 0, maxListFrames)
		pt := &geom.WindowFrames{}
		for i := 0; i < n && r.Err() == nil; i++ {
			var p [9]float32
			r.F32Raw(p[:])
			pt.PoseEnc = append(pt.PoseEnc, p)
		}
		if r.Bool("previous tail depth") {
			for i := 0; i < n && r.Err() == nil; i++ {
				pt.Depth = append(pt.Depth, r.F32s("previous tail depth", s.h*s.w))
			}
		}
		if r.Bool("previous tail keyframes") {
			pt.Keyframe = make([]bool, 0, n)
			for i := 0; i < n && r.Err() == nil; i++ {
				pt.Keyframe = append(pt.Keyframe, r.Bool("keyframe flag"))
			}
		}
		s.prevTail = pt
	}
	n := r.Int("window similarities", 0, maxListFrames)
	s.sims = nil
	for i := 0; i < n && r.Err() == nil; i++ {
		s.sims = append(s.sims, loadSim(r))
	}
}

func saveSim(w *binstate.Writer, sim geom.Similarity) {
	w.F64(sim.Scale)
	for _, row := range sim.R {
		for _, v := range row {
			w.F64(v)
		}
	}
	for _, v := range sim.T {
		w.F64(v)
	}
}

func loadSim(r *binstate.Reader) geom.Similarity {
	var sim geom.Similarity
	sim.Scale = r.F64()
	for i := range sim.R {
		for j := range sim.R[i] {
			sim.R[i][j] = r.F64()
		}
	}
	for i := range sim.T {
		sim.T[i] = r.F64()
	}
	return sim
}

func saveTime(w *binstate.Writer, t time.Time) {
	w.Bool(t.IsZero())
	if !t.IsZero() {
		w.I64(t.UnixNano())
	}
}

func loadTime(r *binstate.Reader) time.Time {
	if r.Bool("zero time") {
		return time.Time{}
	}
	return time.Unix(0, r.I64())
}

func saveInputs(w *binstate.Writer, ins []input) {
	w.Int(len(ins))
	for _, in := range ins {
		w.I64(int64(in.seq))
		saveTime(w, in.stamp)
		w.F32s(in.pix)
	}
}

func loadInputs(r *binstate.Reader, px, maxN int) []input {
	n := r.Int("buffered inputs", 0, maxN)
	var out []input
	for i := 0; i < n && r.Err() == nil; i++ {
		in := input{seq: uint64(r.I64()), stamp: loadTime(r)}
		in.pix = r.F32s("input pixels", px)
		if r.Err() == nil && len(in.pix) != px {
			r.Fail(fmt.Errorf("%w: an input holds %d pixel values, the stream's resolution needs %d", binstate.ErrCorrupt, len(in.pix), px))
		}
		if r.Err() == nil {
			in.rgb = startRGB(in.pix)
			out = append(out, in)
		}
	}
	return out
}

func saveResults(w *binstate.Writer, res []Result) {
	w.Int(len(res))
	for _, x := range res {
		w.I64(int64(x.Seq))
		saveTime(w, x.Stamp)
		w.Int(int(x.Kind))
		for _, row := range x.CamToWorld {
			for _, v := range row {
				w.F64(v)
			}
		}
		w.F32Raw(x.PoseEnc[:])
		for _, v := range x.Intrinsics {
			w.F64(v)
		}
		w.Int(x.Width)
		w.Int(x.Height)
		w.F32s(x.Depth)
		w.F32s(x.Conf)
		w.F32s(x.Points)
		w.F32s(x.PointsConf)
		w.Bytes(x.RGB)
		w.F64(x.Flow)
		w.Int(x.Window)
	}
}

func loadResults(r *binstate.Reader, h, w int) []Result {
	n := r.Int("held results", 0, maxListFrames)
	var out []Result
	for i := 0; i < n && r.Err() == nil; i++ {
		x := Result{Seq: uint64(r.I64()), Stamp: loadTime(r)}
		x.Kind = FrameKind(r.Int("frame kind", 0, int(NonKeyframe)))
		for a := range x.CamToWorld {
			for b := range x.CamToWorld[a] {
				x.CamToWorld[a][b] = r.F64()
			}
		}
		r.F32Raw(x.PoseEnc[:])
		for a := range x.Intrinsics {
			x.Intrinsics[a] = r.F64()
		}
		x.Width = r.Int("result width", 0, w)
		x.Height = r.Int("result height", 0, h)
		x.Depth = r.F32s("depth", h*w)
		x.Conf = r.F32s("confidence", h*w)
		x.Points = r.F32s("points", 3*h*w)
		x.PointsConf = r.F32s("point confidence", h*w)
		x.RGB = r.Bytes("colours", 3*h*w)
		x.Flow = r.F64()
		x.Window = r.Int("result window", 0, 1<<40)
		out = append(out, x)
	}
	return out
}
