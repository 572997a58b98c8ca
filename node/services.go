package node

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/lingbotmap/lingbotmap/engine/mapio"
)

// serve offers the node's std_srvs/Trigger services.
func (n *Node) serve() ([]io.Closer, error) {
	var srvs []io.Closer
	for _, sv := range []struct {
		name   string
		handle func(ctx context.Context) (string, error)
	}{
		{"~reset", func(context.Context) (string, error) { return "map reset", n.reset() }},
		{"~pause", func(context.Context) (string, error) {
			n.paused.Store(true)
			return "paused: incoming images are ignored", nil
		}},
		{"~resume", func(context.Context) (string, error) { n.paused.Store(false); return "resumed", nil }},
		{"~save_map", func(context.Context) (string, error) { return n.saveMap() }},
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

// reset starts a new map: engine caches, queue, path, map and input size.
func (n *Node) reset() error {
	n.engineMu.Lock()
	err := n.stream.Reset()
	n.engineMu.Unlock()
	n.stats.cacheFull.Store(false)
	drained := n.queue.Drain()
	n.mu.Lock()
	n.path = nil
	n.grid.Reset()
	n.mapDirty = true
	n.size = [2]int{}
	clear(n.frameIDs)
	n.mu.Unlock()
	n.log.Info("map reset", "dropped_queued_frames", drained)
	n.publishMap(true)
	n.publishPath()
	if err != nil {
		return fmt.Errorf("resetting the engine: %w", err)
	}
	return nil
}

// saveMap writes map.ply and trajectory.tum into the directory named by the
// save_dir parameter at the time of the call (ROS 1: rosparam set
// ~save_dir), or the save_dir setting.
func (n *Node) saveMap() (string, error) {
	dir := n.cfg.SaveDir
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
	n.mu.Lock()
	pts := n.grid.Points()
	traj := make([]mapio.StampedPose, len(n.path))
	for i, p := range n.path {
		traj[i] = mapio.PoseFromMatrix(float64(p.stamp.UnixNano())/1e9, p.c2w)
	}
	n.mu.Unlock()
	plyPath, tumPath := filepath.Join(dir, "map.ply"), filepath.Join(dir, "trajectory.tum")
	if err := writeFileAtomic(plyPath, func(f *os.File) error {
		return mapio.WritePLY(f, pts, "lingbotmap map, frame "+n.cfg.MapFrame, fmt.Sprintf("voxel %g m, confidence > %g", n.cfg.MapVoxel, n.cfg.ConfThreshold))
	}); err != nil {
		return "", err
	}
	if err := writeFileAtomic(tumPath, func(f *os.File) error { return mapio.WriteTUM(f, traj) }); err != nil {
		return "", err
	}
	msg := fmt.Sprintf("wrote %d points to %s and %d poses to %s", len(pts), plyPath, len(traj), tumPath)
	n.log.Info("map saved", "ply", plyPath, "points", len(pts), "tum", tumPath, "poses", len(traj))
	return msg, nil
}

// writeFileAtomic writes through a temporary file so a reader never sees half a file.
func writeFileAtomic(path string, write func(*os.File) error) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	defer os.Remove(f.Name())
	if err := write(f); err != nil {
		f.Close()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}
