package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lingbotmap/lingbotmap/engine"
	"github.com/lingbotmap/lingbotmap/engine/geom"
	"github.com/lingbotmap/lingbotmap/engine/golden"
	"github.com/lingbotmap/lingbotmap/engine/golden/synthrobot"
	"github.com/lingbotmap/lingbotmap/engine/mapio"
	"github.com/lingbotmap/lingbotmap/engine/scale"
	"github.com/lingbotmap/lingbotmap/engine/traj"
	"github.com/lingbotmap/lingbotmap/internal/atomicfile"
	"github.com/lingbotmap/lingbotmap/internal/shared"
)

// The synthetic robot's scale: metres per model unit. The golden
// trajectory's steps (0.1 to 2 model units) then stay under max_jump and
// its depths (0.5 to 7 units) inside the sensor's range.
const synthScale = 0.45

// goldenRobot is a synthetic robot around the golden case's 16 courthouse
// frames: the engine's own trajectory and depth for them (the reference's,
// which run reproduces to 1e-4), a camera looking forward 0.3 m above the
// base, and the odometry frame turned 30° about z and moved.
func goldenRobot(t *testing.T) (*synthrobot.Robot, *golden.Manifest) {
	t.Helper()
	dir, err := shared.Path("golden", "images_kf1")
	if err != nil {
		t.Fatal(err)
	}
	frames, err := shared.Path("data", "courthouse")
	if err != nil {
		t.Fatal(err)
	}
	r, man, err := synthrobot.FromGolden(dir, frames, synthScale)
	if err != nil {
		t.Fatal(err)
	}
	return r, man
}

// runSynth runs `run` with the golden model and settings over input.
func runSynth(t *testing.T, man *golden.Manifest, input string, set func(o *runOptions)) *runOptions {
	t.Helper()
	o := testRunOptions(t, nil)
	o.input = input
	o.src.FirstK = 0
	o.newStream = newEngineStream
	var err error
	if o.cfg.Weights, err = shared.Path("golden", "weights.safetensors"); err != nil {
		t.Fatal(err)
	}
	o.cfg.ImageWidth, o.cfg.ScaleFrames = man.Config.ImgW, man.Settings.NumScaleFrames
	o.cfg.SlidingWindow, o.cfg.MaxFrames = man.Settings.KVSlidingWindow, man.Config.MaxFrameNum
	o.saveDepth = false
	o.odomFrame = synthrobot.OdomFrame
	if filepath.Ext(input) != "" {
		o.src.Topic = synthrobot.ImageTopic // the depth topic is an image topic too
	}
	set(o)
	if err := runRun(context.Background(), o, true); err != nil {
		t.Fatal(err)
	}
	return o
}

// TestRunMetricScale replays the synthetic robot through run from each
// source and checks the scale it recovers (README: the table of errors).
func TestRunMetricScale(t *testing.T) {
	robot, man := goldenRobot(t)
	dir := t.TempDir()
	bagOf := func(name string, r *synthrobot.Robot) string {
		p := filepath.Join(dir, name)
		if err := r.WriteBag(p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	clean := bagOf("robot.bag", robot)
	cleanMCAP := bagOf("robot.mcap", robot)
	noisy := *robot
	noisy.OdomNoise = 0.02
	noisyBag := bagOf("noisy.bag", &noisy)
	holes := *robot
	holes.DepthHoles, holes.DepthNoise, holes.DepthOffset = 0.2, 0.02, 10*time.Millisecond
	holesMCAP := bagOf("depth.mcap", &holes)
	mm := holes
	mm.DepthEncoding = "16UC1"
	mmBag := bagOf("depth16.bag", &mm)
	depthDir := filepath.Join(dir, "depth")
	if err := holes.WriteDepthDir(depthDir); err != nil {
		t.Fatal(err)
	}
	frames, err := shared.Path("data", "courthouse")
	if err != nil {
		t.Fatal(err)
	}

	// the metric ground truth: the camera in the odometry frame without
	// noise, for eval --align se3
	gt := filepath.Join(dir, "gt.tum")
	var rows []mapio.StampedPose
	for k, m := range robot.OdomCamera() {
		tr, q, err := geom.Decompose(m)
		if err != nil {
			t.Fatal(err)
		}
		rows = append(rows, mapio.StampedPose{Time: mapio.Seconds(robot.Stamp(k)), T: tr, Q: q})
	}
	if err := atomicfile.WriteFile(gt, func(f io.Writer) error { return mapio.WriteTUM(f, rows) }); err != nil {
		t.Fatal(err)
	}
	ate := func(t *testing.T, out string) float64 {
		t.Helper()
		js := filepath.Join(t.TempDir(), "eval.json")
		var shown bytes.Buffer
		if err := runEval(&evalOptions{est: filepath.Join(out, "trajectory.tum"), ref: gt, opt: traj.DefaultOptions(), align: "se3", jsonOut: js}, &shown); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(js)
		if err != nil {
			t.Fatal(err)
		}
		var rep traj.Report
		if err := json.Unmarshal(b, &rep); err != nil || rep.Pairs != 16 {
			t.Fatalf("eval --json: %v, %d pairs", err, rep.Pairs)
		}
		return rep.ATE.RMSE
	}
	// unscaled, the trajectory is in model units: se3 cannot match it
	unscaled := ate(t, runSynth(t, man, clean, func(o *runOptions) {}).out)

	cases := []struct {
		name, input string
		set         func(s *scale.Settings, o *runOptions)
		tol         float64
		// maxATE is the largest ATE (m) after eval --align se3 against
		// the metric truth; 0: not compared (stamps of an image folder)
		maxATE float64
	}{
		{"odometry /tf, ROS 1 bag", clean, func(s *scale.Settings, o *runOptions) { s.Source = scale.SourceOdometry }, 0.01, 1e-3},
		{"odometry /tf, MCAP", cleanMCAP, func(s *scale.Settings, o *runOptions) { s.Source = scale.SourceOdometry }, 0.01, 1e-3},
		{"odometry /odom topic, MCAP", cleanMCAP, func(s *scale.Settings, o *runOptions) {
			s.Source, s.OdomTopic = scale.SourceOdometry, synthrobot.OdomTopic
		}, 0.01, 1e-3},
		{"odometry /tf, 2 % noise, ROS 1 bag", noisyBag, func(s *scale.Settings, o *runOptions) { s.Source = scale.SourceOdometry }, 0.03, 0.03},
		{"depth topic (20 % holes, 2 % noise), MCAP", holesMCAP, func(s *scale.Settings, o *runOptions) {
			s.Source, s.DepthTopic = scale.SourceDepth, synthrobot.DepthTopic
		}, 0.01, 1e-3},
		{"depth topic 16UC1 mm (20 % holes, 2 % noise), ROS 1 bag", mmBag, func(s *scale.Settings, o *runOptions) {
			s.Source, s.DepthTopic = scale.SourceDepth, synthrobot.DepthTopic
		}, 0.01, 1e-3},
		{"--depth-dir (20 % holes, 2 % noise), image folder", frames, func(s *scale.Settings, o *runOptions) {
			s.Source, o.depthDir, o.src.FirstK = scale.SourceDepth, depthDir, 16
		}, 0.01, 0},
	}
	var table []string
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o := runSynth(t, man, c.input, func(o *runOptions) { c.set(&o.scale, o) })
			rec := readRunJSON(t, o.out)
			st := rec.Scale
			if st == nil {
				t.Fatal("run.json has no scale section")
			}
			e := st.Scale/synthScale - 1
			a := "–"
			if c.maxATE > 0 {
				v := ate(t, o.out)
				a = fmt.Sprintf("%.3g m", v)
				if v > c.maxATE {
					t.Errorf("eval --align se3 against the metric truth: ATE %g m, want ≤ %g m", v, c.maxATE)
				}
			}
			table = append(table, fmt.Sprintf("| %s | %.8g | %+.5f %% | %s | %s |", c.name, st.Scale, 100*e, st.State, a))
			if st.State != scale.StateKnown || math.Abs(e) > c.tol {
				t.Errorf("scale %+v; want %g within %g %%", st, synthScale, 100*c.tol)
			}
			if st.Skipped != 0 {
				t.Errorf("%d keyframes skipped: %s", st.Skipped, st.Issue)
			}
		})
	}
	t.Logf("scale %g m per model unit recovered by run (ATE: eval --align se3 against the metric truth; unscaled run: %.3g m):\n| source | scale | error | state | ATE |\n|---|---|---|---|---|\n%s",
		synthScale, unscaled, strings.Join(table, "\n"))
	if unscaled < 0.05 {
		t.Errorf("the unscaled run's ATE against the metric truth is %g m: the test cannot tell metres from model units", unscaled)
	}
}

// TestRunMetricScaleWithheld: a robot turning in place gives no scale, and
// odometry that stops before the images, or a depth image in another
// encoding, leave frames out with the reason; nothing fails.
func TestRunMetricScaleWithheld(t *testing.T) {
	robot, man := goldenRobot(t)
	dir := t.TempDir()
	turn := *robot
	turn.TurnInPlace = true
	turnBag := filepath.Join(dir, "turn.bag")
	if err := turn.WriteBag(turnBag); err != nil {
		t.Fatal(err)
	}
	o := runSynth(t, man, turnBag, func(o *runOptions) { o.scale.Source = scale.SourceOdometry })
	rec := readRunJSON(t, o.out)
	if st := rec.Scale; st == nil || st.State != scale.StateEstimating || st.Scale != 0 || !strings.Contains(st.Reason, "not enough motion") {
		t.Errorf("turning in place: %+v", st)
	}
	if rec.Frames.Results != 16 {
		t.Errorf("%d results, want 16", rec.Frames.Results)
	}

	// stamps that miss: the depth 30 ms after each image (frames 100 ms
	// apart), beyond a tolerance of 10 ms
	late := *robot
	late.DepthOffset = 30 * time.Millisecond
	lateBag := filepath.Join(dir, "late.mcap")
	if err := late.WriteBag(lateBag); err != nil {
		t.Fatal(err)
	}
	o = runSynth(t, man, lateBag, func(o *runOptions) {
		o.scale.Source, o.scale.DepthTopic, o.scale.StampTolerance = scale.SourceDepth, synthrobot.DepthTopic, 0.01
	})
	rec = readRunJSON(t, o.out)
	if st := rec.Scale; st == nil || st.State != scale.StateEstimating || st.Skipped != 16 || !strings.Contains(st.Issue, "no depth image") {
		t.Errorf("depth beyond the stamp tolerance: %+v", st)
	}
	if rec.Frames.Results != 16 {
		t.Errorf("%d results, want 16", rec.Frames.Results)
	}

	// a depth topic in another encoding: refused frame by frame, saying so
	rgb := *robot
	rgb.DepthEncoding = "rgb8"
	rgbBag := filepath.Join(dir, "rgb.mcap")
	if err := rgb.WriteBag(rgbBag); err != nil {
		t.Fatal(err)
	}
	o = runSynth(t, man, rgbBag, func(o *runOptions) {
		o.scale.Source, o.scale.DepthTopic = scale.SourceDepth, synthrobot.DepthTopic
	})
	rec = readRunJSON(t, o.out)
	if st := rec.Scale; st == nil || st.State != scale.StateEstimating || st.Skipped != 16 || !strings.Contains(st.Issue, `depth encoding "rgb8" is not supported`) {
		t.Errorf("a depth topic in rgb8: %+v", st)
	}
	if rec.Frames.Results != 16 {
		t.Errorf("%d results, want 16", rec.Frames.Results)
	}

	// the odometry frame named wrong: every keyframe skipped, saying so
	o = runSynth(t, man, filepath.Join(dir, "turn.bag"), func(o *runOptions) {
		o.scale.Source, o.odomFrame = scale.SourceOdometry, "wheel_odom"
		o.out = filepath.Join(dir, "wrongframe")
	})
	rec = readRunJSON(t, o.out)
	if st := rec.Scale; st == nil || st.Skipped != 16 || !strings.Contains(st.Issue, "wheel_odom") {
		t.Errorf("an odometry frame the bag lacks: %+v", st)
	}
	if !slices.Contains([]int{16}, rec.Frames.Results) {
		t.Errorf("%d results, want 16", rec.Frames.Results)
	}
}

// floorStream answers like fakeStream, each camera at the same height
// above a flat floor: the lower half of every 128×96 depth map is the
// floor, floorHeight model units below the camera (the world's y is down),
// the upper half a wall far ahead.
type floorStream struct{ *fakeStream }

const floorHeight = 1.25

func (s floorStream) floor(rs []engine.Result) []engine.Result {
	const w, h, f = 128, 96, 80.0
	for i := range rs {
		r := &rs[i]
		r.Width, r.Height, r.Intrinsics = w, h, [4]float64{f, f, w / 2, h / 2}
		r.Depth, r.Conf, r.RGB = make([]float32, w*h), make([]float32, w*h), make([]uint8, 3*w*h)
		for v := range h {
			for u := range w {
				d := 30.0
				if dy := (float64(v) - h/2) / f; dy > 0 {
					d = math.Min(d, floorHeight/dy)
				}
				r.Depth[v*w+u], r.Conf[v*w+u] = float32(d), 3
			}
		}
	}
	return rs
}

func (s floorStream) Push(ctx context.Context, f engine.Frame) ([]engine.Result, error) {
	rs, err := s.fakeStream.Push(ctx, f)
	return s.floor(rs), err
}

func (s floorStream) Flush(ctx context.Context) ([]engine.Result, error) {
	rs, err := s.fakeStream.Flush(ctx)
	return s.floor(rs), err
}

// The camera-height source through run: the floor below a camera 0.8 m up
// gives 0.8 / floorHeight metres per model unit.
func TestRunMetricScaleCameraHeight(t *testing.T) {
	fs := floorStream{&fakeStream{scale: 3}}
	o := testRunOptions(t, nil)
	o.newStream = func(context.Context, engine.Config, *slog.Logger) (engine.Stream, error) { return fs, nil }
	o.scale.Source, o.scale.CameraHeight = scale.SourceCameraHeight, 0.8
	if err := runRun(context.Background(), o, true); err != nil {
		t.Fatal(err)
	}
	st := readRunJSON(t, o.out).Scale
	want := 0.8 / floorHeight
	if st == nil || st.State != scale.StateKnown || math.Abs(st.Scale/want-1) > 0.01 {
		t.Fatalf("camera height: %+v, want scale %g", st, want)
	}
	t.Logf("camera height over a synthetic floor: scale %.8g, error %+.5f %%", st.Scale, 100*(st.Scale/want-1))
}

// depthPNG reads a depth PNG's millimetres.
func depthPNG(t *testing.T, path string) []float64 {
	t.Helper()
	img := decodePNG(t, path)
	g, ok := img.(*image.Gray16)
	if !ok {
		t.Fatalf("%s: %T, not 16-bit grey", path, img)
	}
	out := make([]float64, len(g.Pix)/2)
	for i := range out {
		out[i] = float64(uint16(g.Pix[2*i])<<8 | uint16(g.Pix[2*i+1]))
	}
	return out
}

// TestRunMetricDepth: the synthetic robot's scale (odometry) becomes known
// part way; at the end every depth/ PNG is s × the unscaled run's depth in
// millimetres (within rounding), depth_color's ranges too, and run.json
// says metres. The frames from before the scale are rewritten from their
// model-unit PNGs (so they equal round(s × unscaled) but for float
// rounding), those after it written from the model's depth (so a fair part
// of their pixels differ from that by one): both happened. A run without a
// scale source keeps model units and says so.
func TestRunMetricDepth(t *testing.T) {
	robot, man := goldenRobot(t)
	bag := filepath.Join(t.TempDir(), "robot.bag")
	if err := robot.WriteBag(bag); err != nil {
		t.Fatal(err)
	}
	plain := runSynth(t, man, bag, func(o *runOptions) { o.saveDepth = true })
	metric := runSynth(t, man, bag, func(o *runOptions) { o.saveDepth = true; o.scale.Source = scale.SourceOdometry })

	rec := readRunJSON(t, plain.out)
	if rec.Depth.Metric || len(rec.Depth.MetricAt) != 0 || !strings.Contains(rec.Depth.Unit, "model depth unit") {
		t.Errorf("run.json's depth without a scale: %+v", rec.Depth)
	}
	rec = readRunJSON(t, metric.out)
	s := rec.Scale.Scale
	if rec.Scale.State != scale.StateKnown || !rec.Depth.Metric || !strings.HasPrefix(rec.Depth.Unit, "1/1000 m") {
		t.Fatalf("run.json with odometry: scale %+v, depth %+v", rec.Scale, rec.Depth)
	}
	rewritten, direct := 0, 0
	for i := range 16 {
		name := fmt.Sprintf("%06d.png", i)
		u, m := depthPNG(t, filepath.Join(plain.out, "depth", name)), depthPNG(t, filepath.Join(metric.out, "depth", name))
		if len(u) != len(m) {
			t.Fatalf("%s: %d and %d pixels", name, len(u), len(m))
		}
		off := 0
		for p := range u {
			if math.Abs(m[p]-s*u[p]) > 0.5+0.5*s+1e-3 {
				t.Fatalf("depth/%s pixel %d: %g mm, want %g × %g", name, p, m[p], s, u[p])
			}
			if m[p] != math.Round(s*u[p]) {
				off++
			}
		}
		if off*1000 <= len(u) {
			rewritten++
		} else if off*20 >= len(u) {
			direct++
		}
	}
	if rewritten == 0 || direct == 0 || rewritten+direct != 16 {
		t.Errorf("%d depth PNGs rewritten at the end, %d written in metres: want both, 16 in all", rewritten, direct)
	}
	t.Logf("scale %g: %d depth PNGs rewritten in metres at the end, %d written in metres", s, rewritten, direct)
	ranges := func(out string) []string {
		b, err := os.ReadFile(filepath.Join(out, "depth_color", "ranges.tsv"))
		if err != nil {
			t.Fatal(err)
		}
		return strings.Split(strings.TrimSpace(string(b)), "\n")
	}
	ru, rm := ranges(plain.out), ranges(metric.out)
	if len(ru) != 17 || len(rm) != 17 || !strings.Contains(ru[0], "(model depth units;") || !strings.Contains(rm[0], "(metres;") {
		t.Fatalf("ranges.tsv:\n%s\n%s", strings.Join(ru, "\n"), strings.Join(rm, "\n"))
	}
	for i := 1; i < 17; i++ {
		var fu, fm [3]float64
		fmt.Sscan(ru[i], &fu[0], &fu[1], &fu[2])
		fmt.Sscan(rm[i], &fm[0], &fm[1], &fm[2])
		for k := 1; k < 3; k++ {
			if math.Abs(fm[k]-s*fu[k]) > 2e-3 {
				t.Errorf("ranges.tsv row %d: %g, want %g × %g", i, fm[k], s, fu[k])
			}
		}
	}
}
