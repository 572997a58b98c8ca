package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"image"
	"image/png"
	"io"
	"log/slog"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bluenviron/goroslib/v2/pkg/msgs/sensor_msgs"
	"github.com/bluenviron/goroslib/v2/pkg/msgs/std_msgs"

	"github.com/lingbotmap/lingbotmap/engine"
	"github.com/lingbotmap/lingbotmap/engine/geom"
	"github.com/lingbotmap/lingbotmap/engine/golden"
	"github.com/lingbotmap/lingbotmap/engine/mapframe"
	"github.com/lingbotmap/lingbotmap/engine/mapio"
	"github.com/lingbotmap/lingbotmap/engine/output"
	"github.com/lingbotmap/lingbotmap/engine/render"
	"github.com/lingbotmap/lingbotmap/engine/source"
	"github.com/lingbotmap/lingbotmap/engine/traj"
	"github.com/lingbotmap/lingbotmap/internal/shared"
	"github.com/lingbotmap/lingbotmap/msgs/bag"
)

// fakeStream stands in for the model with results whose poses, depths and
// colours are known: frame k sits at (k, 0, 0) looking down +z at a wall 2 m
// away; its left half is confident (3), its right half not (1); pixel (u, v)
// has colour (10u, 10v, k). Like the engine it buffers the first scale frames.
type fakeStream struct {
	scale   int
	buf     []engine.Frame
	pushes  int
	onPush  func(n int) error // called before each push is answered
	badSize bool
	closed  bool
}

const fakeW, fakeH = 8, 6

func (s *fakeStream) result(f engine.Frame, kind engine.FrameKind) engine.Result {
	k := float64(f.Seq)
	r := engine.Result{
		Seq: f.Seq, Stamp: f.Stamp, Kind: kind,
		CamToWorld: [4][4]float64{{1, 0, 0, k}, {0, 1, 0, 0}, {0, 0, 1, 0}, {0, 0, 0, 1}},
		Intrinsics: [4]float64{10, 10, 4, 3},
		Width:      fakeW, Height: fakeH,
		Depth: make([]float32, fakeW*fakeH), Conf: make([]float32, fakeW*fakeH), RGB: make([]uint8, 3*fakeW*fakeH),
	}
	for v := range fakeH {
		for u := range fakeW {
			i := v*fakeW + u
			r.Depth[i] = 2
			r.Conf[i] = 1
			if u < fakeW/2 {
				r.Conf[i] = 3
			}
			r.RGB[3*i], r.RGB[3*i+1], r.RGB[3*i+2] = uint8(10*u), uint8(10*v), uint8(f.Seq)
		}
	}
	if s.badSize {
		r.Depth = r.Depth[:5]
	}
	return r
}

func (s *fakeStream) Push(_ context.Context, f engine.Frame) ([]engine.Result, error) {
	s.pushes++
	if f.Image == nil {
		return nil, errors.New("fake: frame without image")
	}
	if s.onPush != nil {
		if err := s.onPush(s.pushes); err != nil {
			return nil, err
		}
	}
	if s.pushes <= s.scale {
		s.buf = append(s.buf, f)
		if len(s.buf) < s.scale {
			return nil, nil
		}
		return s.Flush(context.Background())
	}
	return []engine.Result{s.result(f, engine.Keyframe)}, nil
}

func (s *fakeStream) Flush(context.Context) ([]engine.Result, error) {
	var out []engine.Result
	for _, f := range s.buf {
		out = append(out, s.result(f, engine.Scale))
	}
	s.buf = nil
	return out, nil
}

func (s *fakeStream) Stats() engine.CacheStats {
	return engine.CacheStats{FrameCount: s.pushes, PageSize: 42, FramesIn: int64(s.pushes)}
}
func (s *fakeStream) Reset() error { return nil }
func (s *fakeStream) Close() error { s.closed = true; return nil }

// testRunOptions reads the first 10 courthouse images into a fake stream.
func testRunOptions(t *testing.T, fs *fakeStream) *runOptions {
	t.Helper()
	dir, err := shared.Path("data", "courthouse")
	if err != nil {
		t.Fatal(err)
	}
	o := defaultRunOptions()
	o.input = dir
	o.out = filepath.Join(t.TempDir(), "out")
	o.src.FirstK = 10
	o.voxel = 0.001 // finer than the pixel spacing: no two points merge
	o.stderr = io.Discard
	o.newStream = func(context.Context, engine.Config, *slog.Logger) (engine.Stream, error) { return fs, nil }
	return o
}

func readRunJSON(t *testing.T, dir string) output.Record {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "run.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rec output.Record
	if err := json.Unmarshal(b, &rec); err != nil {
		t.Fatalf("run.json: %v", err)
	}
	return rec
}

func TestRunWritesOutputs(t *testing.T) {
	fs := &fakeStream{scale: 3}
	o := testRunOptions(t, fs)
	o.saveConf = true
	if err := runRun(context.Background(), o, true); err != nil {
		t.Fatal(err)
	}
	if !fs.closed {
		t.Error("stream not closed")
	}

	// Trajectory: frame k at (k, 0, 0) with the identity rotation in the
	// engine's world (the first camera's optical frame), stamped k/30 s;
	// written in the z-up map frame (REP 103/105): optical x (right) is map
	// −y and the camera's rotation there is the optical-to-body one.
	tr, err := traj.ReadTUMFile(filepath.Join(o.out, "trajectory.tum"))
	if err != nil {
		t.Fatal(err)
	}
	if len(tr) != 10 {
		t.Fatalf("%d poses, want 10", len(tr))
	}
	for k, p := range tr {
		if math.Abs(p.Time-float64(k)/30) > 1e-6 || p.T != [3]float64{0, -float64(k), 0} || p.R != geom.RotationOf(mapframe.OpticalToBody()) {
			t.Errorf("pose %d: %+v", k, p)
		}
	}

	// Map: every confident pixel of every frame once, at depth 2, where the
	// unprojection puts it, in its own colour.
	f, err := os.Open(filepath.Join(o.out, "map.ply"))
	if err != nil {
		t.Fatal(err)
	}
	pts, comments, err := mapio.ReadPLY(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	if want := 10 * fakeH * fakeW / 2; len(pts) != want {
		t.Fatalf("%d map points, want %d (left halves of 10 frames)", len(pts), want)
	}
	seen := map[[3]int]bool{}
	for _, mp := range pts {
		// back from the map frame (x = optical z, y = −x, z = −y)
		p := mp
		p.X, p.Y, p.Z = -mp.Y, -mp.Z, mp.X
		k := int(p.B)
		u := int(math.Round((float64(p.X)-float64(k))*10/2 + 4))
		v := int(math.Round(float64(p.Y)*10/2 + 3))
		if p.Z != 2 || u < 0 || u >= fakeW/2 || v < 0 || v >= fakeH || int(p.R) != 10*u || int(p.G) != 10*v {
			t.Fatalf("point %+v does not match a confident pixel (k=%d u=%d v=%d)", p, k, u, v)
		}
		seen[[3]int{k, u, v}] = true
	}
	if len(seen) != len(pts) {
		t.Errorf("%d distinct pixels among %d points", len(seen), len(pts))
	}
	if c := strings.Join(comments, "\n"); !strings.Contains(c, "conf_threshold 1.5") || !strings.Contains(c, "voxel_size 0.001") {
		t.Errorf("PLY comments do not record the filter:\n%s", c)
	}

	// Depth and confidence PNGs: 16-bit, 2 m = 2000, conf 3 = 300.
	for _, c := range []struct {
		dir  string
		want uint16
	}{{"depth", 2000}, {"conf", 300}} {
		ents, err := os.ReadDir(filepath.Join(o.out, c.dir))
		if err != nil || len(ents) != 10 {
			t.Fatalf("%s: %d files (%v)", c.dir, len(ents), err)
		}
		img := decodePNG(t, filepath.Join(o.out, c.dir, "000007.png"))
		g, ok := img.(*image.Gray16)
		if !ok || g.Bounds().Dx() != fakeW || g.Bounds().Dy() != fakeH || g.Gray16At(1, 1).Y != c.want {
			t.Errorf("%s/000007.png: %T %v", c.dir, img, img.Bounds())
		}
	}

	// Preview: the trajectory is drawn.
	img := decodePNG(t, filepath.Join(o.out, "preview.png"))
	if b := img.Bounds(); b.Dx() != 1024 || b.Dy() != 768 || countColor(img, render.TrajectoryColor()) < 100 {
		t.Errorf("preview %v with %d trajectory pixels", b, countColor(img, render.TrajectoryColor()))
	}

	rec := readRunJSON(t, o.out)
	if rec.Interrupted || rec.Error != "" || rec.Frames.Read != 10 || rec.Frames.Results != 10 ||
		rec.Frames.Scale != 3 || rec.Frames.Keyframes != 7 || rec.Map.Points != len(pts) || rec.Map.ConfThreshold != 1.5 {
		t.Errorf("run.json: %+v", rec)
	}
	if rec.Cache == nil || rec.Cache.PageSize != 42 || rec.Engine["keyframe_interval"] != float64(1) || rec.Input.Options.FirstK != 10 {
		t.Errorf("run.json cache %+v engine %v input %+v", rec.Cache, rec.Engine, rec.Input)
	}
	if rec.Version != version || rec.Timings.TotalS <= 0 {
		t.Errorf("run.json version %q timings %+v", rec.Version, rec.Timings)
	}
}

func decodePNG(t *testing.T, path string) image.Image {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return img
}

func countColor(img image.Image, c interface{ RGBA() (r, g, b, a uint32) }) int {
	n := 0
	r0, g0, b0, a0 := c.RGBA()
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bb, a := img.At(x, y).RGBA()
			if r == r0 && g == g0 && bb == b0 && a == a0 {
				n++
			}
		}
	}
	return n
}

// Ctrl-C during the run: what was computed is written and run.json says so.
func TestRunInterrupted(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	fs := &fakeStream{scale: 3, onPush: func(n int) error {
		if n == 6 {
			cancel() // the signal arrives while frame 6 is in the model
		}
		return nil
	}}
	o := testRunOptions(t, fs)
	err := runRun(ctx, o, true)
	if err == nil || !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "interrupted after 6 frames") {
		t.Fatalf("err = %v", err)
	}
	tr, err := traj.ReadTUMFile(filepath.Join(o.out, "trajectory.tum"))
	if err != nil || len(tr) != 6 {
		t.Fatalf("trajectory after interrupt: %d poses, %v", len(tr), err)
	}
	rec := readRunJSON(t, o.out)
	if !rec.Interrupted || rec.Frames.Results != 6 || rec.Map.Points != 6*fakeW*fakeH/2 {
		t.Errorf("run.json: interrupted %v, results %d, points %d", rec.Interrupted, rec.Frames.Results, rec.Map.Points)
	}
	if _, err := os.Stat(filepath.Join(o.out, "preview.png")); err != nil {
		t.Error(err)
	}
}

func TestRunEngineErrors(t *testing.T) {
	fs := &fakeStream{scale: 3, onPush: func(n int) error {
		if n == 5 {
			return errors.New("out of memory")
		}
		return nil
	}}
	o := testRunOptions(t, fs)
	err := runRun(context.Background(), o, true)
	if err == nil || !strings.Contains(err.Error(), "frame 4: out of memory") || !strings.Contains(err.Error(), "results so far") {
		t.Fatalf("err = %v", err)
	}
	if rec := readRunJSON(t, o.out); rec.Frames.Results != 4 || !strings.Contains(rec.Error, "out of memory") {
		t.Errorf("run.json: results %d error %q", rec.Frames.Results, rec.Error)
	}

	// Malformed results are an error, not a panic.
	o = testRunOptions(t, &fakeStream{scale: 1, badSize: true})
	if err := runRun(context.Background(), o, true); err == nil || !strings.Contains(err.Error(), "5 depth") {
		t.Errorf("bad result: %v", err)
	}

	// An engine that does not start.
	o = testRunOptions(t, nil)
	o.newStream = func(context.Context, engine.Config, *slog.Logger) (engine.Stream, error) {
		return nil, errors.New("no weights")
	}
	if err := runRun(context.Background(), o, true); err == nil || !strings.Contains(err.Error(), "start the engine: no weights") {
		t.Errorf("engine start: %v", err)
	}
}

func TestRunBadOptions(t *testing.T) {
	for name, change := range map[string]func(o *runOptions){
		"map_voxel":    func(o *runOptions) { o.voxel = 0 },
		"cloud_stride": func(o *runOptions) { o.pixelStride = 0 },
		"stride":       func(o *runOptions) { o.src.Stride = 0 },
		"device":       func(o *runOptions) { o.cfg.Device = "tpu" },
	} {
		t.Run(name, func(t *testing.T) {
			o := testRunOptions(t, &fakeStream{scale: 1})
			change(o)
			err := runRun(context.Background(), o, true)
			var ec *exitCodeError
			if !errors.As(err, &ec) || ec.code != exitUsage || !strings.Contains(err.Error(), "'"+name+"'") {
				t.Errorf("err = %v", err)
			}
		})
	}
	o := testRunOptions(t, &fakeStream{scale: 1})
	o.input = filepath.Join(t.TempDir(), "missing")
	if err := runRun(context.Background(), o, true); err == nil || !strings.Contains(err.Error(), "no such file") {
		t.Errorf("missing input: %v", err)
	}
}

// manySource is a source of n tiny frames that says its length.
type manySource struct{ n, i int }

func (s *manySource) Next(context.Context) (engine.Frame, error) {
	if s.i >= s.n {
		return engine.Frame{}, io.EOF
	}
	s.i++
	return engine.Frame{Seq: uint64(s.i - 1), Image: image.NewRGBA(image.Rect(0, 0, 2, 2)), Width: 2, Height: 2}, nil
}
func (s *manySource) Len() int         { return s.n }
func (s *manySource) Describe() string { return "test frames" }
func (s *manySource) Close() error     { return nil }

func TestRunKeyframeIntervalDefault(t *testing.T) {
	for _, c := range []struct {
		n      int
		auto   bool
		wantKF int
	}{{320, true, 1}, {321, true, 2}, {700, true, 3}, {700, false, 1}} {
		var got engine.Config
		o := testRunOptions(t, nil)
		o.openSource = func(context.Context, string, source.Options) (source.Source, error) { return &manySource{n: c.n}, nil }
		o.newStream = func(_ context.Context, cfg engine.Config, _ *slog.Logger) (engine.Stream, error) {
			got = cfg
			return nil, errors.New("stop here")
		}
		_ = runRun(context.Background(), o, c.auto)
		if got.KeyframeInterval != c.wantKF {
			t.Errorf("%d frames (auto %v): keyframe interval %d, want %d", c.n, c.auto, got.KeyframeInterval, c.wantKF)
		}
	}
}

func TestRunFlags(t *testing.T) {
	var got *runOptions
	var gotAuto bool
	cmd := newRunCmdWith(func(_ context.Context, o *runOptions, auto bool) error {
		got, gotAuto = o, auto
		return nil
	})
	cmd.SetArgs([]string{"in.bag", "-o", "res", "--topic", "/cam/image/compressed", "--first-k", "100", "--stride", "2",
		"--flow-threshold", "14", "--max-non-keyframe-gap", "20", "--windowed", "--window-size", "32", "--overlap-size", "8",
		"--scale-frames", "4", "--sliding-window", "16", "--device", "cuda", "--weights", "w.pt",
		"--conf-threshold", "2.5", "--map-voxel", "0.05", "--save-conf", "--depth-scale", "5000",
		"--fps", "5", "--frame-rate", "20", "--rotate-cw90", "--model-size", "full", "--cloud-stride", "3"})
	cmd.SetOut(io.Discard)
	if err := cmd.ExecuteContext(context.Background()); err != nil {
		t.Fatal(err)
	}
	c := got.cfg
	if got.input != "in.bag" || got.out != "res" || got.src.Topic != "/cam/image/compressed" || got.src.FirstK != 100 || got.src.Stride != 2 ||
		c.FlowThreshold != 14 || c.MaxNonKeyframeGap != 20 || !c.Windowed || c.WindowSize != 32 || c.OverlapSize != 8 ||
		c.ScaleFrames != 4 || c.SlidingWindow != 16 || c.Device != "cuda" || c.Weights != "w.pt" ||
		got.confThreshold != 2.5 || got.voxel != 0.05 || !got.saveConf || got.depthScale != 5000 || gotAuto ||
		got.src.SampleFPS != 5 || got.src.FrameRate != 20 || !got.src.RotateCW90 || c.ModelSize != "full" || got.pixelStride != 3 {
		t.Errorf("parsed %+v (auto %v)", got, gotAuto)
	}
	var buf bytes.Buffer
	cmd = newRunCmdWith(func(context.Context, *runOptions, bool) error { return nil })
	cmd.SetArgs([]string{})
	cmd.SetErr(&buf)
	cmd.SetOut(&buf)
	if err := cmd.Execute(); err == nil {
		t.Error("run without INPUT accepted")
	}
}

// The run command reads videos and bags through the same path as folders.
func TestRunVideoAndBagInputs(t *testing.T) {
	if _, err := exec.LookPath("ffmpeg"); err != nil {
		t.Fatal("ffmpeg is needed for this test: apt-get install ffmpeg")
	}
	dir := t.TempDir()
	video := filepath.Join(dir, "clip.mkv")
	cmd := exec.Command("ffmpeg", "-nostdin", "-v", "error", "-f", "lavfi", "-i", "testsrc2=size=64x48:rate=10",
		"-frames:v", "7", "-c:v", "ffv1", video)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make video: %v: %s", err, out)
	}
	bagPath := filepath.Join(dir, "cam.bag")
	w, err := bag.Create(bagPath)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 7 {
		stamp := time.Unix(1700000000, int64(i)*50_000_000)
		img := &sensor_msgs.Image{Header: std_msgs.Header{Stamp: stamp}, Width: 4, Height: 2, Encoding: "mono8", Step: 4, Data: make([]byte, 8)}
		if err := w.Write("/camera/image_raw", stamp, img); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		input string
		t0    float64 // stamp of the first frame
		dt    float64
	}{{video, 0, 0.1}, {bagPath, 1700000000, 0.05}} {
		o := testRunOptions(t, &fakeStream{scale: 2})
		o.input = c.input
		o.src.FirstK = 0
		o.src.Stride = 2 // input frames 0, 2, 4, 6
		if err := runRun(context.Background(), o, true); err != nil {
			t.Fatalf("%s: %v", c.input, err)
		}
		tr, err := traj.ReadTUMFile(filepath.Join(o.out, "trajectory.tum"))
		if err != nil {
			t.Fatal(err)
		}
		if len(tr) != 4 {
			t.Fatalf("%s: %d poses, want 4", c.input, len(tr))
		}
		for i, p := range tr {
			// the engine's x (optical right) is the map's −y
			if want := c.t0 + c.dt*float64(2*i); math.Abs(p.Time-want) > 1e-6 || -p.T[1] != float64(2*i) {
				t.Errorf("%s: pose %d at %.6f s, x %g; want %.6f s, x %d", c.input, i, p.Time, -p.T[1], want, 2*i)
			}
		}
		if rec := readRunJSON(t, o.out); !strings.Contains(rec.Input.Description, filepath.Base(c.input)) {
			t.Errorf("run.json input %+v", rec.Input)
		}
	}
}

// The map's unprojection (run's mapio.Map) reproduces the reference's
// world_points_from_depth (depth unprojected with the predicted pose and
// intrinsics) on the golden stream: every pixel, every frame.
func TestUnprojectMatchesReference(t *testing.T) {
	dir, err := shared.Path("golden", "stream_kf1")
	if err != nil {
		t.Fatal(err)
	}
	st, err := golden.Open(dir, golden.OutputsFile)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	get := func(name string) []float32 {
		v, err := st.Float32(name)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	depth, ext, intr, want := get("depth"), get("extrinsic"), get("intrinsic"), get("world_points_from_depth")
	const n, h, w = 16, 42, 70
	if len(depth) != n*h*w || len(want) != 3*n*h*w {
		t.Fatalf("golden shapes: depth %d, points %d", len(depth), len(want))
	}
	m, err := mapio.NewMap(mapio.MapConfig{VoxelSize: 1, Filter: geom.PointFilter{Stride: 1}})
	if err != nil {
		t.Fatal(err)
	}
	var worst float64
	for k := range n {
		e := ext[12*k:]
		// CamToWorld is the inverse of the world→camera extrinsic [R|t]: [Rᵀ | −Rᵀt].
		var c2w [4][4]float64
		for r := range 3 {
			for c := range 3 {
				c2w[r][c] = float64(e[4*c+r])
			}
			for c := range 3 {
				c2w[r][3] -= float64(e[4*c+r]) * float64(e[4*c+3])
			}
		}
		c2w[3][3] = 1
		K := intr[9*k:]
		res := engine.Result{
			Seq: uint64(k), CamToWorld: c2w, Width: w, Height: h,
			Intrinsics: [4]float64{float64(K[0]), float64(K[4]), float64(K[2]), float64(K[5])},
			Depth:      depth[k*h*w : (k+1)*h*w],
		}
		pts, err := m.AddPoints(res.DepthFrame())
		if err != nil {
			t.Fatal(err)
		}
		if len(pts) != h*w {
			t.Fatalf("frame %d: %d points for %d pixels", k, len(pts), h*w)
		}
		for i, p := range pts {
			ref := want[3*(k*h*w+i):]
			got := [3]float32{p.X, p.Y, p.Z}
			for a := range 3 {
				d := math.Abs(float64(got[a]-ref[a])) / (1 + math.Abs(float64(ref[a])))
				worst = math.Max(worst, d)
			}
		}
	}
	// float32 reference against float64 arithmetic here: a few ulps.
	t.Logf("largest difference from the reference: %.2g (relative to 1+|x|)", worst)
	if worst > 1e-5 {
		t.Errorf("unprojection differs from the reference by %g", worst)
	}
}

// End to end on real frames: `run` on the 16 courthouse images with the
// golden tiny model writes the reference's poses (images_kf1: the same frames
// through the reference preprocessing at 42×70) and its depth.
func TestRunGoldenImages(t *testing.T) {
	dir, err := shared.Path("golden", "images_kf1")
	if err != nil {
		t.Fatal(err)
	}
	man, err := golden.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	st, err := golden.Open(dir, golden.OutputsFile)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	poseEnc, err := st.Float32("pose_enc")
	if err != nil {
		t.Fatal(err)
	}
	depth, err := st.Float32("depth")
	if err != nil {
		t.Fatal(err)
	}
	o := testRunOptions(t, nil)
	o.input, err = shared.Path("data", "courthouse")
	if err != nil {
		t.Fatal(err)
	}
	o.src.FirstK = 16
	o.newStream = newEngineStream
	o.cfg.Weights, err = shared.Path("golden", "weights.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	// The golden settings (70 px wide, 3 scale frames, a sliding window of 4,
	// every frame a keyframe).
	o.cfg.ImageWidth, o.cfg.ScaleFrames = man.Config.ImgW, man.Settings.NumScaleFrames
	o.cfg.SlidingWindow, o.cfg.MaxFrames = man.Settings.KVSlidingWindow, man.Config.MaxFrameNum
	if err := runRun(context.Background(), o, true); err != nil {
		t.Fatal(err)
	}
	tr, err := traj.ReadTUMFile(filepath.Join(o.out, "trajectory.tum"))
	if err != nil {
		t.Fatal(err)
	}
	if len(tr) != 16 {
		t.Fatalf("%d poses, want 16", len(tr))
	}
	// The trajectory is in the z-up map frame (REP 103/105): the
	// reference's camera poses seen from the first camera's body frame.
	refPose := func(k int) geom.Mat4 {
		pe := poseEnc[9*k:]
		m, err := geom.Compose([3]float64{float64(pe[0]), float64(pe[1]), float64(pe[2])}, geom.Quat{float64(pe[3]), float64(pe[4]), float64(pe[5]), float64(pe[6])})
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	frame := mapframe.New()
	frame.FixAt(mapframe.OpticalToBody(), refPose(0))
	var worstT, worstR float64
	for k, p := range tr {
		wm := frame.CamPose(refPose(k))
		wantT, want := geom.TranslationOf(wm), geom.RotationOf(wm)
		for a := range 3 {
			worstT = math.Max(worstT, math.Abs(p.T[a]-wantT[a])/(1+math.Abs(wantT[a])))
		}
		for r := range 3 {
			for c := range 3 {
				worstR = math.Max(worstR, math.Abs(p.R[r][c]-want[r][c]))
			}
		}
	}
	// float32 engine against the float32 reference (README: ≈1e-5 relative).
	t.Logf("largest difference from the reference: position %.2g, rotation %.2g", worstT, worstR)
	if worstT > 1e-4 || worstR > 1e-4 {
		t.Errorf("poses differ from the reference: position %g, rotation %g", worstT, worstR)
	}
	// Depth PNGs hold round(depth·1000).
	img := decodePNG(t, filepath.Join(o.out, "depth", "000007.png"))
	g, ok := img.(*image.Gray16)
	if !ok || g.Bounds().Dx() != 70 || g.Bounds().Dy() != 42 {
		t.Fatalf("depth PNG %T %v", img, img.Bounds())
	}
	for i := range 42 * 70 {
		want := float64(depth[7*42*70+i]) * 1000
		if got := float64(g.Gray16At(i%70, i/70).Y); math.Abs(got-want) > 0.5+1e-4*want {
			t.Fatalf("depth pixel %d = %g mm, want %.2f", i, got, want)
		}
	}
	if rec := readRunJSON(t, o.out); rec.Frames.Scale != 3 || rec.Frames.Keyframes != 13 || rec.Cache == nil || rec.Cache.ScalePages != 3 {
		t.Errorf("run.json frames %+v cache %+v", rec.Frames, rec.Cache)
	}
}
