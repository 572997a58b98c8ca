// Package engine is the streaming LingBot-Map pipeline: frames in, camera poses,
// intrinsics and depth out. It owns preprocessing, the keyframe policies
// (interval and optical flow), windowed mode with similarity stitching, and the
// schedule (phase 1 on the scale frames together, then one frame at a time).
// It never sees ROS; the node and the offline tools drive it through Stream.
//
// The schedule (schedule.go) decides from the frames' order alone what the
// model runs; the stream executes it: stream.go is the loop, call.go the
// model calls, stitch.go the window changes and their alignment, warmup.go
// the live windows' early start, state*.go the session state files.
package engine

import (
	"context"
	"image"
	"time"

	"github.com/lingbotmap/lingbotmap/engine/geom"
)

// FrameKind is what a frame became in the cache.
type FrameKind uint8

const (
	// Scale frames are the first frames of a stream or window, run together.
	Scale FrameKind = 0
	// Keyframe frames are committed to the KV cache.
	Keyframe FrameKind = 1
	// NonKeyframe frames attend to the cache but are not kept.
	NonKeyframe FrameKind = 2
)

func (k FrameKind) String() string {
	switch k {
	case Scale:
		return "scale"
	case Keyframe:
		return "keyframe"
	case NonKeyframe:
		return "non-keyframe"
	}
	return "unknown"
}

// Frame is one input image. Either Image or Pixels must be set.
type Frame struct {
	Seq   uint64
	Stamp time.Time
	Image image.Image
	// Pixels is an already preprocessed image, float32 CHW in [0,1] at the model
	// resolution (3·Height·Width values); when set, Image is ignored.
	Pixels        []float32
	Width, Height int
	// RGB, with Pixels, is their 8-bit HWC copy when it was made already
	// (Preparer.Prepare makes it off the model's thread).
	RGB []uint8
	// prepared: Prepare made Pixels from 8-bit values, so Push need not
	// scan them for NaN and Inf on the model's thread.
	prepared bool
}

// Result is the model's output for one frame.
type Result struct {
	Seq   uint64
	Stamp time.Time
	Kind  FrameKind
	// CamToWorld is the camera pose (OpenCV/REP 103 optical axes: x right, y down,
	// z forward), rotation orthonormalised from the model's quaternion.
	CamToWorld [4][4]float64
	// PoseEnc is the raw 9-vector [t(3), quaternion XYZW (unnormalised), fov_h, fov_w],
	// after window alignment in windowed mode.
	PoseEnc [9]float32
	// Intrinsics are fx, fy, cx, cy at the model resolution.
	Intrinsics [4]float64
	// Width and Height are the model resolution of Depth, Conf and RGB.
	Width, Height int
	Depth, Conf   []float32 // Height·Width, row-major
	// Points and PointsConf are the point head's world points (3·H·W, HWC) when
	// the weights have a point head, else nil.
	Points, PointsConf []float32
	// RGB is the preprocessed image (HWC, 8 bit) the model saw, for colouring points.
	RGB []uint8
	// Flow is the mean reprojection flow to the last keyframe (flow keyframes only).
	Flow float64
	// Window is the window that produced the result (windowed mode).
	Window int
	// Kept are the frame's map points made on the device for the filter a
	// PointMaker was told, or nil (then the consumer unprojects Depth).
	Kept *geom.KeptPoints

	dev *devMaps // the maps still on the device, inside the stream only
}

// CacheStats describes the KV cache after the last call.
type CacheStats struct {
	FrameCount    int   `json:"frame_count"` // frames committed since the last reset
	ScalePages    int   `json:"scale_pages"`
	LivePages     int   `json:"live_pages"`
	FreePages     int   `json:"free_pages"`
	SpecialTokens int   `json:"special_tokens"`
	VisiblePages  int   `json:"visible_pages"`
	LastPageLen   int   `json:"last_page_len"`
	PageSize      int   `json:"page_size"`
	CameraFrames  int   `json:"camera_cache_frames"` // frames in the camera head's cache
	KVBytes       int64 `json:"kv_bytes"`            // storage reserved for the KV cache
	Window        int   `json:"window"`
	FramesIn      int64 `json:"frames_in"` // frames pushed since the stream started
	// PointsOnDevice counts the results given device points (Result.Kept)
	// since the stream started.
	PointsOnDevice int64 `json:"points_device_frames"`
}

// Preparer is a Stream whose preprocessing can run ahead of Push on other
// goroutines, so that a frame's resize and colour conversion never wait in
// line with the model: Prepare turns a frame's Image into the Pixels and RGB
// that Push then takes as they are. It is safe for concurrent use.
type Preparer interface {
	Prepare(f Frame) (Frame, error)
}

// Drainer is a Stream that may hold a frame's results back to queue the
// next frame's model work first (Config.OverlapFrames): Drain hands out
// what it holds, so that a caller with no next frame at hand need not wait
// for one. Flush drains too; Reset and Close drop what is held, and
// SaveState refuses while a frame is held.
type Drainer interface {
	Drain(ctx context.Context) ([]Result, error)
}

// Stream is a running model: push frames, get results in input order.
type Stream interface {
	// Push adds a frame. It may return no result (phase 1 buffers the scale
	// frames) or several.
	Push(ctx context.Context, f Frame) ([]Result, error)
	// Flush processes what is buffered at the end of input.
	Flush(ctx context.Context) ([]Result, error)
	// Stats describes the cache.
	Stats() CacheStats
	// Reset starts a new map: clears the caches and the window alignment.
	Reset() error
	// Close releases the model and its memory.
	Close() error
}
