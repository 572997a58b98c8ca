package engine

import (
	"fmt"
	"time"

	"github.com/lingbotmap/lingbotmap/engine/preprocess"
)

// input is a preprocessed frame.
type input struct {
	seq   uint64
	stamp time.Time
	pix   []float32
	rgb   *rgbJob
}

// rgbJob converts a frame's pixels to the 8-bit colours of its Result in a
// goroutine, so that on a GPU the conversion overlaps the frame's model run
// instead of following it.
type rgbJob struct {
	done chan struct{}
	rgb  []uint8
}

func startRGB(pix []float32) *rgbJob {
	j := &rgbJob{done: make(chan struct{})}
	go func() {
		j.rgb = preprocess.ToRGB8(pix)
		close(j.done)
	}()
	return j
}

// doneRGB is the job for colours made already (Prepare), or nil when there
// are none to match pix.
func doneRGB(rgb []uint8, pix []float32) *rgbJob {
	if rgb == nil || len(rgb) != len(pix) {
		return nil
	}
	j := &rgbJob{done: make(chan struct{}), rgb: rgb}
	close(j.done)
	return j
}

// get waits for the colours; results share them read-only.
func (j *rgbJob) get() []uint8 {
	<-j.done
	return j.rgb
}

// Prepare preprocesses a frame's image into the pixels and colours Push
// takes; it may run on any goroutine, several at once.
func (s *stream) Prepare(f Frame) (Frame, error) {
	if f.Pixels != nil {
		return f, nil
	}
	if f.Image == nil {
		return Frame{}, fmt.Errorf("engine: frame %d has no image", f.Seq)
	}
	p := s.prePool.Get().(*preprocess.Preprocessor)
	defer s.prePool.Put(p)
	pix, w, h, err := p.Run(f.Image, nil)
	if err != nil {
		return Frame{}, fmt.Errorf("engine: frame %d: %w", f.Seq, err)
	}
	return Frame{Seq: f.Seq, Stamp: f.Stamp, Pixels: pix, Width: w, Height: h, RGB: p.Colours(), prepared: true}, nil
}

// prepare brings a frame to the model resolution.
func (s *stream) prepare(f Frame) (input, error) {
	var pix []float32
	var w, h int
	switch {
	case f.Pixels != nil:
		if f.Width <= 0 || f.Height <= 0 || len(f.Pixels) != 3*f.Width*f.Height {
			return input{}, fmt.Errorf("engine: frame %d: %d pixel values for %d×%d", f.Seq, len(f.Pixels), f.Width, f.Height)
		}
		if f.Width%s.m.Sizes().PatchSize != 0 || f.Height%s.m.Sizes().PatchSize != 0 {
			return input{}, fmt.Errorf("engine: frame %d: preprocessed size %d×%d is not a multiple of the patch size %d", f.Seq, f.Width, f.Height, s.m.Sizes().PatchSize)
		}
		if !f.prepared {
			if i := firstNonFinite(f.Pixels); i >= 0 {
				return input{}, fmt.Errorf("engine: frame %d: pixel value %d is %v", f.Seq, i, f.Pixels[i])
			}
		}
		pix, w, h = f.Pixels, f.Width, f.Height
	case f.Image != nil:
		var err error
		// a new buffer per frame: windowed mode keeps inputs for the next window
		pix, w, h, err = s.pre.Run(f.Image, nil)
		if err != nil {
			return input{}, fmt.Errorf("engine: frame %d: %w", f.Seq, err)
		}
	default:
		return input{}, fmt.Errorf("engine: frame %d has no image", f.Seq)
	}
	if s.h == 0 {
		s.h, s.w = h, w
	} else if h != s.h || w != s.w {
		return input{}, fmt.Errorf("engine: frame %d is %d×%d at model resolution but the stream runs at %d×%d: the image size changed", f.Seq, w, h, s.w, s.h)
	}
	rgb := doneRGB(f.RGB, pix)
	if rgb == nil {
		rgb = startRGB(pix)
	}
	return input{seq: f.Seq, stamp: f.Stamp, pix: pix, rgb: rgb}, nil
}
