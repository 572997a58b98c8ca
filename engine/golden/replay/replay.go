// Package replay is a stand-in for the engine: an engine.Stream that
// answers every frame with a golden case's reference outputs, so that tests
// and demos of the node can check each published value against the official
// code's numbers without running a model.
package replay

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"

	"github.com/lingbotmap/lingbotmap/engine"
	"github.com/lingbotmap/lingbotmap/engine/geom"
	"github.com/lingbotmap/lingbotmap/engine/golden"
	"github.com/lingbotmap/lingbotmap/engine/weights"
)

// Stream is an engine.Stream that answers with a golden case's
// reference outputs (outputs.safetensors from the official PyTorch code)
// instead of running a model. Frame i of the input gets reference frame
// i mod N, whatever its pixels, so tests can check every published value
// against known numbers. Like the real engine it buffers the first
// scale_frames frames (phase 1) and returns them together.
type Stream struct {
	mu          sync.Mutex
	n, w, h     int
	scaleFrames int
	poseEnc     [][9]float32
	depth       [][]float32
	conf        [][]float32
	rgb         [][]uint8
	kind        []engine.FrameKind

	next     int            // reference index of the next pushed frame
	pending  []engine.Frame // phase-1 buffer
	phase1   bool           // still buffering scale frames
	framesIn int64
	commits  int
}

// New loads dir/outputs.safetensors, dir/inputs.safetensors (for
// the colours) and dir/manifest.json (for the number of scale frames).
func New(dir string) (*Stream, error) {
	out, err := golden.Open(dir, golden.OutputsFile)
	if err != nil {
		return nil, fmt.Errorf("replay: %w", err)
	}
	defer out.Close()
	in, err := golden.Open(dir, golden.InputsFile)
	if err != nil {
		return nil, fmt.Errorf("replay: %w", err)
	}
	defer in.Close()
	m, err := golden.Load(dir)
	if err != nil {
		return nil, fmt.Errorf("replay: %w", err)
	}

	inf, ok := out.Info("depth_conf")
	if !ok || len(inf.Shape) != 3 {
		return nil, fmt.Errorf("replay: %s has no depth_conf tensor of shape [N,H,W]", dir)
	}
	s := &Stream{n: inf.Shape[0], h: inf.Shape[1], w: inf.Shape[2], scaleFrames: m.Settings.NumScaleFrames, phase1: true}
	if s.n < 1 || s.scaleFrames < 1 || s.scaleFrames > s.n {
		return nil, fmt.Errorf("replay: %s: %d frames with %d scale frames is not a usable case", dir, s.n, s.scaleFrames)
	}
	get := func(st *weights.SafeTensors, key string, per int) ([]float32, error) {
		v, err := st.Float32(key)
		if err != nil {
			return nil, fmt.Errorf("replay: %s: %w", key, err)
		}
		if len(v) != s.n*per {
			return nil, fmt.Errorf("replay: %s has %d values, want %d×%d", key, len(v), s.n, per)
		}
		return v, nil
	}
	hw := s.h * s.w
	pe, err := get(out, "pose_enc", 9)
	if err != nil {
		return nil, err
	}
	depth, err := get(out, "depth", hw)
	if err != nil {
		return nil, err
	}
	conf, err := get(out, "depth_conf", hw)
	if err != nil {
		return nil, err
	}
	ft, err := get(out, "frame_type", 1)
	if err != nil {
		return nil, err
	}
	img, err := get(in, "images", 3*hw)
	if err != nil {
		return nil, err
	}
	for i := 0; i < s.n; i++ {
		var e [9]float32
		copy(e[:], pe[9*i:9*i+9])
		s.poseEnc = append(s.poseEnc, e)
		s.depth = append(s.depth, depth[i*hw:(i+1)*hw])
		s.conf = append(s.conf, conf[i*hw:(i+1)*hw])
		s.kind = append(s.kind, engine.FrameKind(ft[i]))
		rgb := make([]uint8, 3*hw)
		for c := 0; c < 3; c++ {
			for p := 0; p < hw; p++ {
				v := img[(i*3+c)*hw+p]
				rgb[3*p+c] = uint8(math.Round(float64(min(max(v, 0), 1)) * 255))
			}
		}
		s.rgb = append(s.rgb, rgb)
	}
	return s, nil
}

// Len is the number of reference frames; Size is their resolution.
func (s *Stream) Len() int         { return s.n }
func (s *Stream) Size() (w, h int) { return s.w, s.h }
func (s *Stream) ScaleFrames() int { return s.scaleFrames }

// Reference is the result reference frame i yields (with zero Seq and Stamp).
func (s *Stream) Reference(i int) engine.Result {
	i = ((i % s.n) + s.n) % s.n
	kind := s.kind[i]
	return engine.Result{
		Kind:       kind,
		CamToWorld: geom.PoseEncToCamToWorld(s.poseEnc[i]),
		PoseEnc:    s.poseEnc[i],
		Intrinsics: geom.IntrinsicsFromPoseEnc(s.poseEnc[i], s.w, s.h),
		Width:      s.w,
		Height:     s.h,
		Depth:      s.depth[i],
		Conf:       s.conf[i],
		RGB:        s.rgb[i],
	}
}

func (s *Stream) result(f engine.Frame) engine.Result {
	r := s.Reference(s.next)
	s.next++
	r.Seq, r.Stamp = f.Seq, f.Stamp
	if r.Kind != engine.NonKeyframe {
		s.commits++
	}
	return r
}

func checkFrame(f engine.Frame) error {
	if f.Image == nil && len(f.Pixels) == 0 {
		return errors.New("replay: frame has neither Image nor Pixels")
	}
	return nil
}

// Push implements engine.Stream.
func (s *Stream) Push(ctx context.Context, f engine.Frame) ([]engine.Result, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := checkFrame(f); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.framesIn++
	if s.phase1 {
		s.pending = append(s.pending, f)
		if len(s.pending) < s.scaleFrames {
			return nil, nil
		}
		return s.flushLocked(), nil
	}
	return []engine.Result{s.result(f)}, nil
}

func (s *Stream) flushLocked() []engine.Result {
	var out []engine.Result
	for _, f := range s.pending {
		out = append(out, s.result(f))
	}
	s.pending = nil
	s.phase1 = false
	return out
}

// Flush implements engine.Stream: the buffered scale frames come out.
func (s *Stream) Flush(ctx context.Context) ([]engine.Result, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.pending) == 0 {
		return nil, nil
	}
	return s.flushLocked(), nil
}

// Stats implements engine.Stream with a cache shaped like the reference's
// (scale pages, then a sliding window of 4 live pages).
func (s *Stream) Stats() engine.CacheStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	scale := min(s.commits, s.scaleFrames)
	live := min(s.commits-scale, 4)
	return engine.CacheStats{
		FrameCount:    s.commits,
		ScalePages:    scale,
		LivePages:     live,
		FreePages:     4 - live,
		SpecialTokens: 6 * s.commits,
		VisiblePages:  scale + live,
		PageSize:      s.h / 14 * (s.w / 14),
		FramesIn:      s.framesIn,
	}
}

// Reset implements engine.Stream: the next frame is reference frame 0 again.
func (s *Stream) Reset() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.next, s.commits, s.pending, s.phase1 = 0, 0, nil, true
	return nil
}

// Close implements engine.Stream.
func (s *Stream) Close() error { return nil }
