package config

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// The one naming rule per place, on the kinds of key there are.
func TestNames(t *testing.T) {
	for _, c := range []struct{ key, flag, env, param string }{
		{"device", "device", "LINGBOTMAP_DEVICE", "~device"},
		{"keyframe_interval", "keyframe-interval", "LINGBOTMAP_KEYFRAME_INTERVAL", "~keyframe_interval"},
		{"cuda.pdl", "cuda-pdl", "LINGBOTMAP_CUDA_PDL", "~cuda/pdl"},
		{"cuda.paged_kernel", "cuda-paged-kernel", "LINGBOTMAP_CUDA_PAGED_KERNEL", "~cuda/paged_kernel"},
	} {
		if got := FlagName(c.key); got != c.flag {
			t.Errorf("FlagName(%q) = %q, want %q", c.key, got, c.flag)
		}
		if got := EnvName(c.key); got != c.env {
			t.Errorf("EnvName(%q) = %q, want %q", c.key, got, c.env)
		}
		if got := ParamName(c.key); got != c.param {
			t.Errorf("ParamName(%q) = %q, want %q", c.key, got, c.param)
		}
	}
	for old, want := range map[string]string{"engine.weights": "weights", "engine.keyframe_interval": "keyframe-interval",
		"queue_policy": "queue-policy", "cuda.pdl": "cuda-pdl", "max-frames": "max-frames", "out": "out"} {
		if got := NormalizeFlag(nil, old); string(got) != want {
			t.Errorf("NormalizeFlag(%q) = %q, want %q", old, got, want)
		}
	}
}

type inner struct {
	A int    `mapstructure:"a"`
	B string `mapstructure:"b_c"`
}

type testSchema struct {
	Flat    inner              `mapstructure:",squash"`
	Section inner              `mapstructure:"sec"`
	X       float64            `mapstructure:"x"`
	L       []int              `mapstructure:"l"`
	Hook    func()             `mapstructure:"-"`
	Skip    map[string]float64 `mapstructure:"-"`
	hidden  int
}

func TestSettingsWalk(t *testing.T) {
	s := testSchema{Flat: inner{A: 1, B: "f"}, Section: inner{A: 2, B: "s"}, X: 0.5, hidden: 3}
	if got, want := Keys(&s), []string{"a", "b_c", "sec.a", "sec.b_c", "x", "l"}; !slices.Equal(got, want) {
		t.Errorf("Keys = %v, want %v", got, want)
	}
	want := map[string]any{"a": 1, "b_c": "f", "sec.a": 2, "sec.b_c": "s", "x": 0.5, "l": []int(nil)}
	if got := Values(&s); !reflect.DeepEqual(got, want) {
		t.Errorf("Values = %v, want %v", got, want)
	}
}

func TestBindAndLoad(t *testing.T) {
	def := testSchema{Flat: inner{A: 1}, Section: inner{B: "d"}, X: 2}
	if _, err := Bind(pflag.NewFlagSet("x", pflag.ContinueOnError), &def, []string{"a", "nope"}); err == nil || !strings.Contains(err.Error(), "nope") {
		t.Errorf("binding an unknown key: %v", err)
	}
	fs := pflag.NewFlagSet("x", pflag.ContinueOnError)
	b, err := Bind(fs, &def, []string{"a", "sec.b_c", "x", "l"})
	if err != nil {
		t.Fatal(err)
	}
	def.X = 99 // Bind keeps its own copy of the defaults
	if fs.Lookup("b-c") != nil || fs.Lookup("sec-a") != nil || fs.Lookup("sec-b-c") == nil || fs.Lookup("config") == nil {
		t.Fatal("Bind registered flags for other keys than the command's, or missed one")
	}
	file := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(file, []byte("a: 5\nb_c: other\nsec:\n  b_c: file\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("LINGBOTMAP_SEC_B_C", "env")
	t.Setenv("LINGBOTMAP_L", "3,4")
	if err := fs.Parse([]string{"--config", file, "--sec.b_c=flag", "--a=7"}); err != nil {
		t.Fatal(err)
	}
	var got testSchema
	src, err := b.Load(&got)
	if err != nil {
		t.Fatal(err)
	}
	// b_c is another command's setting: parsed, but left at its default.
	if got.Flat.A != 7 || got.Flat.B != "" || got.Section.B != "flag" || got.X != 2 || !slices.Equal(got.L, []int{3, 4}) {
		t.Errorf("loaded %+v", got)
	}
	if want := map[string]string{"a": "flag", "sec.b_c": "flag", "l": "env"}; src.File != file || !reflect.DeepEqual(src.From, want) {
		t.Errorf("sources %+v, want %v", src, want)
	}
	var wrong inner
	if _, err := b.Load(&wrong); err == nil {
		t.Error("Load into another type accepted")
	}

	for _, bad := range []struct{ env, val, want string }{
		{"LINGBOTMAP_X", "NaN", "'x'"},
		{"LINGBOTMAP_X", "-Inf", "'x'"},
		{"LINGBOTMAP_SEC_A", "many", "sec.a"},
	} {
		t.Run(bad.env+"="+bad.val, func(t *testing.T) {
			t.Setenv(bad.env, bad.val)
			fs := pflag.NewFlagSet("x", pflag.ContinueOnError)
			b, err := Bind(fs, &def, nil)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := b.Load(&got); err == nil || !strings.Contains(err.Error(), bad.want) {
				t.Errorf("error %v, want one naming %s", err, bad.want)
			}
		})
	}
}
