package node

import (
	"context"
	"math"
	"time"

	"github.com/bluenviron/goroslib/v2/pkg/msgs/geometry_msgs"
	"github.com/bluenviron/goroslib/v2/pkg/msgs/nav_msgs"
	"github.com/bluenviron/goroslib/v2/pkg/msgs/std_msgs"
	"github.com/bluenviron/goroslib/v2/pkg/msgs/tf2_msgs"

	"github.com/lingbotmap/lingbotmap/engine"
	"github.com/lingbotmap/lingbotmap/engine/mapio"
	"github.com/lingbotmap/lingbotmap/msgs"
)

// CloudPoints unprojects a result's confident depth pixels into the world:
// every stride-th pixel in both directions with Conf > confThreshold and a
// finite positive depth becomes X_cam = ((u−cx)/fx·d, (v−cy)/fy·d, d), then
// CamToWorld·X_cam, coloured from Result.RGB. Pixels are taken row by row.
func CloudPoints(r engine.Result, confThreshold float64, stride int) []msgs.PointXYZRGB {
	w, h := r.Width, r.Height
	if w <= 0 || h <= 0 || len(r.Depth) < w*h || len(r.Conf) < w*h || stride < 1 {
		return nil
	}
	hasRGB := len(r.RGB) >= 3*w*h
	var pts []msgs.PointXYZRGB
	for v := 0; v < h; v += stride {
		for u := 0; u < w; u += stride {
			i := v*w + u
			d := float64(r.Depth[i])
			if !(float64(r.Conf[i]) > confThreshold) || !(d > 0) || math.IsInf(d, 0) {
				continue
			}
			p := Unproject(u, v, d, r.Intrinsics, r.CamToWorld)
			if math.IsNaN(p[0]+p[1]+p[2]) || math.IsInf(p[0]+p[1]+p[2], 0) {
				continue
			}
			pt := msgs.PointXYZRGB{X: float32(p[0]), Y: float32(p[1]), Z: float32(p[2])}
			if hasRGB {
				pt.R, pt.G, pt.B = r.RGB[3*i], r.RGB[3*i+1], r.RGB[3*i+2]
			}
			pts = append(pts, pt)
		}
	}
	return pts
}

// publishResult sends everything one engine result produces. The stamps are
// the input image's.
func (n *Node) publishResult(r engine.Result) {
	n.mu.Lock()
	camFrame := n.cfg.CameraFrame
	if camFrame == "" {
		camFrame = n.frameIDs[r.Seq]
	}
	delete(n.frameIDs, r.Seq)
	if camFrame == "" {
		camFrame = "camera"
	}
	n.path = append(n.path, poseRecord{seq: r.Seq, stamp: r.Stamp, c2w: r.CamToWorld})
	if m := n.cfg.MaxPathLength; m > 0 && len(n.path) > m {
		n.path = append(n.path[:0], n.path[len(n.path)-m:]...)
	}
	var cloud []msgs.PointXYZRGB
	if r.Kind != engine.NonKeyframe {
		cloud = CloudPoints(r, n.cfg.ConfThreshold, n.cfg.CloudStride)
		gp := make([]mapio.Point, len(cloud))
		for i, p := range cloud {
			gp[i] = mapio.Point{X: p.X, Y: p.Y, Z: p.Z, R: p.R, G: p.G, B: p.B}
		}
		n.grid.Add(gp)
		n.mapDirty = true
	}
	n.mu.Unlock()
	n.stats.processed.Add(1)

	seq := uint32(r.Seq)
	mapHdr := std_msgs.Header{Seq: seq, Stamp: r.Stamp, FrameId: n.cfg.MapFrame}
	pose := msgs.PoseFromMatrix(r.CamToWorld)
	// Odometry and TF describe base_frame when it is set, else the camera.
	child, childPose := camFrame, r.CamToWorld
	if n.baseToCam != nil {
		child = n.cfg.BaseFrame
		childPose = mul(r.CamToWorld, invertRigid(*n.baseToCam))
	}

	n.withSession(func(s *session) {
		s.pose.Write(&geometry_msgs.PoseStamped{Header: mapHdr, Pose: pose})
		s.odom.Write(&nav_msgs.Odometry{
			Header:       mapHdr,
			ChildFrameId: child,
			Pose:         geometry_msgs.PoseWithCovariance{Pose: msgs.PoseFromMatrix(childPose)},
		})
		if n.cfg.PublishTF {
			s.tf.Write(&tf2_msgs.TFMessage{Transforms: []geometry_msgs.TransformStamped{{
				Header:       mapHdr,
				ChildFrameId: child,
				Transform:    msgs.TransformFromMatrix(childPose),
			}}})
			if n.baseToCam != nil && !s.staticSent.Swap(true) {
				s.tfStatic.Write(&tf2_msgs.TFMessage{Transforms: []geometry_msgs.TransformStamped{{
					Header:       std_msgs.Header{Stamp: r.Stamp, FrameId: n.cfg.BaseFrame},
					ChildFrameId: camFrame,
					Transform:    msgs.TransformFromMatrix(*n.baseToCam),
				}}})
			}
		}
		if cloud != nil {
			s.cloud.Write(msgs.PointCloud2(mapHdr, cloud))
		}
		s.depth.Write(msgs.DepthImage(std_msgs.Header{Seq: seq, Stamp: r.Stamp, FrameId: camFrame}, r.Width, r.Height, r.Depth))
	})
	n.publishPath()
	n.publishMap(false)
}

// publishPath sends the whole trajectory (latched).
func (n *Node) publishPath() {
	n.mu.Lock()
	p := &nav_msgs.Path{Header: std_msgs.Header{FrameId: n.cfg.MapFrame}}
	for _, rec := range n.path {
		p.Poses = append(p.Poses, geometry_msgs.PoseStamped{
			Header: std_msgs.Header{Seq: uint32(rec.seq), Stamp: rec.stamp, FrameId: n.cfg.MapFrame},
			Pose:   msgs.PoseFromMatrix(rec.c2w),
		})
	}
	if len(n.path) > 0 {
		p.Header.Stamp = n.path[len(n.path)-1].stamp
		p.Header.Seq = uint32(n.path[len(n.path)-1].seq)
	}
	n.mu.Unlock()
	n.withSession(func(s *session) { s.path.Write(p) })
}

// publishMap sends the voxel map when it changed, at most MapRate times a
// second unless force is set.
func (n *Node) publishMap(force bool) {
	n.mu.Lock()
	interval := time.Duration(float64(time.Second) / n.cfg.MapRate)
	if !n.mapDirty || (!force && time.Since(n.lastMap) < interval) {
		n.mu.Unlock()
		return
	}
	n.mapDirty = false
	n.lastMap = time.Now()
	pts := n.grid.Points()
	var stamp time.Time
	if len(n.path) > 0 {
		stamp = n.path[len(n.path)-1].stamp
	}
	n.mu.Unlock()
	cloud := make([]msgs.PointXYZRGB, len(pts))
	for i, p := range pts {
		cloud[i] = msgs.PointXYZRGB{X: p.X, Y: p.Y, Z: p.Z, R: p.R, G: p.G, B: p.B}
	}
	n.withSession(func(s *session) {
		s.mapPub.Write(msgs.PointCloud2(std_msgs.Header{Stamp: stamp, FrameId: n.cfg.MapFrame}, cloud))
	})
}

// mapLoop sends map changes that the rate limit held back, so the last
// frames of a burst reach ~map without waiting for the next frame.
func (n *Node) mapLoop(ctx context.Context) {
	tick := time.NewTicker(time.Duration(float64(time.Second) / n.cfg.MapRate))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			n.publishMap(false)
		}
	}
}

// republishLatched refills the latched topics of a new session.
func (n *Node) republishLatched() {
	n.mu.Lock()
	n.mapDirty = true
	n.mu.Unlock()
	n.publishMap(true)
	n.publishPath()
}
