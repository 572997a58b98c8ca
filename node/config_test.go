package node

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/spf13/pflag"
	"github.com/spf13/viper"

	"github.com/lingbotmap/lingbotmap/config"
)

// The shipped YAML must hold every key with exactly the built-in default,
// each documented by a comment (style.md "Configuration files").
func TestShippedConfigEqualsDefaults(t *testing.T) {
	v := viper.New()
	v.SetConfigType("yaml")
	if err := v.ReadConfig(bytes.NewReader(config.YAML)); err != nil {
		t.Fatalf("config/lingbotmap.yaml does not parse: %v", err)
	}
	var got Config
	if err := v.UnmarshalExact(&got); err != nil {
		t.Fatalf("config/lingbotmap.yaml has keys the node does not know: %v", err)
	}
	want := DefaultConfig()
	// YAML's [] decodes to an empty slice where the default is nil.
	if len(got.Engine.SelectedLayers) == 0 && len(want.Engine.SelectedLayers) == 0 {
		got.Engine.SelectedLayers = want.Engine.SelectedLayers
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("config/lingbotmap.yaml differs from DefaultConfig():\n yaml:    %+v\n default: %+v", got, want)
	}
	help := config.Help()
	keys := config.Keys(&got)
	if len(keys) != len(v.AllKeys()) {
		t.Errorf("config/lingbotmap.yaml has %d keys, the schema %d", len(v.AllKeys()), len(keys))
	}
	for _, k := range keys {
		if !v.InConfig(k) {
			t.Errorf("key %s is missing from config/lingbotmap.yaml", k)
		}
		if help[k] == "" {
			t.Errorf("key %s has no comment above it in config/lingbotmap.yaml", k)
		}
	}
	// The cuda section is the CUDA backend's knobs under their agreed keys.
	for _, k := range []string{"cuda.kernel_cache", "cuda.exact_attention", "cuda.profile", "cuda.gemm_tuning", "cuda.pdl", "cuda.paged_kernel", "cuda.paged_splits", "cuda.attn_exp_poly", "cuda.attn_lazy_rescale", "cuda.attn_fold_combine", "cuda.attn_free_run", "cuda.attn_scores_ahead", "cuda.attn_warp_spec", "cuda.attn_pingpong", "cuda.attn_key_halves", "cuda.attn_p_int", "cuda.dense_tma"} {
		if !slices.Contains(keys, k) {
			t.Errorf("the schema lacks %s", k)
		}
	}
}

// The shipped file given as --config loads as the defaults, exactly: its
// empty selected_layers is the engine's "the model's choice" (nil).
func TestShippedConfigLoadsAsDefaults(t *testing.T) {
	file := filepath.Join(t.TempDir(), "lingbotmap.yaml")
	if err := os.WriteFile(file, config.YAML, 0o644); err != nil {
		t.Fatal(err)
	}
	c, src, err := load(t, "--config", file)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(c, DefaultConfig()) {
		t.Errorf("--config config/lingbotmap.yaml loads as\n %+v\nnot the defaults\n %+v", c, DefaultConfig())
	}
	if len(src.From) != len(config.Keys(&c)) {
		t.Errorf("%d settings came from the file, want all %d", len(src.From), len(config.Keys(&c)))
	}
}

// load parses args as the node's command line and loads the configuration.
func load(t *testing.T, args ...string) (Config, config.Sources, error) {
	t.Helper()
	fs := pflag.NewFlagSet("node", pflag.ContinueOnError)
	b, err := BindFlags(fs)
	if err != nil {
		t.Fatal(err)
	}
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return LoadConfig(b)
}

// Defaults < file < environment < flags < ROS parameters, for a node setting,
// an engine setting and a cuda setting.
func TestLoadConfigLayers(t *testing.T) {
	file := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(file, []byte("queue_size: 9\nmap_frame: world\ndevice: cpu\nscale_frames: 5\n"+
		"sliding_window: 5\ncuda:\n  paged_kernel: fa2\n  paged_splits: 3\n  profile: true\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("LINGBOTMAP_MAP_FRAME", "odom")
	t.Setenv("LINGBOTMAP_SCALE_FRAMES", "6")
	t.Setenv("LINGBOTMAP_CUDA_PDL", "0") // the CUDA scripts' spelling
	t.Setenv("LINGBOTMAP_CUDA_PAGED_SPLITS", "4")
	t.Setenv("LINGBOTMAP_CUDA_GEMM_TUNING", "1")
	c, src, err := load(t, "--config", file, "--scale-frames=7", "--queue-policy=all", "--cuda-paged-splits=5", "--sliding-window", "6")
	if err != nil {
		t.Fatal(err)
	}
	if c.QueueSize != 9 || c.Engine.CUDA.PagedKernel != "fa2" || !c.Engine.CUDA.Profile { // file only
		t.Errorf("queue_size %d, cuda.paged_kernel %q, cuda.profile %v: want 9, fa2 and true from the file", c.QueueSize, c.Engine.CUDA.PagedKernel, c.Engine.CUDA.Profile)
	}
	if c.MapFrame != "odom" || c.Engine.CUDA.PDL || !c.Engine.CUDA.GEMMTuning { // env beats file and defaults
		t.Errorf("map_frame %q, cuda.pdl %v, cuda.gemm_tuning %v: want odom, false and true from the environment", c.MapFrame, c.Engine.CUDA.PDL, c.Engine.CUDA.GEMMTuning)
	}
	if c.Engine.ScaleFrames != 7 || c.Engine.CUDA.PagedSplits != 5 || c.Engine.SlidingWindow != 6 { // flag beats env and file
		t.Errorf("scale_frames %d, cuda.paged_splits %d, sliding_window %d: want 7, 5 and 6 from the flags", c.Engine.ScaleFrames, c.Engine.CUDA.PagedSplits, c.Engine.SlidingWindow)
	}
	if c.QueuePolicy != "all" || c.ConfThreshold != 1.5 || c.Engine.MaxFrames != 1024 {
		t.Errorf("queue_policy %q conf_threshold %g max_frames %d, want all and the defaults 1.5, 1024", c.QueuePolicy, c.ConfThreshold, c.Engine.MaxFrames)
	}
	wantFrom := map[string]string{"queue_size": "file", "map_frame": "env", "device": "file", "scale_frames": "flag",
		"sliding_window": "flag", "queue_policy": "flag", "cuda.paged_kernel": "file", "cuda.paged_splits": "flag",
		"cuda.profile": "file", "cuda.pdl": "env", "cuda.gemm_tuning": "env"}
	if src.File != file || !reflect.DeepEqual(src.From, wantFrom) {
		t.Errorf("sources %+v, want file %s and %v", src, file, wantFrom)
	}

	// ROS parameters come last.
	c, taken, err := ApplyParams(c, fakeParams{"scale_frames": 4, "cuda.pdl": true, "map_frame": "map"})
	if err != nil {
		t.Fatal(err)
	}
	if c.Engine.ScaleFrames != 4 || !c.Engine.CUDA.PDL || c.MapFrame != "map" || len(taken) != 3 {
		t.Errorf("after parameters: scale_frames %d, cuda.pdl %v, map_frame %q, taken %v", c.Engine.ScaleFrames, c.Engine.CUDA.PDL, c.MapFrame, taken)
	}
}

// The node's first flag spellings still work: --engine.<key> and underscores.
func TestOldFlagSpellings(t *testing.T) {
	c, _, err := load(t, "--engine.model_size=full", "--engine.keyframe_interval", "3", "--queue_policy=all",
		"--image_transport=both", "--diagnostics_rate=10")
	if err != nil {
		t.Fatal(err)
	}
	if c.Engine.ModelSize != "full" || c.Engine.KeyframeInterval != 3 || c.QueuePolicy != "all" || c.ImageTransport != "both" || c.DiagnosticsRate != 10 {
		t.Errorf("old spellings gave %+v", c)
	}
}

// Every setting has a flag, an environment variable and a ROS parameter
// derived from its key by one rule each, and each reaches the setting.
func TestEverySettingReachable(t *testing.T) {
	// base_frame needs base_to_camera; the other settings ignore it.
	const base = "0 0 0 0 0 0 1"
	t.Setenv("LINGBOTMAP_BASE_TO_CAMERA", base)
	def := DefaultConfig()
	for _, s := range config.Settings(&def) {
		val, want := otherValue(t, s.Key, s.Value)
		t.Run(s.Key, func(t *testing.T) {
			// The three-warpgroup attention kernels' levers need the
			// producer warpgroup off (engine config validation).
			threeWG := s.Key == "cuda.attn_fold_combine" || s.Key == "cuda.attn_free_run" || s.Key == "cuda.attn_scores_ahead"
			if threeWG {
				t.Setenv("LINGBOTMAP_CUDA_ATTN_WARP_SPEC", "0")
			}
			check := func(how string, c Config) {
				t.Helper()
				got := settingOf(&c, s.Key)
				if !reflect.DeepEqual(got, want) {
					t.Errorf("%s: %s = %v, want %v", how, s.Key, got, want)
				}
			}
			c, _, err := load(t, "--"+config.FlagName(s.Key)+"="+val)
			if err != nil {
				t.Fatalf("flag --%s=%s: %v", config.FlagName(s.Key), val, err)
			}
			check("flag", c)

			t.Setenv(config.EnvName(s.Key), val)
			c, src, err := load(t)
			if err != nil {
				t.Fatalf("%s=%s: %v", config.EnvName(s.Key), val, err)
			}
			check("environment", c)
			if src.From[s.Key] != "env" {
				t.Errorf("source %q, want env", src.From[s.Key])
			}
			if s.Key == "base_to_camera" {
				t.Setenv(config.EnvName(s.Key), base)
			} else {
				os.Unsetenv(config.EnvName(s.Key))
			}

			param := any(val)
			switch reflect.ValueOf(want).Kind() {
			case reflect.Bool:
				param = want
			case reflect.Int, reflect.Int64:
				param = int(reflect.ValueOf(want).Int())
			case reflect.Float64:
				param = want
			case reflect.Slice:
				param = strings.ReplaceAll(val, ",", " ")
			}
			start := DefaultConfig()
			start.BaseToCamera = base
			if threeWG {
				start.Engine.CUDA.AttnWarpSpec = 0
			}
			c, taken, err := ApplyParams(start, fakeParams{s.Key: param})
			if err != nil || !slices.Equal(taken, []string{s.Key}) {
				t.Fatalf("parameter %s: %v (taken %v)", s.Key, err, taken)
			}
			check("ROS parameter", c)
		})
	}
}

// otherValue is a valid value of a setting other than its default, as text
// and as the field holds it.
func otherValue(t *testing.T, key string, v reflect.Value) (string, any) {
	special := map[string]struct {
		text string
		val  any
	}{
		"device":              {"cuda", "cuda"},
		"model_size":          {"full", "full"},
		"precision":           {"fp32", "fp32"},
		"selected_layers":     {"1,2,3,4", []int{1, 2, 3, 4}},
		"image_width":         {"140", 140},
		"image_transport":     {"both", "both"},
		"queue_policy":        {"all", "all"},
		"base_frame":          {"base_link", "base_link"},
		"base_to_camera":      {"0 0 0 -0.5 0.5 -0.5 0.5", "0 0 0 -0.5 0.5 -0.5 0.5"},
		"cuda.paged_kernel":   {"fa2", "fa2"},
		"max_frames":          {"2000", 2000},
		"cuda.arch":           {"sm_80", "sm_80"},
		"cuda.attn_exp_poly":  {"2", 2},
		"cuda.attn_free_run":  {"2", 2},
		"cuda.attn_warp_spec": {"3", 3},
		"cuda.attn_p_int":     {"2", 2},
		"window_mode":         {"reference", "reference"},
		"cloud_reliability":   {"best_effort", "best_effort"},
		"ros2_gid_size":       {"24", 24},
		"grid_extent":         {"-5 -5 10 10", "-5 -5 10 10"},
		"odometry_in":         {"map", "map"},
		"scale.source":        {"depth", "depth"},
	}
	if s, ok := special[key]; ok {
		return s.text, s.val
	}
	switch v.Kind() {
	case reflect.Bool:
		return strconv.FormatBool(!v.Bool()), !v.Bool()
	case reflect.Int:
		return strconv.Itoa(int(v.Int()) + 3), int(v.Int()) + 3
	case reflect.Int64:
		return strconv.Itoa(int(v.Int()) + 3), v.Int() + 3
	case reflect.Float64:
		return strconv.FormatFloat(v.Float()+0.25, 'g', -1, 64), v.Float() + 0.25
	case reflect.String:
		return "x" + v.String(), "x" + v.String()
	}
	t.Fatalf("setting %s: no test value for kind %s", key, v.Kind())
	return "", nil
}

func settingOf(c *Config, key string) any {
	for _, s := range config.Settings(c) {
		if s.Key == key {
			return s.Value.Interface()
		}
	}
	return nil
}

func TestLoadConfigRejectsBadValues(t *testing.T) {
	cases := []struct{ yaml, want string }{
		{"queue_policy: newest\n", "'queue_policy'"},
		{"queue_size: 0\n", "'queue_size'"},
		{"conf_threshold: -1\n", "'conf_threshold'"},
		{"conf_threshold: .nan\n", "'conf_threshold'"},
		{"map_voxel: 0\n", "'map_voxel'"},
		{"map_voxel: 1e-9\n", "32-bit"},
		{"map_rate: .inf\n", "'map_rate'"},
		// base_frame alone is valid: base → camera comes from the TF tree
		{"odom_frame: map\n", "'odom_frame'"},
		{"base_frame: base_link\nodom_frame: base_link\n", "'odom_frame'"},
		{"tf_tolerance: -0.1\n", "'tf_tolerance'"},
		{"tf_wait: .nan\n", "'tf_wait'"},
		{"base_frame: base_link\nbase_to_camera: \"1 2 3\"\n", "'base_to_camera'"},
		{"image_transport: theora\n", "'image_transport'"},
		{"device: tpu\n", "'device'"},
		{"flow_threshold: .nan\n", "'flow_threshold'"},
		{"selected_layers: [4, 4, 9]\n", "'selected_layers'"},
		{"selected_layers: [-1, 3]\n", "'selected_layers'"},
		{"flow_threshold: -2\n", "'flow_threshold'"},
		{"max_frames: 8\n", "'max_frames'"},
		{"cache_headroom: 1\n", "'cache_headroom'"},
		{"cuda:\n  paged_kernel: fastest\n", "'cuda.paged_kernel'"},
		{"cuda:\n  paged_splits: -1\n", "'cuda.paged_splits'"},
		{"cuda:\n  attn_exp_poly: 3\n", "'cuda.attn_exp_poly'"},
		{"cuda:\n  attn_free_run: 3\n", "'cuda.attn_free_run'"},
		{"cuda:\n  pdl: maybe\n", "pdl"},
		{"cuda:\n  pdll: false\n", "pdll"},
		{"engine:\n  device: cpu\n", "engine"}, // the old sectioned file
		{"queue_sise: 3\n", "queue_sise"},
		{"queue_size: many\n", "queue_size"},
	}
	for _, tc := range cases {
		file := filepath.Join(t.TempDir(), "c.yaml")
		if err := os.WriteFile(file, []byte(tc.yaml), 0o644); err != nil {
			t.Fatal(err)
		}
		_, _, err := load(t, "--config", file)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want one naming %s", tc.yaml, err, tc.want)
		}
	}
	// Flags and the environment are checked the same way.
	if _, _, err := load(t, "--flow-threshold", "NaN"); err == nil || !strings.Contains(err.Error(), "'flow_threshold'") {
		t.Errorf("--flow-threshold NaN: error %v, want one naming flow_threshold", err)
	}
	t.Setenv("LINGBOTMAP_CUDA_PAGED_SPLITS", "-2")
	if _, _, err := load(t); err == nil || !strings.Contains(err.Error(), "'cuda.paged_splits'") {
		t.Errorf("LINGBOTMAP_CUDA_PAGED_SPLITS=-2: error %v, want one naming cuda.paged_splits", err)
	}
}

// fakeParams is a parameter server in a map, for ApplyParams without a master.
type fakeParams map[string]any

func (p fakeParams) IsSet(k string) (bool, error) { _, ok := p[k]; return ok, nil }
func (p fakeParams) Bool(k string) (bool, error) {
	if b, ok := p[k].(bool); ok {
		return b, nil
	}
	return false, os.ErrInvalid
}
func (p fakeParams) Int(k string) (int, error) {
	if i, ok := p[k].(int); ok {
		return i, nil
	}
	return 0, os.ErrInvalid
}
func (p fakeParams) Float64(k string) (float64, error) {
	if f, ok := p[k].(float64); ok {
		return f, nil
	}
	return 0, os.ErrInvalid
}
func (p fakeParams) String(k string) (string, error) {
	if s, ok := p[k].(string); ok {
		return s, nil
	}
	return "", os.ErrInvalid
}

// namedParams names its parameters as ROS 1 does.
type namedParams struct{ fakeParams }

func (namedParams) ParamName(key string) string { return config.ParamName(key) }

func TestApplyParams(t *testing.T) {
	c, taken, err := ApplyParams(DefaultConfig(), fakeParams{
		"weights":         "/m.pt",
		"map_rate":        2, // rosparam stores "2" as an int
		"publish_tf":      false,
		"selected_layers": "4 11 17 23",
		"queue_size":      8,
		"cuda.pdl":        false,
	})
	if err != nil {
		t.Fatal(err)
	}
	if c.Engine.Weights != "/m.pt" || c.MapRate != 2 || c.PublishTF || c.QueueSize != 8 || c.Engine.CUDA.PDL ||
		!reflect.DeepEqual(c.Engine.SelectedLayers, []int{4, 11, 17, 23}) {
		t.Errorf("ApplyParams gave %+v", c)
	}
	if len(taken) != 6 {
		t.Errorf("taken = %v, want 6 keys", taken)
	}
	if _, _, err := ApplyParams(DefaultConfig(), namedParams{fakeParams{"queue_size": "big"}}); err == nil || !strings.Contains(err.Error(), "~queue_size") {
		t.Errorf("a string for an int parameter: error %v, want one naming ~queue_size", err)
	}
	if _, _, err := ApplyParams(DefaultConfig(), namedParams{fakeParams{"cuda.paged_splits": 1.5}}); err == nil || !strings.Contains(err.Error(), "~cuda/paged_splits") {
		t.Errorf("a float for an int parameter: error %v, want one naming ~cuda/paged_splits", err)
	}
	if _, _, err := ApplyParams(DefaultConfig(), fakeParams{"queue_policy": "sometimes"}); err == nil || !strings.Contains(err.Error(), "'queue_policy'") {
		t.Errorf("a bad policy: error %v, want one naming queue_policy", err)
	}
	if _, _, err := ApplyParams(DefaultConfig(), fakeParams{"flow_threshold": math.NaN()}); err == nil || !strings.Contains(err.Error(), "'flow_threshold'") {
		t.Errorf("a NaN flow threshold: error %v, want one naming flow_threshold", err)
	}
}
