package node

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/bluenviron/goroslib/v2/pkg/msgs/geometry_msgs"
	"github.com/bluenviron/goroslib/v2/pkg/msgs/nav_msgs"
	"github.com/bluenviron/goroslib/v2/pkg/msgs/sensor_msgs"
	"github.com/bluenviron/goroslib/v2/pkg/msgs/std_msgs"

	"github.com/lingbotmap/lingbotmap/engine"
	"github.com/lingbotmap/lingbotmap/engine/geom"
	"github.com/lingbotmap/lingbotmap/engine/mapframe"
	"github.com/lingbotmap/lingbotmap/engine/pipeline"
	"github.com/lingbotmap/lingbotmap/msgs"
	"github.com/lingbotmap/lingbotmap/node/tf"
)

// publisher is the node's pipeline sink: every result comes with its input
// message's header. Early publishes a result's pose, odometry and TF the
// moment the model gave it; Post builds its cloud and depth messages on the
// pipeline's workers; Add maps the result and publishes the rest in frame
// order; Checkpoint saves the session (~save_session); Close publishes the
// final map and path.
type publisher struct {
	n *Node
	// staticSent: base → camera went out on /tf_static (latched, so once);
	// only the pipeline's early goroutine touches it
	staticSent bool
	// saved is what the last Checkpoint wrote, for ~save_session's answer
	saved string
	// the previous odometry pose and its stamp, for the twist, and the
	// last map → odom (the early goroutine's)
	prevOdom      *geom.Mat4
	prevOdomStamp time.Time
	mapOdom       *geom.Mat4
}

var (
	_ pipeline.Sink[std_msgs.Header]    = (*publisher)(nil)
	_ pipeline.Poster[std_msgs.Header]  = (*publisher)(nil)
	_ pipeline.Earlier[std_msgs.Header] = (*publisher)(nil)
)

// camFrame is the frame id of a result's camera: camera_frame when set,
// else the input message's, else "camera".
func (n *Node) camFrame(h std_msgs.Header) string {
	if f := n.cfg.CameraFrame; f != "" {
		return f
	}
	if h.FrameId == "" {
		return "camera"
	}
	return h.FrameId
}

// Early publishes a result's pose, odometry and TF the moment the model
// gave it, in frame order, without waiting for the frame's clouds and
// images, and returns when the pose was written (zero when the pose is no
// rigid transform: post fails that result whole). The first result of a
// map fixes the map frame (engine/mapframe): map_T_base(t0) = identity.
func (p *publisher) Early(o pipeline.Output[std_msgs.Header]) any {
	n, r := p.n, o.Result
	if _, _, err := geom.Decompose(r.CamToWorld); err != nil {
		return time.Time{}
	}
	camFrame := n.camFrame(o.Meta)
	if !n.frame.Fixed() {
		b, _ := n.baseToCamera(camFrame, r.Stamp)
		if _, err := n.frame.FixAt(b, r.CamToWorld); err != nil {
			n.tfIssue("bad_base_camera", err)
			n.frame.FixAt(mapframe.OpticalToBody(), r.CamToWorld)
		}
	}
	// read before the poses are converted: once it says known, the map
	// frame holds the scale they are converted with
	unscaled := n.scale.unscaled()
	mapCam := n.frame.CamPose(r.CamToWorld)
	t, q, err := geom.Decompose(mapCam)
	if err != nil {
		return time.Time{}
	}
	mapHdr := std_msgs.Header{Seq: uint32(r.Seq), Stamp: r.Stamp, FrameId: n.cfg.MapFrame}
	// Odometry and TF describe base_frame when it is set, else the camera.
	child, mapChild := camFrame, mapCam
	baseCam, fromConfig := n.baseToCamera(camFrame, r.Stamp)
	if n.cfg.BaseFrame != "" {
		child = n.cfg.BaseFrame
		mapChild = n.frame.BasePose(r.CamToWorld, baseCam)
	}
	ct, cq, err := geom.Decompose(mapChild)
	if err != nil {
		n.tfIssue("bad_base_camera", fmt.Errorf("map → %s: %w", child, err))
		ct, cq, child, mapChild = t, q, camFrame, mapCam
	}
	n.write(n.out.pose, &geometry_msgs.PoseStamped{Header: mapHdr, Pose: msgs.Pose(t, q)})
	written := time.Now()
	if n.now().PublishTF || n.cfg.OdometryIn == "odom" {
		if n.cfg.OdomFrame != "" {
			if m, ok := n.mapToOdom(child, r.Stamp, mapChild, unscaled); ok {
				p.mapOdom = &m
				if n.now().PublishTF && n.publishTF(n.out.tf, n.cfg.MapFrame, n.cfg.OdomFrame, r.Stamp, m) {
					n.lastMapOdom.set(m, r.Stamp)
				}
			}
		} else if n.now().PublishTF {
			n.publishTF(n.out.tf, n.cfg.MapFrame, child, r.Stamp, mapChild)
		}
	}
	p.publishOdometry(mapHdr, child, mapChild, ct, cq)
	if fromConfig && n.cfg.PublishCameraTF && !p.staticSent {
		// base_to_camera goes out once (latched), unless the camera has a
		// parent from elsewhere by now
		p.staticSent = n.publishTF(n.out.tfStatic, n.cfg.BaseFrame, camFrame, r.Stamp, baseCam)
	}
	return written
}

// mapToOdom is map → odom = map_T_base · (odom_T_base at the image's
// stamp)⁻¹ (REP 105). Odometry older than the image by more than
// tf_tolerance, or none, gives a diagnostic and no transform for the frame,
// as does a metric scale configured but not known yet (unscaled says why;
// the caller reads it before converting mapBase).
func (n *Node) mapToOdom(base string, stamp time.Time, mapBase geom.Mat4, unscaled error) (geom.Mat4, bool) {
	if err := unscaled; err != nil {
		// map_T_base in model units against odometry in metres: withheld
		n.tfIssue("odom_unscaled", fmt.Errorf("no map → %s for the image at %s: %w", n.cfg.OdomFrame, stamp.UTC().Format(time.RFC3339Nano), err))
		return geom.Mat4{}, false
	}
	odomBase, err := n.tfl.buf.Lookup(n.cfg.OdomFrame, base, stamp, n.tfTolerance())
	if err != nil {
		kind := "odom_missing"
		if errors.Is(err, tf.ErrExtrapolation) {
			kind = "odom_stale"
		}
		n.tfIssue(kind, fmt.Errorf("no map → %s for the image at %s: %w", n.cfg.OdomFrame, stamp.UTC().Format(time.RFC3339Nano), err))
		return geom.Mat4{}, false
	}
	return geom.Mul4(mapBase, geom.InvertRigid(odomBase)), true
}

// publishOdometry sends ~odom: the pose of child in the map (or, with
// odometry_in odom, in odom_frame through the last map → odom; in the map,
// labelled so, until there is one), the twist in child from the previous
// pose, and the configured covariances.
func (p *publisher) publishOdometry(mapHdr std_msgs.Header, child string, mapChild geom.Mat4, t [3]float64, q geom.Quat) {
	n := p.n
	hdr := mapHdr
	if n.cfg.OdometryIn == "odom" && p.mapOdom != nil {
		if pt, pq, err := geom.Decompose(geom.Mul4(geom.InvertRigid(*p.mapOdom), mapChild)); err == nil {
			hdr.FrameId, t, q = n.cfg.OdomFrame, pt, pq
		}
	}
	odom := &nav_msgs.Odometry{
		Header:       hdr,
		ChildFrameId: child,
		Pose:         geometry_msgs.PoseWithCovariance{Pose: msgs.Pose(t, q), Covariance: covariance(n.cfg.OdomPoseVariance)},
		Twist:        geometry_msgs.TwistWithCovariance{Covariance: covariance(n.cfg.OdomTwistVariance)},
	}
	// a body velocity of child: the same whichever frame the pose is in
	if p.prevOdom != nil {
		if tw, ok := twistBetween(*p.prevOdom, mapChild, mapHdr.Stamp.Sub(p.prevOdomStamp).Seconds()); ok {
			odom.Twist.Twist = tw
		}
	}
	p.prevOdom, p.prevOdomStamp = &mapChild, mapHdr.Stamp
	n.write(n.out.odom, odom)
}

// built is what post made of one result for deliver.
type built struct {
	depth     *sensor_msgs.Image
	cloud     *sensor_msgs.PointCloud2 // nil for non-keyframes
	hdr       std_msgs.Header          // the cloud's, for one built late
	depthInfo *sensor_msgs.CameraInfo  // the depth image's size and K
	pts       []geom.Point             // the cloud's points, for the map
	pointsErr error                    // depth that cannot be unprojected
}

// post does a result's per-pixel and per-message work on a pipeline worker.
// A result whose pose is no rigid transform (NaN, zero quaternion) fails
// whole; depth that cannot be unprojected leaves out the cloud only.
func (p *publisher) Post(r *engine.Result, h std_msgs.Header) (any, error) {
	n := p.n
	if _, _, err := geom.Decompose(r.CamToWorld); err != nil {
		return nil, fmt.Errorf("pose of frame %d: %w", r.Seq, err)
	}
	b := &built{}
	seq := uint32(r.Seq)
	mapHdr := std_msgs.Header{Seq: seq, Stamp: r.Stamp, FrameId: n.cfg.MapFrame}
	// A keyframe's points go into the map and out as ~cloud.
	// The map keeps them in the engine's world; the cloud is in the map
	// frame, which the first frame's Early fixes (Post may run before it:
	// that frame's cloud is then built in frame order, in publishResult).
	if r.Kind != engine.NonKeyframe {
		// conf_threshold may have changed since the map was made
		filt := n.m.Config().Filter
		filt.ConfThreshold = n.now().ConfThreshold
		if b.pts, b.pointsErr = n.m.FramePointsWith(r.DepthFrame(), filt); b.pointsErr == nil {
			b.hdr = mapHdr
			if n.frame.Fixed() {
				b.cloud = msgs.PointCloud2(mapHdr, cloudOf(n.frame.Points(nil, b.pts)))
			}
		}
	}
	dh := std_msgs.Header{Seq: seq, Stamp: r.Stamp, FrameId: n.camFrame(h)}
	b.depth = msgs.DepthImage(dh, r.Width, r.Height, r.Depth)
	b.depthInfo = depthInfo(dh, int(b.depth.Width), int(b.depth.Height), r.Intrinsics)
	return b, nil
}

// Add takes each frame's outcome in frame order: the pose and points into
// the map, the messages out, the counters. Frames dropped for newer ones
// or consumed without a result are the pipeline's to count.
func (p *publisher) Add(o pipeline.Output[std_msgs.Header]) {
	if o.Skipped() {
		return
	}
	n := p.n
	start := time.Now()
	rep := FrameReport{Seq: o.Seq, Timing: o.Timing, Err: o.Err, Stage: o.Stage}
	if o.Err != nil {
		n.failed(o)
	} else {
		rep.Kind, rep.Window = o.Result.Kind, o.Result.Window
		rep.PoseWritten, _ = o.Early.(time.Time)
		n.publishResult(o.Result, o.Value.(*built))
		if n.scale != nil {
			// in frame order, after the frame's outputs: the scale it
			// gives applies from the next frame on
			n.mu.Lock()
			size := n.size
			n.mu.Unlock()
			n.scale.add(o.Result, n.camFrame(o.Meta), size)
		}
		n.countStep()
	}
	if n.observe != nil {
		rep.Deliver = time.Since(start)
		n.observe(rep)
	}
}

// failed counts a frame that gave no result, by where it failed.
func (n *Node) failed(o pipeline.Output[std_msgs.Header]) {
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
	if b.cloud == nil && b.pts != nil && b.pointsErr == nil {
		b.cloud = msgs.PointCloud2(b.hdr, cloudOf(n.frame.Points(nil, b.pts)))
	}
	if b.cloud != nil && !n.cfg.Localization {
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
	n.write(n.out.depthInfo, b.depthInfo)
}

// Checkpoint saves the session (~save_session, session_save_every) with
// the headers of the frames the engine holds.
func (p *publisher) Checkpoint(_ context.Context, at pipeline.Cut[std_msgs.Header]) error {
	msg, err := p.n.writeSession(at)
	p.saved = msg
	return err
}

// Close publishes the final map and path once the pipeline has closed.
func (p *publisher) Close(context.Context) error {
	p.n.publishMap(true)
	p.n.publishPath(true)
	return nil
}

// lastTF is the last map → odom the node sent, with its image's stamp and
// when it went out, and the same of the one before, which give the
// images' pace: how far their clock moves per wall-clock second (a bag
// replayed at another rate) and how often a transform comes.
type lastTF struct {
	mu                  sync.Mutex
	ok                  bool
	m                   geom.Mat4
	stamp, sent         time.Time
	prevStamp, prevSent time.Time
}

func (l *lastTF) set(m geom.Mat4, stamp time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ok {
		l.prevStamp, l.prevSent = l.stamp, l.sent
	} else {
		l.prevStamp, l.prevSent = time.Time{}, time.Time{}
	}
	l.ok, l.m, l.stamp, l.sent = true, m, stamp, time.Now()
}

// clear forgets it: a new map has no map → odom until its first image.
func (l *lastTF) clear() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ok = false
}

// at is the transform to re-publish at now, if the images are late: no
// transform went out for longer than the gap between the last two (or
// minGap). Its stamp is on the images' clock, which the node stamps its
// outputs with (a replayed bag's time, or the sensor's), not the node's
// own: the last image's stamp, moved on by the wall-clock time since at
// the pace the images came, plus the tolerance.
func (l *lastTF) at(now time.Time, minGap, tolerance time.Duration) (geom.Mat4, time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.ok {
		return geom.Mat4{}, time.Time{}, false
	}
	since, gap, pace := now.Sub(l.sent), minGap, 1.0
	if !l.prevSent.IsZero() {
		wall, clock := l.sent.Sub(l.prevSent), l.stamp.Sub(l.prevStamp)
		gap = max(gap, wall)
		if wall > 0 && clock > 0 {
			pace = min(max(float64(clock)/float64(wall), 1e-3), 100)
		}
	}
	if since <= gap {
		return geom.Mat4{}, time.Time{}, false
	}
	return l.m, l.stamp.Add(time.Duration(float64(since)*pace) + tolerance), true
}

// tfLoop re-publishes the last map → odom at tf_publish_rate (AMCL's and
// slam_toolbox's way) once the images are late: tf2 users looking up the
// robot at the current time would otherwise see an extrapolation error as
// soon as the camera stops. While images come on time, each brings its
// own, and a post-dated old one would answer lookups at the next image's
// stamp before its transform is there.
func (n *Node) tfLoop(ctx context.Context) {
	if n.cfg.OdomFrame == "" || n.cfg.TFPublishRate <= 0 {
		// without odometry the node publishes map → base, a pose, which
		// is only true at its image's stamp
		return
	}
	every := period(n.cfg.TFPublishRate)
	tick := time.NewTicker(every)
	defer tick.Stop()
	tol := time.Duration(n.cfg.TransformTolerance * float64(time.Second))
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			if !n.now().PublishTF {
				continue
			}
			if m, stamp, ok := n.lastMapOdom.at(now, every, tol); ok {
				n.publishTF(n.out.tf, n.cfg.MapFrame, n.cfg.OdomFrame, stamp, m)
			}
		}
	}
}
