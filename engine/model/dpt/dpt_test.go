package dpt

import (
	"fmt"
	"math"
	"testing"

	"github.com/lingbotmap/lingbotmap/engine/backend"
	"github.com/lingbotmap/lingbotmap/engine/cpu"
	"github.com/lingbotmap/lingbotmap/engine/golden/goldentest"
	"github.com/lingbotmap/lingbotmap/engine/weights"
)

// The tiny golden model: patch grid 3×5 at 42×70, 6 special tokens, 2E = 256.
const (
	goldenS, goldenH, goldenW = 16, 42, 70
	goldenGH, goldenGW        = 3, 5
	goldenPatchStart          = 6
)

func read(t *testing.T, st *weights.SafeTensors, name string) []float32 {
	t.Helper()
	d, err := st.Float32(name)
	if err != nil {
		t.Fatalf("golden tensor %s: %v", name, err)
	}
	return d
}

// errStats compares got with want: the largest |got−want|/|want| and the largest
// absolute difference.
func errStats(got, want []float32) (rel, abs float64) {
	for i := range want {
		d := math.Abs(float64(got[i]) - float64(want[i]))
		abs = math.Max(abs, d)
		rel = math.Max(rel, d/math.Max(math.Abs(float64(want[i])), 1e-6))
	}
	return rel, abs
}

// runGoldenHead loads a golden head and runs it on the golden aggregator
// outputs of stream_kf1; it returns the raw map as NHWC per channel: ch[c][s·H·W].
func runGoldenHead(t *testing.T, module string, wantOut int) [][]float32 {
	t.Helper()
	be := cpu.New(cpu.Config{})
	ws := goldentest.Open(t, "weights.safetensors")
	cur := weights.NewCursor(ws)
	h, err := Load(be, cur.Sub(module))
	if err != nil {
		t.Fatal(err)
	}
	if unused := cur.Unused(module + "."); len(unused) > 0 {
		t.Fatalf("%s: tensors not read by Load: %v", module, unused)
	}
	if h.OutDim() != wantOut {
		t.Fatalf("%s: OutDim %d, want %d", module, h.OutDim(), wantOut)
	}
	im := goldentest.Open(t, "stream_kf1", "intermediates.safetensors")
	var layers []backend.Tensor
	for _, k := range []string{"agg_layer00", "agg_layer02", "agg_layer03", "agg_layer04"} {
		inf, ok := im.Info(k)
		if !ok {
			t.Fatalf("golden intermediates lack %s", k)
		}
		layers = append(layers, be.FromHost(read(t, im, k), inf.Shape...))
	}
	out, err := h.Forward(be, layers, goldenPatchStart, goldenGH, goldenGW, goldenH, goldenW)
	if err != nil {
		t.Fatal(err)
	}
	if sh := out.Shape(); fmt.Sprint(sh) != fmt.Sprint([]int{goldenS, wantOut, goldenH, goldenW}) {
		t.Fatalf("%s: output shape %v", module, sh)
	}
	raw := be.ToHost(out)
	plane := goldenH * goldenW
	ch := make([][]float32, wantOut)
	for c := range ch {
		ch[c] = make([]float32, goldenS*plane)
		for s := range goldenS {
			copy(ch[c][s*plane:(s+1)*plane], raw[(s*wantOut+c)*plane:])
		}
	}
	return ch
}

func mapVals(xs []float32, f func(float64) float64) []float32 {
	out := make([]float32, len(xs))
	for i, x := range xs {
		out[i] = float32(f(float64(x)))
	}
	return out
}

// TestDepthHeadMatchesGolden: exp(ch0) is the depth, 1+exp(ch1) its confidence.
func TestDepthHeadMatchesGolden(t *testing.T) {
	ch := runGoldenHead(t, "depth_head", 2)
	out := goldentest.Open(t, "stream_kf1", "outputs.safetensors")
	for _, c := range []struct {
		name string
		got  []float32
	}{
		{"depth", mapVals(ch[0], math.Exp)},
		{"depth_conf", mapVals(ch[1], func(x float64) float64 { return 1 + math.Exp(x) })},
	} {
		rel, abs := errStats(c.got, read(t, out, c.name))
		t.Logf("%s: max rel err %.2e, max abs err %.2e", c.name, rel, abs)
		if rel > 1e-4 {
			t.Errorf("%s: max rel err %.3g exceeds 1e-4", c.name, rel)
		}
	}
}

// TestPointHeadMatchesGolden: sign(y)·expm1(|y|) of ch0..2 are the world points,
// 1+exp(ch3) their confidence.
func TestPointHeadMatchesGolden(t *testing.T) {
	ch := runGoldenHead(t, "point_head", 4)
	out := goldentest.Open(t, "stream_kf1", "outputs.safetensors")
	invLog := func(y float64) float64 {
		return math.Copysign(math.Expm1(math.Abs(y)), y)
	}
	n := len(ch[0])
	pts := make([]float32, 3*n)
	for c := range 3 {
		for i, y := range ch[c] {
			pts[3*i+c] = float32(invLog(float64(y)))
		}
	}
	want := read(t, out, "world_points")
	rel, abs := errStats(pts, want)
	// Points pass through zero, where a relative error means nothing: below
	// |p| = 1 the bound is absolute (the points' RMS is about 1.5).
	var mixed float64
	for i := range want {
		mixed = math.Max(mixed, math.Abs(float64(pts[i]-want[i]))/math.Max(math.Abs(float64(want[i])), 1))
	}
	t.Logf("world_points: max err %.2e (relative above |p| = 1, absolute below; plain relative %.2e near zero), max abs err %.2e", mixed, rel, abs)
	if mixed > 1e-4 {
		t.Errorf("world_points: error %.3g exceeds 1e-4", mixed)
	}
	rel, abs = errStats(mapVals(ch[3], func(x float64) float64 { return 1 + math.Exp(x) }), read(t, out, "world_points_conf"))
	t.Logf("world_points_conf: max rel err %.2e, max abs err %.2e", rel, abs)
	if rel > 1e-4 {
		t.Errorf("world_points_conf: max rel err %.3g exceeds 1e-4", rel)
	}
}
