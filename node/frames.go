package node

import (
	"context"
	"fmt"
	"image"
	"time"

	"github.com/bluenviron/goroslib/v2/pkg/msgs/std_msgs"

	"github.com/lingbotmap/lingbotmap/engine"
	"github.com/lingbotmap/lingbotmap/engine/pipeline"
)

// The frame path: a callback submits the still-encoded message with its
// header; pipeline workers decode it and preprocess it ahead of the model;
// the results, each with its header, go to the publisher (publisher.go), the
// pipeline's sink: as soon as the model gives a result its pose, odometry
// and TF go out in frame order (Early); workers build the frame's cloud and
// depth messages (Post); one goroutine takes the results in frame order into
// the map and publishes the rest (Add).

// FrameReport describes one frame the node finished with (Options.Observe).
type FrameReport struct {
	Seq uint64
	// Kind and Window are the result's; meaningless when Err is set.
	Kind   engine.FrameKind
	Window int
	// Timing is where the frame's time went in the pipeline.
	Timing pipeline.Timing
	// PoseWritten is when the pose message went to the transport; zero when
	// the frame gave no pose.
	PoseWritten time.Time
	// Deliver is the in-order work for the frame: the map and publishing.
	Deliver time.Duration
	// Err is why the frame gave no pose; Stage says where ("decode",
	// "prepare", "model", "post").
	Err   error
	Stage string
}

// skipError is an input refused before the engine, counted under kind.
type skipError struct {
	kind string
	err  error
}

func (e *skipError) Error() string { return e.err.Error() }
func (e *skipError) Unwrap() error { return e.err }

// startPipeline builds the frame path over the stream. ctx ends it
// without flushing; Close (finish) flushes it.
func (n *Node) startPipeline(ctx context.Context) error {
	pol, err := ParsePolicy(n.cfg.QueuePolicy)
	if err != nil {
		return fmt.Errorf("node: %w", err)
	}
	n.sink = &publisher{n: n}
	st := n.stream
	n.cur.Store(&st)
	n.pipe, err = pipeline.New(ctx, statStream{n}, pipeline.Sink[std_msgs.Header](n.sink), pipeline.Config[std_msgs.Header]{
		Queue:      n.cfg.QueueSize,
		Policy:     pol,
		LockThread: n.cfg.Engine.Device == "cuda",
		Held:       n.held,
		Log:        n.log,
	})
	n.held = nil
	if err != nil {
		return fmt.Errorf("node: %w", err)
	}
	return nil
}

// submit hands one camera message to the pipeline; decode runs on a worker.
// With policy all it waits for room until ctx ends.
func (n *Node) submit(ctx context.Context, h std_msgs.Header, decode func() (*image.RGBA, error)) {
	if n.paused.Load() {
		n.stats.pausedFrames.Add(1)
		return
	}
	seq := n.nextSeq.Add(1) - 1
	in := pipeline.Input[std_msgs.Header]{Seq: seq, Stamp: h.Stamp, Meta: h, Decode: func() (image.Image, error) {
		img, err := decode()
		if err != nil {
			return nil, err
		}
		if err := n.checkSize(img); err != nil {
			return nil, err
		}
		return img, nil
	}}
	if err := n.pipe.Submit(ctx, in); err != nil {
		n.stats.droppedOnClose.Add(1)
	}
}

// checkSize refuses a frame the model cannot take (the first frame of a map
// fixes the size) before it reaches the engine.
func (n *Node) checkSize(img *image.RGBA) error {
	w, h := img.Bounds().Dx(), img.Bounds().Dy()
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.size == [2]int{} {
		if err := engine.CheckFrameSize(w, h, n.cfg.Engine.ImageWidth); err != nil {
			return &skipError{"size", err}
		}
		n.size = [2]int{w, h}
	}
	if n.size != [2]int{w, h} {
		return &skipError{"size_change", fmt.Errorf("image is %d×%d but this map started at %d×%d; call ~reset to start a new map at the new size", w, h, n.size[0], n.size[1])}
	}
	return nil
}

// statStream is the node's stream as the pipeline drives it: after every
// Push and Flush, on the model's thread, it keeps the stream's Stats and
// the call's time for /diagnostics, which therefore never wait for the
// model. It drives the node's current stream (Node.cur), which ~load_map
// replaces between frames.
type statStream struct {
	n *Node
}

func (s statStream) cur() engine.Stream { return *s.n.cur.Load() }

func (s statStream) Push(ctx context.Context, f engine.Frame) ([]engine.Result, error) {
	t := time.Now()
	res, err := s.cur().Push(ctx, f)
	s.after(time.Since(t), err)
	return res, err
}

func (s statStream) Flush(ctx context.Context) ([]engine.Result, error) {
	t := time.Now()
	res, err := s.cur().Flush(ctx)
	s.after(time.Since(t), err)
	return res, err
}

func (s statStream) Stats() engine.CacheStats { return s.cur().Stats() }
func (s statStream) Reset() error             { return s.cur().Reset() }
func (s statStream) Close() error             { return s.cur().Close() }

func (s statStream) after(d time.Duration, err error) {
	st := s.cur().Stats()
	s.n.cacheStats.Store(&st)
	if err == nil {
		s.n.stats.recordModelTime(d)
	}
}

// Drain hands out a frame the engine holds ahead (overlap_frames); its wait
// is the held frame's model time, kept as Push's is.
func (s statStream) Drain(ctx context.Context) ([]engine.Result, error) {
	d, ok := s.cur().(engine.Drainer)
	if !ok {
		return nil, nil
	}
	t := time.Now()
	res, err := d.Drain(ctx)
	s.after(time.Since(t), err)
	return res, err
}

// Prepare and Idle pass the stream's own on (the pipeline asks for them).
func (s statStream) Prepare(f engine.Frame) (engine.Frame, error) {
	if p, ok := s.cur().(engine.Preparer); ok {
		return p.Prepare(f)
	}
	return f, nil
}

func (s statStream) Idle(ctx context.Context) {
	if i, ok := s.cur().(engine.Idler); ok {
		i.Idle(ctx)
	}
}
