package model

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/lingbotmap/lingbotmap/engine/cpu"
	"github.com/lingbotmap/lingbotmap/engine/golden"
	"github.com/lingbotmap/lingbotmap/engine/golden/goldentest"
	"github.com/lingbotmap/lingbotmap/engine/kvcache"
	"github.com/lingbotmap/lingbotmap/engine/weights"
	"github.com/lingbotmap/lingbotmap/internal/shared/sharedtest"
)

// The golden tests run the tiny reference model (../shared/golden) through the
// CPU backend and compare with what the official PyTorch code produced.
//
// Tolerance: the reference ran in float32, so only the order of summation
// differs. An element passes when |got − want| ≤ 1e-4 · max(|want|, rms(want)):
// relative for ordinary values, and relative to the tensor's typical size for
// values near zero, whose relative error is meaningless.
const goldenTol = 1e-4

type goldenCase struct {
	m       *golden.Manifest
	images  [][]float32
	h, w    int
	outputs *weights.SafeTensors
	inter   *weights.SafeTensors // nil when the case has none
}

func readTensor(t testing.TB, st *weights.SafeTensors, name string) ([]float32, []int) {
	t.Helper()
	v, shape, err := golden.Tensor(st, name)
	if err != nil {
		t.Fatal(err)
	}
	return v, shape
}

func loadCase(t testing.TB, name string) *goldenCase {
	t.Helper()
	dir := sharedtest.Path(t, "golden", name)
	m, err := golden.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	gc := &goldenCase{m: m}
	in := goldentest.Open(t, name, golden.InputsFile)
	imgs, shape := readTensor(t, in, "images")
	n, per := shape[0], shape[1]*shape[2]*shape[3]
	gc.h, gc.w = shape[2], shape[3]
	for i := 0; i < n; i++ {
		gc.images = append(gc.images, imgs[i*per:(i+1)*per])
	}
	gc.outputs = goldentest.Open(t, name, golden.OutputsFile)
	if _, err := os.Stat(filepath.Join(dir, "intermediates.safetensors")); err == nil {
		gc.inter = goldentest.Open(t, name, "intermediates.safetensors")
	}
	return gc
}

// streamOutputs runs the case's first six frames on m by Forward, as a
// stream does: frames 0-2 together (phase 1), then 3, 4 and 5 one at a time.
func streamOutputs(t *testing.T, m *Model, gc *goldenCase) []*Output {
	t.Helper()
	var outs []*Output
	for _, imgs := range [][][]float32{gc.images[:3], gc.images[3:4], gc.images[4:5], gc.images[5:6]} {
		out, err := m.Forward(context.Background(), imgs, gc.h, gc.w, Step{})
		if err != nil {
			t.Fatal(err)
		}
		outs = append(outs, out)
	}
	return outs
}

func loadTiny(t testing.TB, m *golden.Manifest, keep bool) *Model {
	t.Helper()
	st := goldentest.Open(t, "weights.safetensors")
	mdl, err := Load(cpu.New(cpu.Config{}), st, Options{
		ScaleFrames:       m.Config.ScaleFrames,
		SlidingWindow:     m.Config.SlidingWindow,
		MaxFrames:         m.Config.MaxFrameNum,
		CameraIterations:  m.Config.CameraIterations,
		SelectedLayers:    m.Config.SelectedIdx,
		KeepIntermediates: keep,
	})
	if err != nil {
		t.Fatalf("loading the tiny golden model: %v", err)
	}
	t.Cleanup(mdl.Close)
	return mdl
}

// compare checks got against want element by element and logs the errors.
func compare(t *testing.T, name string, got, want []float32) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s: %d values, want %d", name, len(got), len(want))
		return
	}
	var ss float64
	for _, v := range want {
		ss += float64(v) * float64(v)
	}
	rms := math.Sqrt(ss / float64(len(want)))
	var maxAbs, maxRel float64
	worst := -1
	for i := range want {
		d := math.Abs(float64(got[i]) - float64(want[i]))
		if math.IsNaN(d) {
			t.Errorf("%s[%d]: got %v, want %v", name, i, got[i], want[i])
			return
		}
		r := d / math.Max(math.Abs(float64(want[i])), rms)
		if d > maxAbs {
			maxAbs = d
		}
		if r > maxRel {
			maxRel, worst = r, i
		}
	}
	t.Logf("%-22s n=%-7d max abs %.3g  max rel %.3g", name, len(want), maxAbs, maxRel)
	if maxRel > goldenTol {
		t.Errorf("%s: max relative error %.3g > %g at %d (got %v, want %v)", name, maxRel, goldenTol, worst, got[worst], want[worst])
	}
}

type frameKind int

const (
	kindKey frameKind = iota
	kindSkip
	kindDeferKeep
	kindDeferDrop
)

// streamResult is everything a streaming run produced, frame by frame.
type streamResult struct {
	pose      []float32 // [N, 9]
	poseIters []float32 // [iters, N, 9]
	dino      []float32 // [N, NP, E]
	agg       [][]float32
	stats     []kvcache.Stats
	camFrames []int
	// dense maps, frames concatenated
	depth, depthConf, points, pointsConf []float32
}

// runStream is a simple streaming driver: phase 1 on the scale frames, then one
// frame at a time of the given kinds.
func runStream(t *testing.T, mdl *Model, gc *goldenCase, kinds []frameKind) streamResult {
	t.Helper()
	ctx := context.Background()
	scale := gc.m.Settings.NumScaleFrames
	n := len(gc.images)
	var res streamResult
	iters := make([][]float32, mdl.Options().CameraIterations)
	record := func(out *Output) {
		for _, p := range out.PoseEnc {
			res.pose = append(res.pose, p[:]...)
		}
		for i, it := range out.PoseIters {
			for _, p := range it {
				iters[i] = append(iters[i], p[:]...)
			}
		}
		for _, d := range out.DinoTokens {
			res.dino = append(res.dino, d...)
		}
		if res.agg == nil {
			res.agg = make([][]float32, len(out.AggLayers))
		}
		for l, a := range out.AggLayers {
			res.agg[l] = append(res.agg[l], a...)
		}
		for f := range out.PoseEnc {
			if len(out.Depth) > f {
				res.depth = append(res.depth, out.Depth[f]...)
				res.depthConf = append(res.depthConf, out.DepthConf[f]...)
			}
			if len(out.Points) > f {
				res.points = append(res.points, out.Points[f]...)
				res.pointsConf = append(res.pointsConf, out.PointsConf[f]...)
			}
		}
	}
	start := time.Now()
	out, err := mdl.Forward(ctx, gc.images[:scale], gc.h, gc.w, Step{})
	if err != nil {
		t.Fatalf("phase 1: %v", err)
	}
	phase1 := time.Since(start)
	record(out)
	res.stats = append(res.stats, mdl.Stats())
	res.camFrames = append(res.camFrames, mdl.CameraFrames())
	start = time.Now()
	for i := scale; i < n; i++ {
		k := kinds[i-scale]
		step := Step{SkipAppend: k == kindSkip, DeferEviction: k == kindDeferKeep || k == kindDeferDrop}
		out, err := mdl.Forward(ctx, gc.images[i:i+1], gc.h, gc.w, step)
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		record(out)
		res.stats = append(res.stats, mdl.Stats())
		res.camFrames = append(res.camFrames, mdl.CameraFrames())
		switch k {
		case kindDeferKeep:
			mdl.Commit()
		case kindDeferDrop:
			if err := mdl.Rollback(); err != nil {
				t.Fatalf("frame %d: %v", i, err)
			}
		}
	}
	t.Logf("tiny model on %d×%d: phase 1 (%d frames) %v, then %v per frame", gc.w, gc.h, scale, phase1.Round(time.Millisecond), (time.Since(start) / time.Duration(n-scale)).Round(time.Microsecond))
	for _, it := range iters {
		res.poseIters = append(res.poseIters, it...)
	}
	return res
}

// checkDense compares the DPT heads' activated outputs.
func checkDense(t *testing.T, gc *goldenCase, res streamResult) {
	t.Helper()
	for _, c := range []struct {
		name string
		got  []float32
	}{{"depth", res.depth}, {"depth_conf", res.depthConf}, {"world_points", res.points}, {"world_points_conf", res.pointsConf}} {
		want, _ := readTensor(t, gc.outputs, c.name)
		compare(t, c.name, c.got, want)
	}
}

func checkStats(t *testing.T, gc *goldenCase, res streamResult) {
	t.Helper()
	if len(res.stats) != len(gc.m.PerCall) {
		t.Fatalf("%d calls, the manifest lists %d", len(res.stats), len(gc.m.PerCall))
	}
	for i, pc := range gc.m.PerCall {
		w := pc.FIAfter
		want := kvcache.Stats{FrameCount: w.FrameCount, ScalePages: w.ScalePages, LivePages: w.LivePages, FreePages: w.FreePages,
			SpecialTokens: w.SpecialTokens, VisiblePages: w.VisiblePages, LastPageLen: w.LastPageLen, PageSize: w.PageSize}
		if res.stats[i] != want {
			t.Errorf("call %d: KV stats %+v, want %+v", i, res.stats[i], want)
		}
		if res.camFrames[i] != pc.CameraCacheFrames {
			t.Errorf("call %d: camera cache holds %d frames, want %d", i, res.camFrames[i], pc.CameraCacheFrames)
		}
	}
}

func kindsFromFrameTypes(t *testing.T, m *golden.Manifest, deferred bool) []frameKind {
	t.Helper()
	var kinds []frameKind
	for i, ft := range m.FrameType[m.Settings.NumScaleFrames:] {
		switch {
		case ft == 1 && deferred:
			kinds = append(kinds, kindDeferKeep)
		case ft == 1:
			kinds = append(kinds, kindKey)
		case ft == 2 && deferred:
			kinds = append(kinds, kindDeferDrop)
		case ft == 2:
			kinds = append(kinds, kindSkip)
		default:
			t.Fatalf("frame %d after the scale frames has type %d", i, ft)
		}
	}
	return kinds
}

func TestGoldenPosEmbedInterp(t *testing.T) {
	gc := loadCase(t, "stream_kf1")
	mdl := loadTiny(t, gc.m, false)
	ps := mdl.Sizes().PatchSize
	mdl.dino.prepare(mdl.be, gc.h/ps, gc.w/ps)
	want, _ := readTensor(t, gc.inter, "dino_pos_embed_interp")
	compare(t, "dino_pos_embed_interp", mdl.dino.posHost, want)
}

func TestGoldenStreamKF1(t *testing.T) {
	gc := loadCase(t, "stream_kf1")
	mdl := loadTiny(t, gc.m, true)
	kinds := kindsFromFrameTypes(t, gc.m, false)
	res := runStream(t, mdl, gc, kinds)

	want, _ := readTensor(t, gc.inter, "dino_patch_tokens")
	compare(t, "dino_patch_tokens", res.dino, want)
	for l, layer := range gc.m.Config.SelectedIdx {
		name := fmt.Sprintf("agg_layer%02d", layer)
		want, _ := readTensor(t, gc.inter, name)
		compare(t, name, res.agg[l], want)
	}
	want, _ = readTensor(t, gc.inter, "pose_enc_iters")
	compare(t, "pose_enc_iters", res.poseIters, want)
	want, _ = readTensor(t, gc.outputs, "pose_enc")
	compare(t, "pose_enc", res.pose, want)
	checkDense(t, gc, res)
	checkStats(t, gc, res)
}

// TestGoldenStreams runs the other streaming cases through the same schedule:
// interval non-keyframes (kf2), the flow case's keyframe decisions replayed from
// the manifest through DeferEviction + Commit/Rollback, and the 16 preprocessed
// courthouse frames (real images rather than noise).
func TestGoldenStreams(t *testing.T) {
	for _, c := range []struct {
		name string
		flow bool
	}{{"stream_kf2", false}, {"stream_flow", true}, {"images_kf1", false}} {
		t.Run(c.name, func(t *testing.T) {
			gc := loadCase(t, c.name)
			mdl := loadTiny(t, gc.m, false)
			res := runStream(t, mdl, gc, kindsFromFrameTypes(t, gc.m, c.flow))
			want, _ := readTensor(t, gc.outputs, "pose_enc")
			compare(t, "pose_enc", res.pose, want)
			checkDense(t, gc, res)
			checkStats(t, gc, res)
		})
	}
}
