package engine

import (
	"context"
	"fmt"

	"github.com/lingbotmap/lingbotmap/engine/backend"
	"github.com/lingbotmap/lingbotmap/engine/geom"
)

// PointMaker is a Stream that can make each result's map points on the
// device that ran the model (a backend.Unprojector), where the depth and
// confidence maps already are: the filter and unprojection run there and
// only the kept points come back, in Result.Kept. New's streams are
// PointMakers; on a backend without the capability, and for results it
// cannot serve (reference windows, whose results are held across calls),
// Result.Kept stays nil and the consumer unprojects on the host.
type PointMaker interface {
	// MakePoints tells the stream its consumer's filter, once, before the
	// first Push; keyframesOnly leaves non-keyframes without points. It
	// reports whether the backend makes points at all.
	MakePoints(filt geom.PointFilter, keyframesOnly bool) (onDevice bool, err error)
}

var _ PointMaker = (*stream)(nil)

// pointRequest is what MakePoints was told.
type pointRequest struct {
	filt          geom.PointFilter
	keyframesOnly bool
	unproj        backend.Unprojector
	// async is unproj when it can queue points without waiting for them
	// (overlap_frames holds such frames ahead, ahead.go)
	async backend.AsyncUnprojector
}

// devMaps are one frame's depth and confidence maps kept on the device
// until its final pose is known, for the Push or Flush that made them; a
// result copy left holding them after that sees nil tensors.
type devMaps struct {
	depth, conf backend.Tensor
	// scale is the window similarity's depth scale (warpResult), warps
	// the number of warps: one warp is what the kernel reproduces.
	scale float32
	warps int
}

// MakePoints asks for device points with filt (PointMaker).
func (s *stream) MakePoints(filt geom.PointFilter, keyframesOnly bool) (bool, error) {
	if err := filt.Check(); err != nil {
		return false, fmt.Errorf("engine: %w", err)
	}
	u, ok := s.be.(backend.Unprojector)
	if !ok {
		s.points = nil
		return false, nil
	}
	s.points = &pointRequest{filt: filt, keyframesOnly: keyframesOnly, unproj: u}
	s.points.async, _ = u.(backend.AsyncUnprojector)
	return true, nil
}

// keepDepth says whether a call of window w should keep its depth maps on
// the device: only for results it will emit in this Push (not a warm-up's
// or a live window's re-runs, not reference windows, which hold results
// across calls), and only where points are wanted for its kind.
func (s *stream) keepDepth(w *window, kind FrameKind, bg bool) bool {
	switch {
	case s.points == nil || bg:
		return false
	case s.cfg.Windowed && !s.live():
		return false
	case kind == Scale && w.rerun > 0:
		return false
	case kind == NonKeyframe && s.points.keyframesOnly:
		return false
	}
	return true
}

// keepMaps hands frame i of a finished call's kept maps to its result.
func (s *stream) keepMaps(r *Result, depth, conf []backend.Tensor, i int) {
	if i >= len(depth) || i >= len(conf) || depth[i] == nil || conf[i] == nil {
		return
	}
	d := &devMaps{depth: depth[i], conf: conf[i], scale: 1}
	s.kept = append(s.kept, d)
	r.dev = d
}

// makePoints gives the results going out, their poses final now, their
// device points. push calls it before a live window's warm-up queues more
// work, so that the points' copy does not wait behind that work.
func (s *stream) makePoints(out []Result) error {
	if s.points == nil {
		return nil
	}
	for i := range out {
		r := &out[i]
		d := r.dev
		r.dev = nil
		if !s.wantsPoints(r, d) {
			continue
		}
		xyz, pix, err := s.points.unproj.Unproject(d.depth, d.conf, s.unprojection(r, d))
		if err := s.keptPoints(r, xyz, pix, err); err != nil {
			return err
		}
	}
	return nil
}

// wantsPoints says whether r, with its kept maps d, gets device points.
func (s *stream) wantsPoints(r *Result, d *devMaps) bool {
	switch {
	case d == nil || d.depth == nil || d.warps > 1 || r.Kept != nil:
		return false
	case r.Kind == NonKeyframe && s.points.keyframesOnly:
		return false
	}
	return true
}

// unprojection is r's filter and final camera for its maps d.
func (s *stream) unprojection(r *Result, d *devMaps) backend.Unprojection {
	f := s.points.filt
	return backend.Unprojection{
		Width: r.Width, Height: r.Height,
		Intrinsics: r.Intrinsics, CamToWorld: r.CamToWorld,
		DepthScale: d.scale, ConfThreshold: f.ConfThreshold, Stride: f.Stride,
	}
}

// keptPoints gives r the points the backend made (or its error).
func (s *stream) keptPoints(r *Result, xyz []float32, pix []int32, err error) error {
	if err != nil {
		return fmt.Errorf("engine: frame %d: points on the %s backend: %w", r.Seq, s.be.Name(), err)
	}
	r.Kept = &geom.KeptPoints{Filter: s.points.filt, XYZ: xyz, Pixel: pix}
	s.devicePoints.Add(1)
	return nil
}

// freeMaps frees the maps kept during a Push or Flush.
func (s *stream) freeMaps() {
	for _, d := range s.kept {
		s.be.Free(d.depth)
		s.be.Free(d.conf)
		d.depth, d.conf = nil, nil
	}
	s.kept = s.kept[:0]
}

// Push runs a frame (Stream): push's work, then every map kept on the
// device during it freed.
func (s *stream) Push(ctx context.Context, f Frame) ([]Result, error) {
	defer s.freeMaps()
	out, err := s.push(ctx, f)
	return dropMaps(out), err
}

// Flush runs what is buffered (Stream); see Push.
func (s *stream) Flush(ctx context.Context) ([]Result, error) {
	defer s.freeMaps()
	out, err := s.flush(ctx)
	if err == nil {
		err = s.makePoints(out)
	}
	return dropMaps(out), err
}

// dropMaps clears the results' references to kept maps before they leave
// the stream.
func dropMaps(out []Result) []Result {
	for i := range out {
		out[i].dev = nil
	}
	return out
}
