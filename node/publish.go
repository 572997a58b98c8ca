package node

import (
	"context"
	"fmt"
	"time"

	"github.com/bluenviron/goroslib/v2/pkg/msgs/diagnostic_msgs"
	"github.com/bluenviron/goroslib/v2/pkg/msgs/geometry_msgs"
	"github.com/bluenviron/goroslib/v2/pkg/msgs/nav_msgs"
	"github.com/bluenviron/goroslib/v2/pkg/msgs/sensor_msgs"
	"github.com/bluenviron/goroslib/v2/pkg/msgs/std_msgs"
	"github.com/bluenviron/goroslib/v2/pkg/msgs/tf2_msgs"

	"github.com/lingbotmap/lingbotmap/engine/geom"
	"github.com/lingbotmap/lingbotmap/engine/mapio"
	"github.com/lingbotmap/lingbotmap/msgs"
)

// outputs are the node's publishers.
type outputs struct {
	pose, path, odom, cloud, mapPub, depth, depthInfo, grid, tf, tfStatic, diag Publisher
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
		{&n.out.depthInfo, "~depth/camera_info", &sensor_msgs.CameraInfo{}, RoleOutput},
		// nav2's map_server topic, where planners look for the map
		{&n.out.grid, "/map", &nav_msgs.OccupancyGrid{}, RoleLatched},
		{&n.out.tf, "/tf", &tf2_msgs.TFMessage{}, RoleTF},
		{&n.out.tfStatic, "/tf_static", &tf2_msgs.TFMessage{}, RoleTFStatic},
		{&n.out.diag, "/diagnostics", &diagnostic_msgs.DiagnosticArray{}, RoleOutput},
	} {
		name := n.tr.Resolve(p.name)
		// Clouds can be megabytes: best effort where the user chose it.
		bestEffort := (p.dst == &n.out.cloud || p.dst == &n.out.mapPub) && n.cfg.CloudReliability == "best_effort"
		pub, err := n.tr.Advertise(TopicSpec{Name: name, Type: p.msg, Role: p.role, BestEffort: bestEffort})
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

// rejectResult counts a result (or its points) the map refused and reports
// the first.
func (n *Node) rejectResult(seq uint64, err error) {
	if n.stats.rejectedResults.Add(1) == 1 {
		n.log.Error("an engine result cannot be mapped; leaving it out (reported once; counted in /diagnostics)", "seq", seq, "err", err)
	}
}

// cloudOf copies map points into cloud message points.
func cloudOf(pts []geom.Point) []msgs.PointXYZRGB {
	out := make([]msgs.PointXYZRGB, len(pts))
	for i, p := range pts {
		out[i] = msgs.PointXYZRGB{X: p.X, Y: p.Y, Z: p.Z, R: p.R, G: p.G, B: p.B}
	}
	return out
}

// publishPath sends the trajectory (latched) when it changed, at most
// MapRate times a second unless force is set: a path message holds every
// pose kept (max_path_length), so it is never built per frame.
func (n *Node) publishPath(force bool) {
	n.pubMu.Lock()
	defer n.pubMu.Unlock()
	n.mu.Lock()
	if !n.pathDirty && !force {
		n.mu.Unlock()
		return
	}
	n.pathDirty = false
	path := n.m.Path()
	n.mu.Unlock()
	p := &nav_msgs.Path{Header: std_msgs.Header{FrameId: n.cfg.MapFrame}, Poses: make([]geometry_msgs.PoseStamped, len(path))}
	for i, rec := range path {
		// the map kept the pose as a rigid transform, which the map frame keeps rigid
		t, q, _ := geom.Decompose(n.frame.CamPose(rec.CamToWorld))
		p.Poses[i] = geometry_msgs.PoseStamped{
			Header: std_msgs.Header{Seq: uint32(rec.Seq), Stamp: rec.Stamp, FrameId: n.cfg.MapFrame},
			Pose:   msgs.Pose(t, q),
		}
	}
	if len(path) > 0 {
		p.Header.Stamp = path[len(path)-1].Stamp
		p.Header.Seq = uint32(path[len(path)-1].Seq)
	}
	n.write(n.out.path, p)
}

// publishMap sends the voxel map when it changed, at most MapRate times a
// second unless force is set.
func (n *Node) publishMap(force bool) {
	n.pubMu.Lock()
	defer n.pubMu.Unlock()
	n.mu.Lock()
	interval := period(n.now().MapRate)
	if !n.mapDirty || (!force && time.Since(n.lastMap) < interval) {
		n.mu.Unlock()
		return
	}
	n.mapDirty = false
	n.lastMap = time.Now()
	pts, stamp := n.m.Points(), n.lastStamp
	var path []mapio.PathPose
	if n.cfg.PublishGrid {
		path = n.m.Path()
	}
	n.mu.Unlock()
	pts = n.frame.Points(pts, pts)
	n.write(n.out.mapPub, msgs.PointCloud2(std_msgs.Header{Stamp: stamp, FrameId: n.cfg.MapFrame}, cloudOf(pts)))
	if n.cfg.PublishGrid {
		if g := n.occupancyGrid(pts, path, stamp); g != nil {
			n.write(n.out.grid, g)
		}
	}
}

// mapLoop publishes ~map and ~path off the frame path, each at most MapRate
// times a second and only when they changed: both grow with the session, so
// their cost must not fall on every frame.
func (n *Node) mapLoop(ctx context.Context) {
	cfg, changed := n.live.get()
	tick := time.NewTicker(period(cfg.MapRate))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-changed: // map_rate may have changed: it applies at once
			cfg, changed = n.live.get()
			tick.Reset(period(cfg.MapRate))
		case <-tick.C:
			n.publishPath(false)
			n.publishMap(false)
		}
	}
}
