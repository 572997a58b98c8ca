package node_test

import (
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bluenviron/goroslib/v2/pkg/msgs/nav_msgs"
	"github.com/bluenviron/goroslib/v2/pkg/msgs/sensor_msgs"

	"github.com/lingbotmap/lingbotmap/engine/geom"
	"github.com/lingbotmap/lingbotmap/engine/occgrid"
	"github.com/lingbotmap/lingbotmap/msgs"
	"github.com/lingbotmap/lingbotmap/msgs/cdr"
	"github.com/lingbotmap/lingbotmap/node"
)

// What nav2 reads: /map's OccupancyGrid (decoded from its CDR bytes) has
// as occupied cells exactly the cells of ~map's points within the height
// band; ~depth/camera_info matches each depth image's size and the
// result's K; ~odom carries a twist from the pose stream and non-zero
// covariances.
func TestCoreNavOutputs(t *testing.T) {
	ref := goldenReplay(t)
	w, h := ref.Size()
	const n = 16
	// a band through the middle of the map's heights
	var zs []float64
	mf := mapOf(t, ref)
	for i := range n {
		r := ref.Reference(i)
		pts, err := geom.ConfidentPoints(nil, r.DepthFrame(), geom.PointFilter{ConfThreshold: 1.5, Stride: 1})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range mf.Points(pts, pts) {
			zs = append(zs, float64(p.Z))
		}
	}
	slices.Sort(zs)
	cfg := fastConfig(t)
	cfg.GridMinZ, cfg.GridMaxZ, cfg.GridFloorZ = zs[len(zs)*3/10], zs[len(zs)*7/10], zs[len(zs)/10]
	cfg.GridMinHits, cfg.GridRayRange = 1, 0
	cfg.GridResolution = (zs[len(zs)-1] - zs[0]) / 50
	cfg.OdomPoseVariance, cfg.OdomTwistVariance = 0.02, 0.03
	c := startCore(t, cfg, ref, nil, "/image")
	tr := c.tr
	if spec, ok := tr.Spec("/map"); !ok || spec.Role != 2 /* latched */ {
		t.Fatalf("/map advertised %v with role %v, want latched", ok, spec.Role)
	}
	for i := range n {
		if err := tr.Deliver("/image", frame(i, w, h, "cam_optical"), nil); err != nil {
			t.Fatal(err)
		}
	}
	waitDiag(t, tr, map[string]string{"frames_processed": strconv.Itoa(n)})
	waitFor(t, "a grid of every frame", 10*time.Second, func() bool {
		g, _ := tr.Last("/map").(*nav_msgs.OccupancyGrid)
		return g != nil && g.Header.Stamp.Equal(stampOf(n-1))
	})
	waitFor(t, "the map of every frame", 10*time.Second, func() bool {
		m, _ := tr.Last("/lbm/map").(*sensor_msgs.PointCloud2)
		return m != nil && m.Header.Stamp.Equal(stampOf(n-1))
	})

	// ~save_map writes the same grid as map_server's map.pgm and map.yaml
	dir := t.TempDir()
	tr.SetParam("save_dir", dir)
	if msg, err := tr.Call("/lbm/save_map"); err != nil || !strings.Contains(msg, "occupancy grid") {
		t.Fatalf("save_map: %q %v", msg, err)
	}
	saved, err := occgrid.ReadMapServer(filepath.Join(dir, node.GridFileBase+".yaml"))
	if err != nil {
		t.Fatal(err)
	}
	pub := tr.Last("/map").(*nav_msgs.OccupancyGrid)
	if uint32(saved.Width) != pub.Info.Width || uint32(saved.Height) != pub.Info.Height || float32(saved.Resolution) != pub.Info.Resolution ||
		saved.OriginX != pub.Info.Origin.Position.X || saved.OriginY != pub.Info.Origin.Position.Y || !slices.Equal(saved.Data, pub.Data) {
		t.Fatalf("map.yaml holds a %d × %d grid from (%g, %g), /map a %d × %d one from (%g, %g), or their cells differ",
			saved.Width, saved.Height, saved.OriginX, saved.OriginY, pub.Info.Width, pub.Info.Height, pub.Info.Origin.Position.X, pub.Info.Origin.Position.Y)
	}

	// the grid as a ROS 2 reader gets it
	wire, err := cdr.Marshal(tr.Last("/map").(*nav_msgs.OccupancyGrid))
	if err != nil {
		t.Fatal(err)
	}
	var g nav_msgs.OccupancyGrid
	if err := cdr.Unmarshal(wire, &g); err != nil {
		t.Fatal(err)
	}
	if g.Header.FrameId != "map" || len(g.Data) != int(g.Info.Width*g.Info.Height) || g.Info.Width == 0 ||
		math.Abs(float64(g.Info.Resolution)-cfg.GridResolution) > 1e-6*cfg.GridResolution {
		t.Fatalf("grid: frame %q, %d×%d cells of %g, %d values", g.Header.FrameId, g.Info.Width, g.Info.Height, g.Info.Resolution, len(g.Data))
	}
	pts, err := msgs.ParsePointCloud2(tr.Last("/lbm/map").(*sensor_msgs.PointCloud2))
	if err != nil {
		t.Fatal(err)
	}
	want := map[int]bool{}
	res := float64(g.Info.Resolution)
	ox, oy := g.Info.Origin.Position.X, g.Info.Origin.Position.Y
	for _, p := range pts {
		z := float64(p.Z)
		if z < cfg.GridMinZ || z > cfg.GridMaxZ {
			continue
		}
		cx := int(math.Floor((float64(p.X) - ox) / cfg.GridResolution))
		cy := int(math.Floor((float64(p.Y) - oy) / cfg.GridResolution))
		if cx < 0 || cy < 0 || cx >= int(g.Info.Width) || cy >= int(g.Info.Height) {
			t.Fatalf("a band point at (%g, %g) lies outside the grid", p.X, p.Y)
		}
		want[cy*int(g.Info.Width)+cx] = true
	}
	occupied := 0
	for i, v := range g.Data {
		if v == 100 {
			occupied++
			if !want[i] {
				t.Fatalf("cell %d is occupied but holds no map point in the band", i)
			}
		} else if want[i] {
			t.Fatalf("cell %d holds map points in the band but is %d", i, v)
		}
	}
	if occupied == 0 || occupied == len(g.Data) {
		t.Fatalf("%d of %d cells occupied: the case tests nothing (resolution %g)", occupied, len(g.Data), res)
	}
	waitDiag(t, tr, map[string]string{"grid_occupied_cells": strconv.Itoa(occupied), "grid_errors": "0"})

	depths, infos := tr.Messages("/lbm/depth"), tr.Messages("/lbm/depth/camera_info")
	if len(infos) != n || len(depths) != n {
		t.Fatalf("%d camera_info for %d depth images, want %d", len(infos), len(depths), n)
	}
	for i := range n {
		d, ci, r := depths[i].(*sensor_msgs.Image), infos[i].(*sensor_msgs.CameraInfo), ref.Reference(i)
		k := r.Intrinsics
		if ci.Header != d.Header || ci.Width != d.Width || ci.Height != d.Height ||
			ci.K != [9]float64{k[0], 0, k[2], 0, k[1], k[3], 0, 0, 1} || ci.P[0] != k[0] || ci.P[5] != k[1] {
			t.Fatalf("camera_info %d: %+v for a %dx%d depth image, K %v", i, ci, d.Width, d.Height, k)
		}
	}

	odoms := tr.Messages("/lbm/odom")
	for i := 1; i < n; i++ {
		prev, cur := odoms[i-1].(*nav_msgs.Odometry), odoms[i].(*nav_msgs.Odometry)
		pm, cm := matOfPose(t, prev), matOfPose(t, cur)
		dt := cur.Header.Stamp.Sub(prev.Header.Stamp).Seconds()
		// the displacement seen from the previous pose, per second
		d := geom.TranslationOf(cm)
		p := geom.TranslationOf(pm)
		rt := geom.Transpose3(geom.RotationOf(pm))
		v := geom.MulVec3(rt, [3]float64{(d[0] - p[0]) / dt, (d[1] - p[1]) / dt, (d[2] - p[2]) / dt})
		l := cur.Twist.Twist.Linear
		if math.Abs(l.X-v[0])+math.Abs(l.Y-v[1])+math.Abs(l.Z-v[2]) > 1e-6*(1+math.Abs(v[0])+math.Abs(v[1])+math.Abs(v[2])) {
			t.Fatalf("odometry %d: linear twist %+v, the poses give %v", i, l, v)
		}
		for j := range 6 {
			if cur.Pose.Covariance[7*j] != 0.02 || cur.Twist.Covariance[7*j] != 0.03 {
				t.Fatalf("odometry %d: covariance diagonals %v / %v", i, cur.Pose.Covariance, cur.Twist.Covariance)
			}
		}
	}
}

func matOfPose(t *testing.T, o *nav_msgs.Odometry) geom.Mat4 {
	t.Helper()
	p := o.Pose.Pose
	m, err := geom.Compose([3]float64{p.Position.X, p.Position.Y, p.Position.Z}, geom.Quat{p.Orientation.X, p.Orientation.Y, p.Orientation.Z, p.Orientation.W})
	if err != nil {
		t.Fatal(err)
	}
	return m
}
