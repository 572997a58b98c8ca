package node

import (
	"context"
	"errors"
	"fmt"
	"image"
	"time"

	"github.com/bluenviron/goroslib/v2/pkg/msgs/geometry_msgs"
	"github.com/bluenviron/goroslib/v2/pkg/msgs/nav_msgs"
	"github.com/bluenviron/goroslib/v2/pkg/msgs/sensor_msgs"
	"github.com/bluenviron/goroslib/v2/pkg/msgs/std_msgs"
	"github.com/bluenviron/goroslib/v2/pkg/msgs/tf2_msgs"

	"github.com/lingbotmap/lingbotmap/engine"
	"github.com/lingbotmap/lingbotmap/engine/geom"
	"github.com/lingbotmap/lingbotmap/engine/pipeline"
	"github.com/lingbotmap/lingbotmap/msgs"
)

// The frame path: a callback submits the still-encoded message; pipeline
// workers decode it and preprocess it ahead of the model; as soon as the
// model gives a result its pose, odometry and TF go out in frame order
// (early); workers build the frame's cloud and depth messages (post); one
// goroutine takes the results in frame order into the map and publishes the
// rest (deliver).

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
	n.pipe, err = pipeline.New(ctx, n.stream, pipeline.Config{
		Queue:      n.cfg.QueueSize,
		Policy:     pol,
		LockThread: n.cfg.Engine.Device == "cuda",
		Early:      n.early,
		Post:       n.post,
		Deliver:    n.deliver,
		AfterPush:  n.afterPush,
		OnDrop:     func(in pipeline.Input) { n.forget(in.Seq) },
		Log:        n.log,
	})
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
	n.mu.Lock()
	n.frameIDs[seq] = h.FrameId
	n.mu.Unlock()
	in := pipeline.Input{Seq: seq, Stamp: h.Stamp, Decode: func() (image.Image, error) {
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
		n.forget(seq)
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

// forget drops the header frame id of a frame that left the pipeline.
func (n *Node) forget(seq uint64) {
	n.mu.Lock()
	delete(n.frameIDs, seq)
	n.mu.Unlock()
}

// afterPush runs on the model's thread: it keeps the stream's Stats for
// /diagnostics, which therefore never wait for the model.
func (n *Node) afterPush(s engine.Stream, d time.Duration, err error) {
	st := s.Stats()
	n.cacheStats.Store(&st)
	if err == nil {
		n.stats.recordModelTime(d)
	}
}

// camFrame is the frame id of a result's camera: camera_frame when set,
// else the input message's, else "camera".
func (n *Node) camFrame(seq uint64) string {
	if f := n.cfg.CameraFrame; f != "" {
		return f
	}
	n.mu.Lock()
	f := n.frameIDs[seq]
	n.mu.Unlock()
	if f == "" {
		f = "camera"
	}
	return f
}

// early publishes a result's pose, odometry and TF the moment the model gave
// it, in frame order, without waiting for the frame's clouds and images,
// and returns when the pose was written (zero when the pose is no rigid
// transform: post fails that result whole).
func (n *Node) early(o pipeline.Output) any {
	r := o.Result
	t, q, err := geom.Decompose(r.CamToWorld)
	if err != nil {
		return time.Time{}
	}
	camFrame := n.camFrame(r.Seq)
	mapHdr := std_msgs.Header{Seq: uint32(r.Seq), Stamp: r.Stamp, FrameId: n.cfg.MapFrame}
	// Odometry and TF describe base_frame when it is set, else the camera.
	child, ct, cq := camFrame, t, q
	if n.baseToCam != nil {
		child = n.cfg.BaseFrame
		// both factors are rigid, so the product decomposes
		ct, cq, _ = geom.Decompose(geom.Mul4(r.CamToWorld, geom.InvertRigid(*n.baseToCam)))
	}
	n.write(n.out.pose, &geometry_msgs.PoseStamped{Header: mapHdr, Pose: msgs.Pose(t, q)})
	written := time.Now()
	n.write(n.out.odom, &nav_msgs.Odometry{
		Header:       mapHdr,
		ChildFrameId: child,
		Pose:         geometry_msgs.PoseWithCovariance{Pose: msgs.Pose(ct, cq)},
	})
	if n.cfg.PublishTF {
		n.write(n.out.tf, &tf2_msgs.TFMessage{Transforms: []geometry_msgs.TransformStamped{{
			Header:       mapHdr,
			ChildFrameId: child,
			Transform:    msgs.Transform(ct, cq),
		}}})
		if n.baseToCam != nil && !n.staticSent {
			// the base→camera transform goes out once, with the first TF
			n.staticSent = true
			bt, bq, _ := geom.Decompose(*n.baseToCam)
			n.write(n.out.tfStatic, &tf2_msgs.TFMessage{Transforms: []geometry_msgs.TransformStamped{{
				Header:       std_msgs.Header{Stamp: r.Stamp, FrameId: n.cfg.BaseFrame},
				ChildFrameId: camFrame,
				Transform:    msgs.Transform(bt, bq),
			}}})
		}
	}
	return written
}

// built is what post made of one result for deliver.
type built struct {
	depth     *sensor_msgs.Image
	cloud     *sensor_msgs.PointCloud2 // nil for non-keyframes
	pts       []geom.Point             // the cloud's points, for the map
	pointsErr error                    // depth that cannot be unprojected
}

// post does a result's per-pixel and per-message work on a pipeline worker.
// A result whose pose is no rigid transform (NaN, zero quaternion) fails
// whole; depth that cannot be unprojected leaves out the cloud only.
func (n *Node) post(r *engine.Result, _ any) (any, error) {
	if _, _, err := geom.Decompose(r.CamToWorld); err != nil {
		return nil, fmt.Errorf("pose of frame %d: %w", r.Seq, err)
	}
	b := &built{}
	seq := uint32(r.Seq)
	mapHdr := std_msgs.Header{Seq: seq, Stamp: r.Stamp, FrameId: n.cfg.MapFrame}
	// A keyframe's points go into the map and out as ~cloud.
	if r.Kind != engine.NonKeyframe {
		if b.pts, b.pointsErr = n.m.FramePoints(r.DepthFrame()); b.pointsErr == nil {
			b.cloud = msgs.PointCloud2(mapHdr, cloudOf(b.pts))
		}
	}
	b.depth = msgs.DepthImage(std_msgs.Header{Seq: seq, Stamp: r.Stamp, FrameId: n.camFrame(r.Seq)}, r.Width, r.Height, r.Depth)
	return b, nil
}

// deliver takes each frame's outcome in frame order: the pose and points
// into the map, the messages out, the counters.
func (n *Node) deliver(o pipeline.Output) {
	start := time.Now()
	n.forget(o.Seq)
	rep := FrameReport{Seq: o.Seq, Timing: o.Timing, Err: o.Err, Stage: o.Stage}
	if o.Err != nil {
		n.failed(o)
	} else {
		rep.Kind, rep.Window = o.Result.Kind, o.Result.Window
		rep.PoseWritten, _ = o.Early.(time.Time)
		n.publishResult(o.Result, o.Value.(*built))
		n.countStep()
	}
	if n.observe != nil {
		rep.Deliver = time.Since(start)
		n.observe(rep)
	}
}

// failed counts a frame that gave no result, by where it failed.
func (n *Node) failed(o pipeline.Output) {
	switch o.Stage {
	case "decode":
		var se *skipError
		if errors.As(o.Err, &se) {
			n.skip(se.kind, se.err)
		} else {
			n.skip(decodeKind(o.Err), o.Err)
		}
	case "post":
		n.rejectResult(o.Seq, o.Err)
	default:
		n.stats.engineErrors.Add(1)
		if errors.Is(o.Err, engine.ErrCacheFull) {
			// every later frame fails the same way until ~reset: say it once
			if n.stats.cacheFull.CompareAndSwap(false, true) {
				n.log.Error("the KV cache is full: no more frames are mapped until ~reset; use windowed mode, a keyframe interval or flow keyframes for long runs", "seq", o.Seq, "err", o.Err)
			}
		} else {
			n.log.Error("the engine failed on a frame; skipping it", "seq", o.Seq, "stage", o.Stage, "err", o.Err)
		}
	}
}

// publishResult maps the result and sends what post built (early sent the
// pose). The stamps are the input image's.
func (n *Node) publishResult(r *engine.Result, b *built) {
	n.mu.Lock()
	if err := n.m.AddPose(r.Seq, r.Stamp, r.CamToWorld); err != nil {
		n.mu.Unlock()
		n.rejectResult(r.Seq, err)
		return
	}
	n.lastStamp = r.Stamp
	n.pathDirty = true
	if b.cloud != nil {
		n.m.AddFramePoints(b.pts)
		n.mapDirty = true
	}
	n.mu.Unlock()
	if b.pointsErr != nil {
		n.rejectResult(r.Seq, b.pointsErr)
	}
	n.stats.processed.Add(1)

	if b.cloud != nil {
		n.write(n.out.cloud, b.cloud)
	}
	n.write(n.out.depth, b.depth)
}
