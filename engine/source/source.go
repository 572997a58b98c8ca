// Package source reads the frames of the offline tools' inputs one at a time:
// image folders, video files (decoded by ffmpeg over a pipe) and ROS bags.
// Every source streams, so memory stays bounded by a few frames however long
// the input is.
package source

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/lingbotmap/lingbotmap/engine"
)

// Source yields frames in order.
type Source interface {
	// Next returns the next frame, or io.EOF after the last one.
	Next(ctx context.Context) (engine.Frame, error)
	// Len is the number of frames Next will return, or -1 when it is not
	// known in advance.
	Len() int
	// Describe says what is being read, for logs and run.json.
	Describe() string
	// Close releases the input (and stops a decoder process).
	Close() error
}

// Options select frames from any source. Start from DefaultOptions.
type Options struct {
	// FirstK keeps only the first K input frames (0 = all), counted before
	// Stride, as the reference's first_k.
	FirstK int `json:"first_k"`
	// Stride keeps every Stride-th of those frames. It defaults to 1.
	Stride int `json:"stride"`
	// FPS gives stamps to frames that carry none (image folders whose names
	// are not times, videos without a frame rate): frame i is at i/FPS s.
	// It defaults to 30.
	FPS float64 `json:"fps"`
	// Topic is the image topic of a ROS bag (sensor_msgs/Image or
	// sensor_msgs/CompressedImage). Empty picks the only image topic.
	Topic string `json:"topic,omitempty"`
}

// DefaultOptions keep every frame.
func DefaultOptions() Options {
	return Options{Stride: 1, FPS: 30}
}

// Validate names the first option that is out of range.
func (o Options) Validate() error {
	var errs []error
	if o.FirstK < 0 {
		errs = append(errs, fmt.Errorf("'first_k' must be ≥ 0, not %d", o.FirstK))
	}
	if o.Stride < 1 {
		errs = append(errs, fmt.Errorf("'stride' must be ≥ 1, not %d", o.Stride))
	}
	if !(o.FPS > 0) || o.FPS > 1e6 {
		errs = append(errs, fmt.Errorf("'fps' must be a positive frame rate, not %g", o.FPS))
	}
	return errors.Join(errs...)
}

// keep says whether input frame i (0-based) is selected, and done whether no
// later frame can be.
func (o Options) keep(i int) (keep, done bool) {
	if o.FirstK > 0 && i >= o.FirstK {
		return false, true
	}
	return i%o.Stride == 0, false
}

// selected is how many of n input frames are kept.
func (o Options) selected(n int) int {
	if o.FirstK > 0 {
		n = min(n, o.FirstK)
	}
	return (n + o.Stride - 1) / o.Stride
}

// Open picks the source for path: a directory is an image folder, a .bag file
// a ROS bag, anything else a video.
func Open(ctx context.Context, path string, opt Options) (Source, error) {
	if err := opt.Validate(); err != nil {
		return nil, err
	}
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("input: %w", err)
	}
	switch {
	case st.IsDir():
		return OpenFolder(path, opt)
	case strings.EqualFold(filepath.Ext(path), ".bag"):
		return OpenBag(path, opt)
	}
	return OpenVideo(ctx, path, opt)
}
