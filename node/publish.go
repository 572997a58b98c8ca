package node

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/bluenviron/goroslib/v2/pkg/msgs/diagnostic_msgs"
	"github.com/bluenviron/goroslib/v2/pkg/msgs/geometry_msgs"
	"github.com/bluenviron/goroslib/v2/pkg/msgs/nav_msgs"
	"github.com/bluenviron/goroslib/v2/pkg/msgs/sensor_msgs"
	"github.com/bluenviron/goroslib/v2/pkg/msgs/std_msgs"
	"github.com/bluenviron/goroslib/v2/pkg/msgs/tf2_msgs"

	"github.com/lingbotmap/lingbotmap/engine"
	"github.com/lingbotmap/lingbotmap/engine/mapio"
	"github.com/lingbotmap/lingbotmap/msgs"
)

// outputs are the node's publishers.
type outputs struct {
	pose, path, odom, cloud, mapPub, depth, tf, tfStatic, diag Publisher
}

// advertise opens every publisher.
func (n *Node) advertise() error {
	for _, p := range []struct {
		dst  *Publisher
		name string
		msg  any
		role Role
	}{
		{&n.out.pose, "~pose", &geometry_msgs.PoseStamped{}, RoleOutput},
		{&n.out.path, "~path", &nav_msgs.Path{}, RoleLatched},
		{&n.out.odom, "~odom", &nav_msgs.Odometry{}, RoleOutput},
		{&n.out.cloud, "~cloud", &sensor_msgs.PointCloud2{}, RoleOutput},
		{&n.out.mapPub, "~map", &sensor_msgs.PointCloud2{}, RoleLatched},
		{&n.out.depth, "~depth", &sensor_msgs.Image{}, RoleOutput},
		{&n.out.tf, "/tf", &tf2_msgs.TFMessage{}, RoleTF},
		{&n.out.tfStatic, "/tf_static", &tf2_msgs.TFMessage{}, RoleTFStatic},
		{&n.out.diag, "/diagnostics", &diagnostic_msgs.DiagnosticArray{}, RoleOutput},
	} {
		name := n.tr.Resolve(p.name)
		pub, err := n.tr.Advertise(TopicSpec{Name: name, Type: p.msg, Role: p.role})
		if err != nil {
			return fmt.Errorf("node: advertising %s: %w", name, err)
		}
		*p.dst = pub
	}
	return nil
}

// write sends msg on p; failures are counted and the first is logged.
func (n *Node) write(p Publisher, msg any) {
	if err := p.Write(msg); err != nil {
		if n.stats.publishErrors.Add(1) == 1 {
			n.log.Warn("publishing failed (reported once; counted in /diagnostics)", "type", fmt.Sprintf("%T", msg), "err", err)
		}
	}
}

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
	sendStatic := n.cfg.PublishTF && n.baseToCam != nil && !n.staticSent
	if sendStatic {
		n.staticSent = true
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

	n.write(n.out.pose, &geometry_msgs.PoseStamped{Header: mapHdr, Pose: pose})
	n.write(n.out.odom, &nav_msgs.Odometry{
		Header:       mapHdr,
		ChildFrameId: child,
		Pose:         geometry_msgs.PoseWithCovariance{Pose: msgs.PoseFromMatrix(childPose)},
	})
	if n.cfg.PublishTF {
		n.write(n.out.tf, &tf2_msgs.TFMessage{Transforms: []geometry_msgs.TransformStamped{{
			Header:       mapHdr,
			ChildFrameId: child,
			Transform:    msgs.TransformFromMatrix(childPose),
		}}})
		if sendStatic {
			n.write(n.out.tfStatic, &tf2_msgs.TFMessage{Transforms: []geometry_msgs.TransformStamped{{
				Header:       std_msgs.Header{Stamp: r.Stamp, FrameId: n.cfg.BaseFrame},
				ChildFrameId: camFrame,
				Transform:    msgs.TransformFromMatrix(*n.baseToCam),
			}}})
		}
	}
	if cloud != nil {
		n.write(n.out.cloud, msgs.PointCloud2(mapHdr, cloud))
	}
	n.write(n.out.depth, msgs.DepthImage(std_msgs.Header{Seq: seq, Stamp: r.Stamp, FrameId: camFrame}, r.Width, r.Height, r.Depth))
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
	n.write(n.out.path, p)
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
	n.write(n.out.mapPub, msgs.PointCloud2(std_msgs.Header{Stamp: stamp, FrameId: n.cfg.MapFrame}, cloud))
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
