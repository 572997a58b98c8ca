package node

import (
	"math"
	"time"

	"github.com/bluenviron/goroslib/v2/pkg/msgs/geometry_msgs"
	"github.com/bluenviron/goroslib/v2/pkg/msgs/nav_msgs"
	"github.com/bluenviron/goroslib/v2/pkg/msgs/sensor_msgs"
	"github.com/bluenviron/goroslib/v2/pkg/msgs/std_msgs"

	"github.com/lingbotmap/lingbotmap/engine/geom"
	"github.com/lingbotmap/lingbotmap/engine/mapio"
	"github.com/lingbotmap/lingbotmap/engine/occgrid"
	"github.com/lingbotmap/lingbotmap/msgs"
)

// What nav2 reads: the occupancy grid on /map, odometry with a twist and a
// covariance, and the depth image's camera_info.

// gridCameras bounds the camera positions the grid traces free space from
// (evenly spaced over the path, the newest always in), so that a long
// session's grid costs the same at every map update.
const gridCameras = 256

// occupancyGrid projects the map's points (in the map frame) into the grid
// with the cameras of path; nil when the grid cannot be made (counted).
func (n *Node) occupancyGrid(pts []geom.Point, path []mapio.PathPose, stamp time.Time) *nav_msgs.OccupancyGrid {
	g, err := n.gridOf(pts, path)
	if err == nil {
		n.stats.gridOccupied.Store(int64(g.Occupied))
		return gridMsg(g, std_msgs.Header{Stamp: stamp, FrameId: n.cfg.MapFrame})
	}
	if n.stats.gridErrors.Add(1) == 1 {
		n.log.Warn("the occupancy grid cannot be made (reported once; counted in /diagnostics as grid_errors)", "err", err)
	}
	return nil
}

// gridOf projects the map's points (in the map frame) into the grid with
// the cameras of path.
func (n *Node) gridOf(pts []geom.Point, path []mapio.PathPose) (*occgrid.Grid, error) {
	cfg, err := n.cfg.GridConfig()
	if err != nil {
		return nil, err
	}
	p3 := make([][3]float64, len(pts))
	for i, p := range pts {
		p3[i] = [3]float64{float64(p.X), float64(p.Y), float64(p.Z)}
	}
	var cams [][3]float64
	step := max(1, (len(path)+gridCameras-1)/gridCameras)
	for i := len(path) - 1; i >= 0; i -= step {
		cams = append(cams, geom.TranslationOf(n.frame.CamPose(path[i].CamToWorld)))
	}
	return occgrid.Project(p3, cams, cfg)
}

// gridMsg is a grid as nav_msgs/OccupancyGrid: row-major from the origin
// cell, the origin's pose in the map frame without rotation.
func gridMsg(g *occgrid.Grid, h std_msgs.Header) *nav_msgs.OccupancyGrid {
	return &nav_msgs.OccupancyGrid{
		Header: h,
		Info: nav_msgs.MapMetaData{
			MapLoadTime: h.Stamp,
			Resolution:  float32(g.Resolution),
			Width:       uint32(g.Width),
			Height:      uint32(g.Height),
			Origin:      msgs.Pose([3]float64{g.OriginX, g.OriginY, 0}, geom.Quat{0, 0, 0, 1}),
		},
		Data: g.Data,
	}
}

// covariance is a 6×6 covariance with v on the diagonal, row-major.
func covariance(v float64) [36]float64 {
	var c [36]float64
	for i := range 6 {
		c[7*i] = v
	}
	return c
}

// twistBetween is the body twist (in the child frame) that carries prev
// to cur in dt seconds: finite differences of the pose stream. ok is false
// when dt is not positive.
func twistBetween(prev, cur geom.Mat4, dt float64) (tw geometry_msgs.Twist, ok bool) {
	if !(dt > 0) || math.IsInf(dt, 0) {
		return tw, false
	}
	rel := geom.Mul4(geom.InvertRigid(prev), cur)
	t := geom.TranslationOf(rel)
	_, q, err := geom.Decompose(rel)
	if err != nil {
		return tw, false
	}
	// rotation vector of q (w ≥ 0): angle θ about the unit axis
	s := math.Sqrt(q[0]*q[0] + q[1]*q[1] + q[2]*q[2])
	var w [3]float64
	if s > 1e-12 {
		theta := 2 * math.Atan2(s, q[3])
		for i := range 3 {
			w[i] = q[i] / s * theta / dt
		}
	}
	tw.Linear = geometry_msgs.Vector3{X: t[0] / dt, Y: t[1] / dt, Z: t[2] / dt}
	tw.Angular = geometry_msgs.Vector3{X: w[0], Y: w[1], Z: w[2]}
	return tw, true
}

// depthInfo is the camera_info of a depth image: its size and the
// result's intrinsics (fx, fy, cx, cy in the depth image's pixels), no
// distortion.
func depthInfo(h std_msgs.Header, width, height int, k geom.Intrinsics) *sensor_msgs.CameraInfo {
	fx, fy, cx, cy := k[0], k[1], k[2], k[3]
	return &sensor_msgs.CameraInfo{
		Header:          h,
		Width:           uint32(max(width, 0)),
		Height:          uint32(max(height, 0)),
		DistortionModel: "plumb_bob",
		D:               []float64{0, 0, 0, 0, 0},
		K:               [9]float64{fx, 0, cx, 0, fy, cy, 0, 0, 1},
		R:               [9]float64{1, 0, 0, 0, 1, 0, 0, 0, 1},
		P:               [12]float64{fx, 0, cx, 0, 0, fy, cy, 0, 0, 0, 1, 0},
	}
}

// odomFrameOf says which frame ~odom's pose is given in.
func (n *Node) odomFrameOf() string {
	if n.cfg.OdometryIn == "odom" {
		return n.cfg.OdomFrame
	}
	return n.cfg.MapFrame
}
