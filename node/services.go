package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/bluenviron/goroslib/v2/pkg/msgs/std_msgs"

	"github.com/lingbotmap/lingbotmap/engine/pipeline"
)

// serve offers the node's std_srvs/Trigger services.
func (n *Node) serve() ([]io.Closer, error) {
	var srvs []io.Closer
	for _, sv := range []struct {
		name   string
		handle func(ctx context.Context) (string, error)
	}{
		{"~reset", func(ctx context.Context) (string, error) { return "map reset", n.reset(ctx) }},
		{"~pause", func(context.Context) (string, error) {
			n.paused.Store(true)
			return "paused: incoming images are ignored", nil
		}},
		{"~resume", func(context.Context) (string, error) { n.paused.Store(false); return "resumed", nil }},
		{"~save_map", func(ctx context.Context) (string, error) { return n.saveMap(ctx) }},
		{"~save_session", func(ctx context.Context) (string, error) { return n.saveSession(ctx) }},
		{"~load_map", func(ctx context.Context) (string, error) { return n.loadMap(ctx) }},
	} {
		name, handle := n.tr.Resolve(sv.name), sv.handle
		c, err := n.tr.ServeTrigger(name, func(ctx context.Context) (string, error) {
			msg, err := handle(ctx)
			if err != nil {
				n.log.Warn("service failed", "service", name, "err", err)
			}
			return msg, err
		})
		if err != nil {
			closeAll(srvs)
			return nil, fmt.Errorf("node: offering service %s: %w", name, err)
		}
		srvs = append(srvs, c)
	}
	return srvs, nil
}

// reset starts a new map: engine caches, path, map and input size. It runs
// on the model's thread once the frames submitted before it are delivered
// (into the old map); frames submitted after it start the new one.
func (n *Node) reset(ctx context.Context) error {
	var engineErr error
	err := n.pipe.Do(ctx, func(c pipeline.Cut[std_msgs.Header]) error {
		// frames the engine still buffered (a phase 1) are gone with it:
		// the pipeline gives them out without a result
		engineErr = c.Stream.Reset()
		n.stats.cacheFull.Store(false)
		n.mu.Lock()
		defer n.mu.Unlock()
		n.m.Reset()
		// the next frame is a new first camera, in the model's units anew
		n.frame.Reset()
		n.lastMapOdom.clear()
		if n.scale != nil {
			n.scale.tr.Reset()
		}
		n.lastStamp = time.Time{}
		n.mapDirty, n.pathDirty = true, true
		n.size = [2]int{}
		return nil
	})
	if err != nil {
		return fmt.Errorf("resetting: %w", err)
	}
	n.log.Info("map reset")
	n.publishMap(true)
	n.publishPath(true)
	if engineErr != nil {
		return fmt.Errorf("resetting the engine: %w", engineErr)
	}
	return nil
}

// GridFileBase names the occupancy grid's map_server files (map.pgm,
// map.yaml) that ~save_map writes.
const GridFileBase = "map"

// saveMap writes map.ply, trajectory.tum and the occupancy grid as
// map_server's map.pgm and map.yaml into the directory named by the
// save_dir parameter at the time of the call (ROS 1: rosparam set
// ~save_dir), or the save_dir setting. ~save_session (session.go) writes
// the whole session there.
//
// Poses go out before their frames are mapped (the pipeline's early lane),
// so it first waits until every frame submitted before the call is mapped:
// the files then hold at least every pose published before it.
func (n *Node) saveMap(ctx context.Context) (string, error) {
	dir, err := n.saveDir()
	if err != nil {
		return "", err
	}
	if err := n.pipe.Do(ctx, func(pipeline.Cut[std_msgs.Header]) error { return nil }); err != nil && !errors.Is(err, pipeline.ErrClosed) {
		return "", fmt.Errorf("waiting for the frames before the call to be mapped: %w", err)
	}
	// The map is not safe for concurrent use: publishing waits for the files.
	n.mu.Lock()
	saved, err := n.m.SaveIn(dir, n.frame, n.frameComments()...)
	pts, path := n.m.Points(), n.m.Path()
	n.mu.Unlock()
	if err != nil {
		return "", fmt.Errorf("saving the map: %w", err)
	}
	n.log.Info("map saved", "ply", saved.MapPath, "points", saved.Points, "tum", saved.TrajectoryPath, "poses", saved.Poses)
	msg := fmt.Sprintf("wrote %d points to %s and %d poses to %s", saved.Points, saved.MapPath, saved.Poses, saved.TrajectoryPath)
	// the occupancy grid as nav2's map_server loads it
	g, err := n.gridOf(n.frame.Points(pts, pts), path)
	if err == nil {
		err = g.WriteMapServer(dir, GridFileBase)
	}
	if err != nil {
		return "", fmt.Errorf("%s, but not the occupancy grid: %w", msg, err)
	}
	return fmt.Sprintf("%s and a %dx%d occupancy grid to %s", msg, g.Width, g.Height, filepath.Join(dir, GridFileBase+".yaml")), nil
}

// saveDir is the save_dir parameter at the time of the call, or the
// save_dir setting, created if missing.
func (n *Node) saveDir() (string, error) {
	dir := n.now().SaveDir
	params := n.tr.Params()
	name := paramName(params, "save_dir")
	set, err := params.IsSet("save_dir")
	if err != nil {
		n.log.Warn("cannot read the save_dir parameter; using the setting", "parameter", name, "dir", dir, "err", err)
	}
	if err == nil && set {
		d, err := params.String("save_dir")
		if err != nil {
			return "", fmt.Errorf("parameter %s must be a string: %w", name, err)
		}
		dir = d
	}
	if dir == "" {
		return "", fmt.Errorf("no directory: set the parameter %s", name)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("creating %s: %w", dir, err)
	}
	return dir, nil
}
