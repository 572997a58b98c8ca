// Package output owns what a mapping run leaves on disk, written so that a
// crash or a kill leaves readable files: the output folder of
// `lingbotmap run` (trajectory rows as frames finish, depth and confidence
// PNGs each whole, map.ply, ranges.tsv, preview.png and run.json replaced
// atomically at checkpoints after an fsync of what they describe), and the
// saved sessions of run and the node (session.go).
package output

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/lingbotmap/lingbotmap/engine"
	"github.com/lingbotmap/lingbotmap/engine/binstate"
	"github.com/lingbotmap/lingbotmap/engine/geom"
	"github.com/lingbotmap/lingbotmap/engine/mapframe"
	"github.com/lingbotmap/lingbotmap/engine/mapio"
	"github.com/lingbotmap/lingbotmap/engine/occgrid"
	"github.com/lingbotmap/lingbotmap/engine/pipeline"
	"github.com/lingbotmap/lingbotmap/engine/render"
	"github.com/lingbotmap/lingbotmap/internal/atomicfile"
)

// Folder turns results into the output files as they arrive: trajectory
// rows are appended at once; the poses and the map go into a mapio.Map (the
// node's accumulator too), bounded by the explored volume, and are saved at
// checkpoints; the frames' depth maps are written, each whole, and dropped.
type Folder struct {
	opt Options
	// frame is the map frame the files are written in (REP 103/105); the
	// map keeps the engine's world
	frame  *mapframe.Frame
	m      *mapio.Map
	tum    *mapio.TUMAppender
	frames Frames
	depth  Depth
	ranges []depthRange
	// files are the per-frame images written, with their sizes and
	// checksums, which a resumed session checks before it goes on.
	files  []FileSum
	window int
	// lastCheckpoint is frames.Results at the last checkpoint.
	lastCheckpoint int
	// writing is the checkpoint being written on its own goroutine.
	writing chan error

	// timings: output and prepare are sums over frames, stages their
	// per-frame values; mapStart is when the first frame went in, and
	// resumedResults the results a resumed session brought.
	output, prepare time.Duration
	stages          stageTimes
	mapStart        time.Time
	resumedResults  int
	// tumScale is the metric scale the trajectory's last rows were written
	// at; tumMixed says the file holds rows of two scales (the scale became
	// known, or moved, part way): Finish then rewrites it whole at the
	// final scale
	tumScale float64
	tumMixed bool
}

// depthRange is one line of depth_color/ranges.tsv.
type depthRange struct {
	seq uint64
	r   render.DepthRange
}

// Options say what a Folder writes.
type Options struct {
	Dir     string // the output folder (created if missing)
	Version string // the program's, for map.ply's comments
	// Map is the voxel map's size and point filter.
	Map mapio.MapConfig
	// SaveDepth writes depth/ (16-bit, DepthScale units per model unit)
	// and depth_color/; SaveConf writes conf/ (ConfScale units).
	SaveDepth, SaveConf   bool
	DepthScale, ConfScale float64
	// CheckpointEvery is the cadence, in results, of MaybeCheckpoint (0:
	// only the final one).
	CheckpointEvery int
	// OnCheckpoint, when set, runs at every checkpoint, after its files are
	// written, on the goroutine that wrote them.
	OnCheckpoint func(ctx context.Context, cp Checkpoint) error
	// Frame is the map frame the trajectory, map.ply and the preview are
	// written in, as the node publishes them: z up, x forward at the first
	// frame (engine/mapframe; its SetScale makes them metric). Nil: a frame
	// of its own, fixed at the first result with the optical-to-body
	// rotation (no base frame).
	Frame *mapframe.Frame
	// Grid makes the occupancy grid written at the end (map.pgm, map.yaml,
	// grid.png); nil: occgrid.DefaultConfig.
	Grid *occgrid.Config
}

// New starts a Folder: Plan, then Create.
func New(opt Options) (*Folder, error) {
	w, err := Plan(opt)
	if err == nil {
		err = w.Create()
	}
	return w, err
}

// Plan starts a Folder in memory only: nothing is written until Create,
// so that a run that fails to start (or a resume that is refused) leaves
// the folder as it was.
func Plan(opt Options) (*Folder, error) {
	m, err := mapio.NewMap(opt.Map)
	if err != nil {
		return nil, err
	}
	frame := opt.Frame
	if frame == nil {
		frame = mapframe.New()
	}
	return &Folder{
		opt:   opt,
		frame: frame,
		m:     m,
		depth: Depth{Saved: opt.SaveDepth, Scale: opt.DepthScale, Unit: fmt.Sprintf("1/%g of a model depth unit (metres for metric models)", opt.DepthScale),
			ConfSaved: opt.SaveConf, ConfScale: opt.ConfScale},
		window: -1,
	}, nil
}

// Create makes the output folder, the subfolders it writes and the
// trajectory file, which holds the rows restored so far (Restore,
// LoadState) and grows from there.
func (w *Folder) Create() error {
	opt := w.opt
	if err := os.MkdirAll(opt.Dir, 0o755); err != nil {
		return fmt.Errorf("output folder: %w", err)
	}
	for _, d := range []struct {
		on   bool
		name string
	}{{opt.SaveDepth, "depth"}, {opt.SaveDepth, "depth_color"}, {opt.SaveConf, "conf"}} {
		if d.on {
			if err := os.MkdirAll(filepath.Join(opt.Dir, d.name), 0o755); err != nil {
				return fmt.Errorf("output folder: %w", err)
			}
		}
	}
	tum, err := mapio.CreateTUM(filepath.Join(opt.Dir, mapio.TrajectoryFile))
	if err != nil {
		return err
	}
	w.tum = tum
	w.tumScale, _ = w.frame.Scale()
	if tr := w.m.TrajectoryIn(w.frame); len(tr) > 0 {
		return w.tum.Append(tr...)
	}
	return nil
}

// Frame is the map frame the files are written in.
func (w *Folder) Frame() *mapframe.Frame { return w.frame }

// Map is the trajectory and voxel map so far (in the engine's world).
func (w *Folder) Map() *mapio.Map { return w.m }

// Frames are the result counts so far.
func (w *Folder) Frames() Frames { return w.frames }

// Began marks when the first frame went in: the start of the mapping time.
func (w *Folder) Began() { w.mapStart = time.Now() }

// AddTiming counts a delivered frame's stage times into run.json's timings.
func (w *Folder) AddTiming(t pipeline.Timing) {
	w.prepare += t.Prepare
	w.stages.add(t)
}

// Restore makes the writer continue a resumed session: the restored map
// and counts replace the empty ones (LoadState restores the map frame
// first; without one, the map's first pose fixes it), and the trajectory
// file, if Create has started it empty, gets the map's poses again, so
// that it holds every row once (Create writes them otherwise).
func (w *Folder) Restore(m *mapio.Map, frames Frames) error {
	w.m, w.frames, w.lastCheckpoint, w.resumedResults = m, frames, frames.Results, frames.Results
	if p := m.Path(); !w.frame.Fixed() && len(p) > 0 {
		// a map without its frame (a session of an older version): its
		// first pose is the first camera's, with no base frame
		w.frame.FixAt(mapframe.OpticalToBody(), p[0].CamToWorld)
	}
	w.tumScale, _ = w.frame.Scale()
	if w.tum == nil {
		return nil
	}
	return w.tum.Append(m.TrajectoryIn(w.frame)...)
}

// Close releases the trajectory file (Finish has synced it).
func (w *Folder) Close() {
	if w.tum != nil {
		w.tum.Close()
		w.tum = nil
	}
}

// AddResults maps results one after the other on the caller's goroutine:
// Post and Add in line, the serial form of what run's pipeline does.
func (w *Folder) AddResults(results []engine.Result) error {
	for i := range results {
		v, err := w.Post(&results[i])
		if err == nil {
			err = w.Add(&results[i], v)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// Posted is what Post makes of one result off the model's thread.
type Posted struct {
	points               []geom.Point
	clipped, confClipped int64
	depthRange           *render.DepthRange // with --save-depth
	files                []FileSum
	took                 time.Duration
}

// Post does a result's own work, in any order and on any goroutine: it
// checks the result, writes its depth, depth preview and confidence
// images, each whole, and unprojects its confident points. It reads only
// settings and the map frame's scale (which has its own lock).
func (w *Folder) Post(r *engine.Result) (Posted, error) {
	t := time.Now()
	var v Posted
	n := r.Width * r.Height
	if r.Width <= 0 || r.Height <= 0 || len(r.Depth) != n || (r.Conf != nil && len(r.Conf) != n) || (r.RGB != nil && len(r.RGB) != 3*n) {
		return v, fmt.Errorf("frame %d: the engine returned %d depth, %d confidence and %d colour values for a %d×%d image",
			r.Seq, len(r.Depth), len(r.Conf), len(r.RGB), r.Width, r.Height)
	}
	if w.opt.SaveDepth {
		// in metres once the scale is known; the images written before
		// are rewritten at the run's end (Finish)
		depth, metric := r.Depth, 0.0
		if sc, known := w.frame.Scale(); known {
			depth, metric = scaled(r.Depth, sc), sc
		}
		c, sum, err := writeGray16File(w.opt.Dir, FileSum{Kind: DepthImage, Seq: r.Seq, Metric: metric}, depth, r.Width, r.Height, w.opt.DepthScale)
		if err != nil {
			return v, err
		}
		v.clipped = int64(c)
		v.files = append(v.files, sum)
		img, dr, err := render.DepthPreview(depth, r.Width, r.Height)
		if err == nil {
			sum, err = writeSummed(w.opt.Dir, FileSum{Kind: DepthColorImage, Seq: r.Seq, Metric: metric}, func(f io.Writer) error { return render.EncodePNG(f, img) })
		}
		if err != nil {
			return v, err
		}
		v.files = append(v.files, sum)
		v.depthRange = &dr
	}
	if w.opt.SaveConf && r.Conf != nil {
		c, sum, err := writeGray16File(w.opt.Dir, FileSum{Kind: ConfImage, Seq: r.Seq}, r.Conf, r.Width, r.Height, w.opt.ConfScale)
		if err != nil {
			return v, err
		}
		v.confClipped = int64(c)
		v.files = append(v.files, sum)
	}
	pts, err := w.m.FramePoints(r.DepthFrame())
	if err != nil {
		return v, fmt.Errorf("frame %d: %w", r.Seq, err)
	}
	v.points = pts
	v.took = time.Since(t)
	return v, nil
}

// Add takes a posted result into the trajectory, the map and the counts.
// Results must come in frame order, on one goroutine at a time.
func (w *Folder) Add(r *engine.Result, v Posted) error {
	t := time.Now()
	defer func() { w.output += v.took + time.Since(t) }()
	if err := w.m.AddPose(r.Seq, r.Stamp, r.CamToWorld); err != nil {
		return fmt.Errorf("frame %d: the engine returned an unusable pose: %w", r.Seq, err)
	}
	if !w.frame.Fixed() {
		// the first result (its pose AddPose just checked) fixes the frame
		w.frame.FixAt(mapframe.OpticalToBody(), r.CamToWorld)
	}
	p, _ := w.m.LastPose()
	if sc, _ := w.frame.Scale(); sc != w.tumScale {
		w.tumMixed = w.tumMixed || w.frames.Results > 0
		w.tumScale = sc
	}
	pt, pq, err := geom.Decompose(w.frame.CamPose(p.CamToWorld))
	if err != nil {
		return fmt.Errorf("frame %d: the pose in the map frame: %w", r.Seq, err)
	}
	if err := w.tum.Append(mapio.StampedPose{Time: mapio.Seconds(p.Stamp), T: pt, Q: pq}); err != nil {
		return err
	}
	w.frames.Results++
	switch r.Kind {
	case engine.Scale:
		w.frames.Scale++
	case engine.Keyframe:
		w.frames.Keyframes++
	case engine.NonKeyframe:
		w.frames.NonKeyframes++
	}
	if r.Window != w.window {
		w.window = r.Window
		w.frames.Windows++
	}
	w.depth.Clipped += v.clipped
	w.depth.ConfClipped += v.confClipped
	if v.depthRange != nil {
		w.ranges = append(w.ranges, depthRange{r.Seq, *v.depthRange})
	}
	w.files = append(w.files, v.files...)
	w.m.AddFramePoints(v.points)
	return nil
}

// CheckpointDue reports whether CheckpointEvery results have come since
// the last checkpoint.
func (w *Folder) CheckpointDue() bool {
	n := w.opt.CheckpointEvery
	return n > 0 && w.frames.Results-w.lastCheckpoint >= n
}

// MaybeCheckpoint writes a checkpoint when one is due (CheckpointDue).
func (w *Folder) MaybeCheckpoint(ctx context.Context, rec *Record, start time.Time) error {
	if !w.CheckpointDue() {
		return nil
	}
	return w.checkpoint(ctx, rec, start, false)
}

// snapshot is what a checkpoint writes, taken between two frames: the
// map's points, the depth ranges and run.json's record as they were then.
type snapshot struct {
	results  int
	status   string
	final    bool
	points   []geom.Point
	comments []string
	ranges   []depthRange
	path     [][3]float64 // camera positions, for the final preview
	rec      Record
	// rangeUnit is ranges.tsv's unit
	rangeUnit string
}

// checkpoint makes what was written so far durable and consistent: the
// trajectory rows and depth images reach the disk, then map.ply,
// ranges.tsv and, last, run.json (which counts the frames they cover) are
// replaced atomically; then the OnCheckpoint hook runs. It takes the
// snapshot at once and, but for the final one, writes it on a goroutine of
// its own, so that the model goes on meanwhile; the next checkpoint waits
// for it and returns its error.
func (w *Folder) checkpoint(ctx context.Context, rec *Record, start time.Time, final bool) error {
	if err := w.WaitWrite(); err != nil {
		return err
	}
	t := time.Now()
	snap := w.snapshot(rec, start, final)
	w.lastCheckpoint = w.frames.Results
	w.output += time.Since(t)
	if final {
		return w.write(ctx, snap)
	}
	done := make(chan error, 1)
	w.writing = done
	go func() { done <- w.write(context.WithoutCancel(ctx), snap) }()
	return nil
}

// WaitWrite waits for the checkpoint being written, if any, and returns
// its error.
func (w *Folder) WaitWrite() error {
	if w.writing == nil {
		return nil
	}
	err := <-w.writing
	w.writing = nil
	return err
}

// snapshot takes what a checkpoint writes from the writer's state.
func (w *Folder) snapshot(rec *Record, start time.Time, final bool) *snapshot {
	w.fillRecord(rec, start)
	pts := w.m.Points()
	unit := "model units (metric scale unknown)"
	if sc, known := w.frame.Scale(); known {
		unit = fmt.Sprintf("metres (metric scale %g m per model unit)", sc)
	}
	s := &snapshot{
		results: w.frames.Results, status: rec.Status, final: final,
		points: w.frame.Points(pts, pts),
		comments: append([]string{
			"lingbotmap " + w.opt.Version,
			"source " + rec.Input.Path,
			fmt.Sprintf("frames %d", w.frames.Results),
			"frame map (REP 103/105): z up, x forward at the first frame, the first frame's base at the origin",
			"units " + unit,
		}, w.m.FilterComments()...),
		// ranges only grows: the rows up to here stay as they are while
		// later frames append
		ranges:    w.ranges[:len(w.ranges):len(w.ranges)],
		rec:       *rec,
		rangeUnit: "model depth units",
	}
	if rec.Depth.Metric {
		s.rangeUnit = "metres"
	} else if len(rec.Depth.MetricAt) > 0 {
		s.rangeUnit = "metres for the frames in run.json's depth.metric_at, model depth units for the others"
	}
	if final {
		for _, p := range w.m.Path() {
			s.path = append(s.path, geom.TranslationOf(w.frame.CamPose(p.CamToWorld)))
		}
	}
	return s
}

// write writes a snapshot's files in the order that keeps them consistent
// on a crash, then runs the OnCheckpoint hook.
func (w *Folder) write(ctx context.Context, s *snapshot) error {
	out := w.opt.Dir
	// the trajectory's rows up to the snapshot (and maybe more) are in the
	// file already; syncfs covers it with the images
	var errs []error
	if w.opt.SaveDepth || w.opt.SaveConf {
		errs = append(errs, mapio.SyncFS(out))
	} else {
		errs = append(errs, syncFile(filepath.Join(out, mapio.TrajectoryFile)))
	}
	errs = append(errs, atomicfile.WriteFile(filepath.Join(out, mapio.MapFile), func(f io.Writer) error {
		return mapio.WritePLY(f, s.points, s.comments...)
	}))
	if w.opt.SaveDepth {
		errs = append(errs, atomicfile.WriteFile(filepath.Join(out, "depth_color", "ranges.tsv"), func(f io.Writer) error {
			fmt.Fprintf(f, "# frame\tnear\tfar (%s; depth_color/NNNNNN.png spans near = yellow to far = purple)\n", s.rangeUnit)
			for _, r := range s.ranges {
				if _, err := fmt.Fprintf(f, "%06d\t%.6g\t%.6g\n", r.seq, r.r.Near, r.r.Far); err != nil {
					return err
				}
			}
			return nil
		}))
	}
	if s.final {
		errs = append(errs, w.writePreview(s.path, s.points), w.writeGrid(s.path, s.points))
	}
	// run.json only when the files it describes are whole.
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if err := WriteRecord(out, &s.rec); err != nil {
		return err
	}
	if w.opt.OnCheckpoint != nil {
		cp := Checkpoint{Out: out, Results: s.results, Final: s.final, Status: s.status}
		if err := w.opt.OnCheckpoint(ctx, cp); err != nil {
			return fmt.Errorf("checkpoint at %d frames: %w", s.results, err)
		}
	}
	return nil
}

// writePreview draws the trajectory over the map's points into preview.png.
func (w *Folder) writePreview(positions [][3]float64, pts []geom.Point) error {
	// seen from above the z-up map: x right, y up
	img, err := render.TopView(positions, pts, render.TopViewOptions{
		Title: fmt.Sprintf("%d poses, %d map points (map frame seen from above: x right, y up)", len(positions), len(pts)),
		Axes:  &render.Axes{H: 0, V: 1},
	})
	if err != nil {
		return err
	}
	return WritePNG(filepath.Join(w.opt.Dir, PreviewFile), img)
}

// writeGrid projects the map into the occupancy grid and writes it as nav2
// map_server files and, beside the top view, into grid.png.
func (w *Folder) writeGrid(positions [][3]float64, pts []geom.Point) error {
	cfg := occgrid.DefaultConfig()
	if w.opt.Grid != nil {
		cfg = *w.opt.Grid
	}
	p3 := make([][3]float64, len(pts))
	for i, p := range pts {
		p3[i] = [3]float64{float64(p.X), float64(p.Y), float64(p.Z)}
	}
	g, err := occgrid.Project(p3, positions, cfg)
	if err != nil {
		return fmt.Errorf("occupancy grid: %w", err)
	}
	if err := g.WriteMapServer(w.opt.Dir, GridBase); err != nil {
		return err
	}
	top, err := render.TopView(positions, pts, render.TopViewOptions{
		Width: 800, Height: 800, Axes: &render.Axes{H: 0, V: 1},
		Title: fmt.Sprintf("map from above (x right, y up): %d points, %d poses", len(pts), len(positions)),
	})
	if err != nil {
		return err
	}
	gv, err := render.GridView(g, positions, render.GridViewOptions{Width: 800, Height: 800,
		Title: fmt.Sprintf("/map grid %d x %d of %g: black occupied, white free, grey unknown", g.Width, g.Height, g.Resolution)})
	if err != nil {
		return err
	}
	return WritePNG(filepath.Join(w.opt.Dir, GridPreviewFile), render.SideBySide(top, gv))
}

// fillRecord fills run.json's counts and timings from what was written so
// far.
func (w *Folder) fillRecord(rec *Record, start time.Time) {
	st := w.m.Stats()
	dev, host := w.m.PointFrames()
	mc := w.m.Config()
	rec.Map = Map{ConfThreshold: mc.Filter.ConfThreshold, VoxelSize: mc.VoxelSize, PixelStride: mc.Filter.Stride, PointsIn: st.PointsIn, Points: st.Voxels, Outside: st.Outside,
		FramesDevice: dev, FramesHost: host}
	rec.Depth = w.depth
	rec.Depth.Metric, rec.Depth.MetricAt, rec.Depth.Unit = w.depthUnits()
	rec.Frames.Results, rec.Frames.Scale, rec.Frames.Keyframes = w.frames.Results, w.frames.Scale, w.frames.Keyframes
	rec.Frames.NonKeyframes, rec.Frames.Windows = w.frames.NonKeyframes, w.frames.Windows
	rec.Outputs = map[string]string{"trajectory": mapio.TrajectoryFile, "map": mapio.MapFile, "preview": PreviewFile,
		"grid": GridBase + ".yaml", "grid_image": GridBase + ".pgm", "grid_preview": GridPreviewFile}
	if w.opt.SaveDepth {
		rec.Outputs["depth"] = "depth/"
		rec.Outputs["depth_color"] = "depth_color/"
		rec.Depth.ColorRanges = "depth_color/ranges.tsv"
	}
	if w.opt.SaveConf {
		rec.Outputs["conf"] = "conf/"
	}
	rec.Finished = time.Now().UTC()
	total := time.Since(start)
	rec.Timings.TotalS = total.Seconds()
	rec.Timings.OutputS = w.output.Seconds()
	rec.Timings.PrepareS = w.prepare.Seconds()
	rec.Timings.MsPerFrame, rec.Timings.FramesPerS, rec.Timings.OverallFramesPS, rec.Timings.ModelFramesPS = 0, 0, 0, 0
	rec.Timings.Medians = w.stages.medians()
	if n := w.frames.Results; n > 0 {
		rec.Timings.MsPerFrame = rec.Timings.ModelS * 1000 / float64(n)
		rec.Timings.OverallFramesPS = float64(n) / total.Seconds()
		if !w.mapStart.IsZero() {
			rec.Timings.MappingS = time.Since(w.mapStart).Seconds()
			rec.Timings.FramesPerS = float64(n-w.resumedResults) / rec.Timings.MappingS
		}
		if rec.Timings.ModelS > 0 {
			rec.Timings.ModelFramesPS = float64(n-w.resumedResults) / rec.Timings.ModelS
		}
	}
}

// WriteRecord fills run.json from what was written so far and replaces it
// atomically.
func (w *Folder) WriteRecord(rec *Record, start time.Time) error {
	w.fillRecord(rec, start)
	return WriteRecord(w.opt.Dir, rec)
}

// Finish writes the last checkpoint with the run's final status, the
// preview included, and closes the trajectory.
func (w *Folder) Finish(ctx context.Context, rec *Record, start time.Time) error {
	// depth images written before the metric scale was known (or at
	// another one) are rewritten at the final one, each atomically, before
	// the final checkpoint saves their new checksums
	if err := w.WaitWrite(); err != nil {
		// as the final checkpoint would: the files are not consistent
		if w.tum != nil {
			err = errors.Join(err, w.tum.Close())
			w.tum = nil
		}
		return err
	}
	err := w.rescaleDepth()
	if sc, _ := w.frame.Scale(); w.tum != nil && (w.tumMixed || (w.frames.Results > 0 && sc != w.tumScale)) {
		// rows written before the metric scale was known (or moved) are
		// rewritten at the final one, so that the whole file is in metres
		err = errors.Join(w.tum.Close(), atomicfile.WriteFile(filepath.Join(w.opt.Dir, mapio.TrajectoryFile), func(f io.Writer) error {
			return mapio.WriteTUM(f, w.m.TrajectoryIn(w.frame))
		}))
		w.tum = nil
	}
	// The hook runs even after a cancelled run: it gets a live context.
	err = errors.Join(err, w.checkpoint(context.WithoutCancel(ctx), rec, start, true))
	if w.tum != nil {
		err = errors.Join(err, w.tum.Close())
		w.tum = nil
	}
	return err
}

// Discard removes what Create and the results so far wrote (the folder's
// run outputs, by Names), for a run that mapped nothing: it leaves nothing
// in the way of the next run. Only for a folder Prepare found free.
func (w *Folder) Discard() error {
	w.Close()
	if err := w.WaitWrite(); err != nil {
		return err
	}
	var errs []error
	for _, name := range Names() {
		if err := os.RemoveAll(filepath.Join(w.opt.Dir, name)); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// State is where a Folder's counts stand, for a saved session's header.
type State struct {
	Frames Frames `json:"frames"`
	Depth  Depth  `json:"depth"`
	Window int    `json:"window"`
	// MapFrame is the map frame and metric scale (zero in sessions saved
	// before run wrote a z-up map frame)
	MapFrame mapframe.State `json:"map_frame"`
}

// State returns the counts.
func (w *Folder) State() State {
	d := w.depth
	d.Metric, d.MetricAt, d.Unit = w.depthUnits()
	return State{Frames: w.frames, Depth: d, Window: w.window, MapFrame: w.frame.State()}
}

// SaveState writes the depth ranges and the map, a saved session's body.
func (w *Folder) SaveState(bw *binstate.Writer) error {
	bw.Int(len(w.ranges))
	for _, r := range w.ranges {
		bw.I64(int64(r.seq))
		bw.F64(r.r.Near)
		bw.F64(r.r.Far)
	}
	bw.Int(len(w.files))
	for _, f := range w.files {
		bw.Int(int(f.Kind))
		bw.I64(int64(f.Seq))
		bw.I64(f.Size)
		bw.U32(f.CRC)
	}
	return w.m.SaveState(bw)
}

// LoadState reads what SaveState wrote, with the counts st of the same
// session, and continues from there (Restore).
func (w *Folder) LoadState(br *binstate.Reader, st State) error {
	var ranges []depthRange
	n := br.Int("depth ranges", 0, max(st.Frames.Results, 0))
	for i := 0; i < n && br.Err() == nil; i++ {
		d := depthRange{seq: uint64(br.I64())}
		d.r = render.DepthRange{Near: br.F64(), Far: br.F64()}
		ranges = append(ranges, d)
	}
	var files []FileSum
	n = br.Int("output files", 0, 3*max(st.Frames.Results, 0))
	for i := 0; i < n && br.Err() == nil; i++ {
		f := FileSum{Kind: FileKind(br.Int("output file kind", 0, int(ConfImage)))}
		f.Seq, f.Size, f.CRC = uint64(br.I64()), br.I64(), br.U32()
		files = append(files, f)
	}
	if err := br.Err(); err != nil {
		return err
	}
	if err := w.m.LoadState(br); err != nil {
		return err
	}
	if st.MapFrame.Scale != 0 {
		if err := w.frame.Restore(st.MapFrame); err != nil {
			return err
		}
	}
	// which images were written at a metric scale: from the header
	for i := range files {
		files[i].Metric = 0
		if files[i].Kind == ConfImage {
			continue
		}
		for _, m := range st.Depth.MetricAt {
			if files[i].Seq >= m.First && files[i].Seq <= m.Last {
				files[i].Metric = m.Scale
			}
		}
	}
	w.ranges, w.files = ranges, files
	w.frames, w.depth, w.window = st.Frames, st.Depth, st.Window
	return nil
}
