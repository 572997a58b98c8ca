package mapio

import (
	"errors"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/lingbotmap/lingbotmap/engine/geom"
	"github.com/lingbotmap/lingbotmap/internal/atomicfile"
)

// The file names Map.Save writes.
const (
	MapFile        = "map.ply"
	TrajectoryFile = "trajectory.tum"
)

// MapConfig is how a Map filters and keeps what it is given.
type MapConfig struct {
	// VoxelSize is the voxel edge in model units (metres for metric models);
	// each voxel keeps the mean of its points. > 0.
	VoxelSize float64
	// Filter picks each frame's confident pixels (threshold and stride).
	Filter geom.PointFilter
	// MaxPoses bounds the trajectory, oldest poses dropped first; 0 keeps all.
	MaxPoses int
}

// ErrConfig marks a MapConfig that Check refuses.
var ErrConfig = errors.New("bad map configuration")

// Check names the setting that is wrong; the error wraps ErrConfig.
func (c MapConfig) Check() error {
	var errs []error
	if !(c.VoxelSize >= MinVoxelSize) || math.IsInf(c.VoxelSize, 0) {
		errs = append(errs, fmt.Errorf("mapio: voxel size must be a finite number ≥ %g, not %g (voxel indices are 32-bit: a smaller voxel leaves most points without one)", MinVoxelSize, c.VoxelSize))
	}
	if err := c.Filter.Check(); err != nil {
		errs = append(errs, fmt.Errorf("mapio: %w", err))
	}
	if c.MaxPoses < 0 {
		errs = append(errs, fmt.Errorf("mapio: max poses must be ≥ 0, not %d", c.MaxPoses))
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %w", ErrConfig, errors.Join(errs...))
	}
	return nil
}

// PathPose is one camera pose of the trajectory.
type PathPose struct {
	Seq        uint64
	Stamp      time.Time
	CamToWorld geom.Mat4
	// T and Q are CamToWorld as position and unit quaternion (x, y, z, w),
	// w ≥ 0, of its nearest rotation: what a ROS pose and a TUM line carry.
	T [3]float64
	Q geom.Quat
}

// Stats counts what a Map holds.
type Stats struct {
	Poses    int   // in the trajectory now
	PointsIn int64 // confident points added since the last reset
	Voxels   int   // points of the map
	// Outside counts the confident points left out of the map because they
	// lie too far from the origin for a voxel index (beyond 2³¹ voxels).
	Outside int64
}

// Map accumulates one mapping session: the camera trajectory and a voxel map
// of the confident points of the frames given to AddPoints. The node, `run`
// and every transport keep one, so their maps and files agree. It is not
// safe for concurrent use.
type Map struct {
	cfg      MapConfig
	grid     *VoxelGrid
	path     []PathPose
	pointsIn int64
	// frames FramePoints served from f.Kept and by unprojecting (atomic:
	// FramePoints runs on other goroutines)
	keptFrames, hostFrames atomic.Int64
}

// NewMap checks the configuration and makes an empty map.
func NewMap(cfg MapConfig) (*Map, error) {
	if err := cfg.Check(); err != nil {
		return nil, err
	}
	return &Map{cfg: cfg, grid: NewVoxelGrid(cfg.VoxelSize)}, nil
}

// Config is the configuration the map was made with.
func (m *Map) Config() MapConfig { return m.cfg }

// AddPose appends a camera→world pose to the trajectory. A pose that is no
// rigid transform (geom.Decompose's degenerate cases) is refused with an
// error wrapping geom.ErrDegenerate, so the trajectory never holds NaNs.
func (m *Map) AddPose(seq uint64, stamp time.Time, camToWorld geom.Mat4) error {
	t, q, err := geom.Decompose(camToWorld)
	if err != nil {
		return fmt.Errorf("mapio: pose of frame %d: %w", seq, err)
	}
	m.path = append(m.path, PathPose{Seq: seq, Stamp: stamp, CamToWorld: camToWorld, T: t, Q: q})
	if n := m.cfg.MaxPoses; n > 0 && len(m.path) > n {
		m.path = append(m.path[:0], m.path[len(m.path)-n:]...)
	}
	return nil
}

// AddPoints adds a frame's confident points (geom.ConfidentPoints with the
// map's filter) to the voxel map and returns them, e.g. for a cloud message:
// FramePoints and AddFramePoints in one step.
func (m *Map) AddPoints(f geom.DepthFrame) ([]geom.Point, error) {
	pts, err := m.FramePoints(f)
	if err != nil {
		return nil, err
	}
	m.AddFramePoints(pts)
	return pts, nil
}

// FramePoints unprojects a frame's confident points with the map's filter,
// without touching the map: the per-pixel half of AddPoints, safe to run on
// other goroutines (a pipeline's workers) before AddFramePoints takes the
// points in frame order. Points made ahead for the same filter (f.Kept, a
// GPU's) are taken as they are and only coloured here.
func (m *Map) FramePoints(f geom.DepthFrame) ([]geom.Point, error) {
	return m.FramePointsWith(f, m.cfg.Filter)
}

// FramePointsWith is FramePoints with filter filt instead of the map's,
// for a filter that changed while mapping (the node's conf_threshold):
// points made ahead for another filter are made again here.
func (m *Map) FramePointsWith(f geom.DepthFrame, filt geom.PointFilter) ([]geom.Point, error) {
	if k := f.Kept; k != nil && k.Filter == filt {
		if err := f.Check(); err != nil {
			return nil, fmt.Errorf("mapio: %w", err)
		}
		pts, err := k.Points(nil, f.RGB)
		if err != nil {
			return nil, fmt.Errorf("mapio: %w", err)
		}
		m.keptFrames.Add(1)
		return pts, nil
	}
	pts, err := geom.ConfidentPoints(nil, f, filt)
	if err != nil {
		return nil, fmt.Errorf("mapio: %w", err)
	}
	m.hostFrames.Add(1)
	return pts, nil
}

// PointFrames counts the frames FramePoints gave points for since the map
// was made: kept are those whose points were made ahead (on a GPU), host
// those it unprojected itself. Safe for concurrent use.
func (m *Map) PointFrames() (kept, host int64) {
	return m.keptFrames.Load(), m.hostFrames.Load()
}

// AddFramePoints adds points FramePoints made to the map.
func (m *Map) AddFramePoints(pts []geom.Point) {
	m.pointsIn += int64(len(pts))
	m.grid.Add(pts)
}

// Points is the voxel map: one averaged point per voxel, in the order the
// voxels were first filled. The slice is the caller's.
func (m *Map) Points() []geom.Point { return m.grid.Points() }

// Path is a copy of the trajectory, oldest first.
func (m *Map) Path() []PathPose { return append([]PathPose(nil), m.path...) }

// LastPose is the newest pose of the trajectory; ok is false when it is empty.
func (m *Map) LastPose() (p PathPose, ok bool) {
	if len(m.path) == 0 {
		return PathPose{}, false
	}
	return m.path[len(m.path)-1], true
}

// Trajectory is the trajectory as TUM lines.
func (m *Map) Trajectory() []StampedPose {
	out := make([]StampedPose, len(m.path))
	for i, p := range m.path {
		out[i] = StampedPose{Time: Seconds(p.Stamp), T: p.T, Q: p.Q}
	}
	return out
}

// Stats counts poses, points added and voxels.
func (m *Map) Stats() Stats {
	return Stats{Poses: len(m.path), PointsIn: m.pointsIn, Voxels: m.grid.Len(), Outside: m.grid.Outside()}
}

// Reset empties the trajectory and the map.
func (m *Map) Reset() {
	m.path = m.path[:0]
	m.grid.Reset()
	m.pointsIn = 0
}

// FilterComments record the map's filter settings, one line each; Save puts
// them into the PLY header.
func (m *Map) FilterComments() []string {
	return []string{
		fmt.Sprintf("conf_threshold %g (pixels with confidence > threshold kept)", m.cfg.Filter.ConfThreshold),
		fmt.Sprintf("voxel_size %g (one averaged point per voxel)", m.cfg.VoxelSize),
		fmt.Sprintf("pixel_stride %d", m.cfg.Filter.Stride),
	}
}

// Frame converts the map's poses and points, which are in the engine's
// world, into the frame files are written in (engine/mapframe's map frame).
type Frame interface {
	CamPose(camToWorld geom.Mat4) geom.Mat4
	Points(dst, src []geom.Point) []geom.Point
}

// TrajectoryIn is the trajectory as TUM lines, the camera poses in f.
func (m *Map) TrajectoryIn(f Frame) []StampedPose {
	out := make([]StampedPose, 0, len(m.path))
	for _, p := range m.path {
		t, q, err := geom.Decompose(f.CamPose(p.CamToWorld))
		if err != nil {
			continue // AddPose kept rigid poses only; a frame keeps them rigid
		}
		out = append(out, StampedPose{Time: Seconds(p.Stamp), T: t, Q: q})
	}
	return out
}

// SaveIn is Save with the map and the camera trajectory in f.
func (m *Map) SaveIn(dir string, f Frame, comments ...string) (Saved, error) {
	pts := m.Points()
	return m.save(dir, f.Points(pts, pts), m.TrajectoryIn(f), comments)
}

// Saved says what Save wrote.
type Saved struct {
	MapPath, TrajectoryPath string
	Points, Poses           int
}

// Save writes the map (MapFile: comments, then FilterComments, in the PLY
// header) and the trajectory (TrajectoryFile) into dir, each atomically
// (WriteFileAtomic). The directory must exist.
func (m *Map) Save(dir string, comments ...string) (Saved, error) {
	return m.save(dir, m.Points(), m.Trajectory(), comments)
}

func (m *Map) save(dir string, pts []geom.Point, tr []StampedPose, comments []string) (Saved, error) {
	s := Saved{MapPath: filepath.Join(dir, MapFile), TrajectoryPath: filepath.Join(dir, TrajectoryFile)}
	s.Points, s.Poses = len(pts), len(tr)
	all := append(append([]string(nil), comments...), m.FilterComments()...)
	err := errors.Join(
		atomicfile.WriteFile(s.MapPath, func(w io.Writer) error { return WritePLY(w, pts, all...) }),
		atomicfile.WriteFile(s.TrajectoryPath, func(w io.Writer) error { return WriteTUM(w, tr) }),
	)
	return s, err
}
