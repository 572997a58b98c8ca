// Package source reads the frames of the offline tools' inputs one at a time:
// image folders, video files (decoded by ffmpeg over a pipe), ROS bags and
// ROS 2 bags in MCAP.
// Every source streams, so memory stays bounded by a few frames however long
// the input is.
package source

import (
	"context"
	"errors"
	"fmt"
	"image"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/lingbotmap/lingbotmap/engine"
	"github.com/lingbotmap/lingbotmap/engine/preprocess"
	"github.com/lingbotmap/lingbotmap/msgs/rosbag2"
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
	// FrameRate gives stamps to frames that carry none (image folders whose
	// names are not times, videos without a frame rate): frame i is at
	// i/FrameRate s. It defaults to 30.
	FrameRate float64 `json:"frame_rate"`
	// SampleFPS samples videos first, keeping one frame in round(video fps /
	// SampleFPS), as the reference's --fps (0 = every frame); FirstK and
	// Stride then count sampled frames. It defaults to 10, the reference's
	// default.
	SampleFPS float64 `json:"sample_fps"`
	// Topic is the image topic of a ROS bag (sensor_msgs/Image or
	// sensor_msgs/CompressedImage). Empty picks the only image topic.
	Topic string `json:"topic,omitempty"`
	// RotateCW90 turns every frame 90° clockwise (portrait footage stored
	// sideways), as the reference's --rotate_clockwise_90.
	RotateCW90 bool `json:"rotate_cw90,omitempty"`
}

// Deferred is a Source whose frames can be decoded away from the reader: NextDeferred
// selects the next frame and reads what it needs in order, and the frame's
// Decode, safe to call on any goroutine, does the costly rest. A pipeline
// thereby decodes several frames at once while they stay in input order.
type Deferred interface {
	Source
	// NextDeferred returns the next selected frame, or io.EOF after the
	// last one. A frame whose Decode fails was not counted by the source
	// (Skipped): the caller counts it, in input order.
	NextDeferred(ctx context.Context) (DeferredFrame, error)
}

// DeferredFrame is a frame read but not yet decoded.
type DeferredFrame struct {
	Seq   uint64
	Stamp time.Time
	// Decode decodes the frame and turns it as the options ask.
	Decode func() (image.Image, error)
}

// frame makes the engine's frame from a decoded image, turned when asked.
func (o Options) frame(seq uint64, stamp time.Time, img image.Image) (engine.Frame, error) {
	img, err := o.orient(seq, img)
	if err != nil {
		return engine.Frame{}, err
	}
	b := img.Bounds()
	return engine.Frame{Seq: seq, Stamp: stamp, Image: img, Width: b.Dx(), Height: b.Dy()}, nil
}

// orient turns a decoded image when the options ask for it.
func (o Options) orient(seq uint64, img image.Image) (image.Image, error) {
	if !o.RotateCW90 {
		return img, nil
	}
	img, err := preprocess.Orient(img, 6)
	if err != nil {
		return nil, fmt.Errorf("frame %d: turning it 90°: %w", seq, err)
	}
	return img, nil
}

// DefaultOptions keep every frame of folders and bags and sample videos at
// 10 fps, as the reference.
func DefaultOptions() Options {
	return Options{Stride: 1, FrameRate: 30, SampleFPS: 10}
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
	if !(o.FrameRate > 0) || o.FrameRate > 1e6 {
		errs = append(errs, fmt.Errorf("'frame_rate' must be a positive frame rate, not %g", o.FrameRate))
	}
	if o.SampleFPS < 0 || o.SampleFPS > 1e6 || o.SampleFPS != o.SampleFPS {
		errs = append(errs, fmt.Errorf("'sample_fps' must be ≥ 0, not %g", o.SampleFPS))
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

// Open picks the source for path: a directory is a rosbag2 bag when it holds
// a metadata.yaml or .mcap/.db3 files, else an image folder; a .bag file is a
// ROS bag, a .mcap file a ROS 2 bag, a .db3 file a rosbag2 sqlite3 bag,
// anything else a video.
func Open(ctx context.Context, path string, opt Options) (Source, error) {
	if err := opt.Validate(); err != nil {
		return nil, err
	}
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("input: %w", err)
	}
	switch {
	case st.IsDir() && rosbag2.IsBagDir(path),
		strings.EqualFold(filepath.Ext(path), ".db3"),
		filepath.Base(path) == rosbag2.MetadataFile:
		return OpenROS2Bag(path, opt)
	case st.IsDir():
		return OpenFolder(path, opt)
	case strings.EqualFold(filepath.Ext(path), ".bag"):
		return OpenBag(path, opt)
	case strings.EqualFold(filepath.Ext(path), ".mcap"):
		return OpenMCAP(path, opt)
	}
	return OpenVideo(ctx, path, opt)
}
