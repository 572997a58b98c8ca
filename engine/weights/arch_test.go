package weights

import (
	"encoding/json"
	"errors"
	"math"
	"os"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/lingbotmap/lingbotmap/internal/shared/sharedtest"
)

// shapeStore is a Store that knows shapes only (for the full model's key list).
type shapeStore map[string][]int

func (s shapeStore) Keys() []string {
	keys := make([]string, 0, len(s))
	for k := range s {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
func (s shapeStore) Info(name string) (Info, bool) {
	sh, ok := s[name]
	return Info{DType: "F32", Shape: sh}, ok
}
func (s shapeStore) Float32(string) ([]float32, error) { return nil, errors.New("shapes only") }
func (s shapeStore) Close() error                      { return nil }

func fullShapes(t *testing.T) shapeStore {
	t.Helper()
	b, err := os.ReadFile(sharedtest.Path(t, "golden", "full_state_dict_shapes.json"))
	if err != nil {
		t.Fatal(err)
	}
	var m map[string][]int
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func TestFullArchMatchesOfficialKeys(t *testing.T) {
	want := fullShapes(t)
	if len(want) != 1342 {
		t.Fatalf("reference list has %d keys", len(want))
	}
	got := FullArch().Shapes()
	if !reflect.DeepEqual(map[string][]int(want), got) {
		if err := Validate(want, FullArch()); err != nil {
			t.Fatal(err)
		}
		t.Fatal("shape maps differ")
	}
	if n := FullArch().NumParams(); n != 1_157_943_540 {
		t.Errorf("full model: %d parameters, want 1,157,943,540", n)
	}
	// A shapes-only store: infer and validate (Check would also scan values).
	a, err := InferArch(want)
	if err != nil {
		t.Fatal(err)
	}
	if err := Validate(want, a); err != nil {
		t.Fatal(err)
	}
	if a != FullArch() {
		t.Errorf("InferArch(full) = %v\nwant %v", a, FullArch())
	}
}

func TestTinyArchMatchesGolden(t *testing.T) {
	s := openGoldenST(t)
	got := TinyArch().Shapes()
	if len(got) != 384 {
		t.Fatalf("TinyArch has %d keys", len(got))
	}
	if err := Validate(s, TinyArch()); err != nil {
		t.Fatal(err)
	}
	a, err := InferArch(s)
	if err != nil {
		t.Fatal(err)
	}
	if a != TinyArch() {
		t.Errorf("InferArch(golden) = %v\nwant %v", a, TinyArch())
	}
}

func TestValidateNamesEveryProblem(t *testing.T) {
	m, err := Copy(openGoldenST(t))
	if err != nil {
		t.Fatal(err)
	}
	m.Delete("depth_head.norm.weight")
	m.Delete("aggregator.scale_token")
	m.Put("aggregator.extra_thing", []int{2}, []float32{1, 2})
	m.Put("camera_head.pose_branch.fc2.bias", []int{8}, make([]float32, 8))
	err = Validate(m, TinyArch())
	var me *MismatchError
	if !errors.As(err, &me) {
		t.Fatalf("Validate = %v, want a *MismatchError", err)
	}
	if want := []string{"aggregator.scale_token", "depth_head.norm.weight"}; !reflect.DeepEqual(me.Missing, want) {
		t.Errorf("missing %v, want %v", me.Missing, want)
	}
	if want := []string{"aggregator.extra_thing"}; !reflect.DeepEqual(me.Extra, want) {
		t.Errorf("extra %v, want %v", me.Extra, want)
	}
	if want := []ShapeMismatch{{"camera_head.pose_branch.fc2.bias", []int{8}, []int{9}}}; !reflect.DeepEqual(me.Misshaped, want) {
		t.Errorf("misshaped %v, want %v", me.Misshaped, want)
	}
	lines := strings.Split(err.Error(), "\n")
	if !strings.Contains(lines[0], "2 missing, 1 unexpected, 1 mis-shaped") {
		t.Errorf("summary line %q", lines[0])
	}
	wantLines := []string{
		"  missing: aggregator.scale_token",
		"  missing: depth_head.norm.weight",
		"  unexpected: aggregator.extra_thing",
		"  mis-shaped: camera_head.pose_branch.fc2.bias is [8], want [9]",
	}
	if !reflect.DeepEqual(lines[1:], wantLines) {
		t.Errorf("detail lines\n%s\nwant\n%s", strings.Join(lines[1:], "\n"), strings.Join(wantLines, "\n"))
	}

	// The golden model is not the full one: all 1342 full keys mis-match.
	err = Validate(openGoldenST(t), FullArch())
	if !errors.As(err, &me) {
		t.Fatalf("golden vs full: %v", err)
	}
	if !sort.StringsAreSorted(me.Missing) || !sort.StringsAreSorted(me.Extra) {
		t.Error("lists not sorted")
	}
	// The tiny blocks exist in the full model under the same names, so: the
	// point head (62) is unexpected, the 1342-322 keys of further blocks are
	// missing, and every shared key whose shape depends on a size is mis-shaped
	// (all but 45: q/k-norm of head dim 64 in 10 blocks, the pose token, the
	// 9-wide pose bias and the fixed-width DPT output convs).
	if len(me.Extra) != 62 || len(me.Missing) != 1020 || len(me.Misshaped) != 277 {
		t.Errorf("golden vs full: %d extra, %d missing, %d mis-shaped; want 62, 1020, 277", len(me.Extra), len(me.Missing), len(me.Misshaped))
	}
	for _, k := range me.Extra {
		if !strings.HasPrefix(k, "point_head.") {
			t.Errorf("unexpected key %s reported as extra", k)
		}
	}

	// A store that is not a LingBot-Map checkpoint at all.
	other := NewMemStore()
	other.Put("fc.weight", []int{2, 2}, make([]float32, 4))
	if _, err := InferArch(other); err == nil || !strings.Contains(err.Error(), `missing "aggregator.camera_token"`) {
		t.Errorf("InferArch(other) = %v", err)
	}
	if err := Validate(other, Arch{}); err == nil || !strings.Contains(err.Error(), "invalid architecture") {
		t.Errorf("Validate with zero arch: %v", err)
	}
}

func TestRandomIsDeterministicAndSane(t *testing.T) {
	a := TinyArch()
	r1, r2, r3 := Random(a, 42), Random(a, 42), Random(a, 43)
	if err := Validate(r1, a); err != nil {
		t.Fatal(err)
	}
	sameTensors(t, r1, r2)
	d1, _ := r1.Float32("aggregator.frame_blocks.0.mlp.fc1.weight")
	d3, _ := r3.Float32("aggregator.frame_blocks.0.mlp.fc1.weight")
	if reflect.DeepEqual(d1, d3) {
		t.Error("seeds 42 and 43 gave the same weights")
	}
	if got, err := InferArch(r1); err != nil || got != a {
		t.Errorf("InferArch(Random(tiny)) = %v, %v", got, err)
	}

	stats := func(name string) (mean, std, lo, hi float64) {
		v, err := r1.Float32(name)
		if err != nil {
			t.Fatal(err)
		}
		lo, hi = math.Inf(1), math.Inf(-1)
		for _, x := range v {
			mean += float64(x)
			lo, hi = math.Min(lo, float64(x)), math.Max(hi, float64(x))
		}
		mean /= float64(len(v))
		for _, x := range v {
			std += (float64(x) - mean) * (float64(x) - mean)
		}
		return mean, math.Sqrt(std / float64(len(v))), lo, hi
	}
	near := func(name string, got, want, tol float64) {
		if math.Abs(got-want) > tol {
			t.Errorf("%s: %.4f, want %.4f ± %.4f", name, got, want, tol)
		}
	}
	for _, c := range []struct {
		name            string
		mean, std, tolS float64
	}{
		{"aggregator.frame_blocks.0.mlp.fc1.weight", 0, 1 / math.Sqrt(128), 0.004}, // Linear, fan-in 128
		{"aggregator.frame_blocks.0.mlp.fc2.weight", 0, 1 / math.Sqrt(512), 0.002}, // fan-in 512
		{"depth_head.scratch.layer4_rn.weight", 0, 1 / math.Sqrt(64*9), 0.003},     // Conv, fan-in in·k·k
		{"depth_head.resize_layers.0.weight", 0, 1 / math.Sqrt(16), 0.01},          // ConvT, fan-in = shape[0]
		{"aggregator.patch_embed.pos_embed", 0, 0.5, 0.02},                         // table
		{"camera_head.trunk.0.attn.qkv.bias", 0, 0.05, 0.005},                      // bias
		{"aggregator.global_blocks.1.norm1.weight", 1, 0.1, 0.03},                  // LayerNorm weight
	} {
		m, s, _, _ := stats(c.name)
		near(c.name+" mean", m, c.mean, 3*c.std/math.Sqrt(64))
		near(c.name+" std", s, c.std, c.tolS)
	}
	if _, _, lo, hi := stats("aggregator.frame_blocks.3.ls2.gamma"); lo < 0.1 || hi > 0.3 {
		t.Errorf("LayerScale gamma in [%v, %v], want within [0.1, 0.3]", lo, hi)
	}
	b, _ := r1.Float32("camera_head.pose_branch.fc2.bias")
	if want := []float32{0, 0, 0, 0, 0, 0, 0.35, 0.35, 0.35}; !reflect.DeepEqual(b, want) {
		t.Errorf("pose_branch.fc2.bias = %v, want %v", b, want)
	}
	w, _ := r1.Float32("camera_head.pose_branch.fc2.weight") // [9, 128]
	rowStd := func(r int) float64 {
		var s float64
		for _, x := range w[r*128 : (r+1)*128] {
			s += float64(x) * float64(x)
		}
		return math.Sqrt(s / 128)
	}
	near("fc2 translation row std", rowStd(0), 0.3/math.Sqrt(128), 0.01)
	near("fc2 FoV row std", rowStd(8), 0.075/math.Sqrt(128), 0.003)

	if n := len(Random(Arch{}, 1).Keys()); n != 0 {
		t.Errorf("Random of an invalid arch has %d tensors", n)
	}
}
