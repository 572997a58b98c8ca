package node_test

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/bluenviron/goroslib/v2/pkg/msgs/sensor_msgs"

	"github.com/lingbotmap/lingbotmap/engine"
	"github.com/lingbotmap/lingbotmap/engine/geom"
	"github.com/lingbotmap/lingbotmap/engine/golden/replay"
	"github.com/lingbotmap/lingbotmap/msgs"
)

// pointMaker is a replayed engine that makes points ahead, as a GPU stream
// does (engine.PointMaker): told a filter, it gives each result it should
// serve the host's points for it, moved by +100 in x so that their use
// shows. It records what it was told.
type pointMaker struct {
	*replay.Stream
	mu            sync.Mutex
	told          []geom.PointFilter
	keyframesOnly bool
}

func (p *pointMaker) MakePoints(filt geom.PointFilter, keyframesOnly bool) (bool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.told = append(p.told, filt)
	p.keyframesOnly = keyframesOnly
	return true, nil
}

func (p *pointMaker) Push(ctx context.Context, f engine.Frame) ([]engine.Result, error) {
	res, err := p.Stream.Push(ctx, f)
	p.mu.Lock()
	defer p.mu.Unlock()
	for i := range res {
		r := &res[i]
		if len(p.told) == 0 || (p.keyframesOnly && r.Kind == engine.NonKeyframe) {
			continue
		}
		k, kerr := geom.Keep(r.DepthFrame(), p.told[len(p.told)-1])
		if kerr != nil {
			return nil, kerr
		}
		for j := 0; j < len(k.XYZ); j += 3 {
			k.XYZ[j] += 100
		}
		r.Kept = k
	}
	return res, err
}

// The node tells the engine its cloud filter once, for keyframes only, and
// publishes the points the engine made ahead as each keyframe's cloud
// (coloured from the frame), counting them in /diagnostics.
func TestCoreUsesEnginePoints(t *testing.T) {
	ref := goldenReplay(t)
	w, h := ref.Size()
	cfg := fastConfig(t)
	cfg.ConfThreshold, cfg.CloudStride = 2.5, 2
	pm := &pointMaker{Stream: goldenReplay(t)}
	c := startCore(t, cfg, pm, nil, "/image")
	const n = 8
	for i := range n {
		if err := c.tr.Deliver("/image", frame(i, w, h, "cam_optical"), nil); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "8 depth images", 10*time.Second, func() bool { return len(c.tr.Messages("/lbm/depth")) == n })
	pm.mu.Lock()
	told, kfOnly := pm.told, pm.keyframesOnly
	pm.mu.Unlock()
	if want := (geom.PointFilter{ConfThreshold: 2.5, Stride: 2}); len(told) != 1 || told[0] != want || !kfOnly {
		t.Fatalf("the node told the engine %+v (keyframes only %v), want %+v once, keyframes only", told, kfOnly, want)
	}
	clouds := c.tr.Messages("/lbm/cloud")
	if len(clouds) == 0 {
		t.Fatal("no cloud")
	}
	for i, m := range clouds {
		pts, err := msgs.ParsePointCloud2(m.(*sensor_msgs.PointCloud2))
		if err != nil {
			t.Fatal(err)
		}
		r := ref.Reference(i)
		want, err := geom.ConfidentPoints(nil, r.DepthFrame(), told[0])
		if err != nil {
			t.Fatal(err)
		}
		if len(pts) != len(want) || len(want) == 0 {
			t.Fatalf("cloud %d: %d points, want %d", i, len(pts), len(want))
		}
		for j, p := range pts {
			q := want[j]
			q.X += 100
			// in the z-up map frame (REP 103/105)
			q = mapOf(t, ref).Points(nil, []geom.Point{q})[0]
			if p != (msgs.PointXYZRGB{X: q.X, Y: q.Y, Z: q.Z, R: q.R, G: q.G, B: q.B}) {
				t.Fatalf("cloud %d point %d: %+v, want the engine's %+v moved by 100, in the map frame", i, j, p, q)
			}
		}
	}
	waitDiag(t, c.tr, map[string]string{"points_device_frames": strconv.Itoa(len(clouds)), "points_host_frames": "0"})
}
