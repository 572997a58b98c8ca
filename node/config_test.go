package node

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
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
	for _, k := range Keys() {
		if !v.InConfig(k) {
			t.Errorf("key %s is missing from config/lingbotmap.yaml", k)
		}
		if help[k] == "" {
			t.Errorf("key %s has no comment above it in config/lingbotmap.yaml", k)
		}
	}
}

func TestLoadConfigLayers(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "c.yaml")
	if err := os.WriteFile(file, []byte("queue_size: 9\nmap_frame: world\nengine:\n  device: cpu\n  scale_frames: 5\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("LINGBOTMAP_MAP_FRAME", "odom")
	t.Setenv("LINGBOTMAP_ENGINE_SCALE_FRAMES", "6")
	fs := pflag.NewFlagSet("x", pflag.ContinueOnError)
	AddFlags(fs)
	v := viper.New()
	if err := BindFlags(v, fs); err != nil {
		t.Fatal(err)
	}
	if err := fs.Parse([]string{"--engine.scale_frames=7", "--queue_policy=all"}); err != nil {
		t.Fatal(err)
	}
	c, err := LoadConfig(v, file)
	if err != nil {
		t.Fatal(err)
	}
	if c.QueueSize != 9 { // file only
		t.Errorf("queue_size = %d, want 9 from the file", c.QueueSize)
	}
	if c.MapFrame != "odom" { // env beats file
		t.Errorf("map_frame = %q, want odom from the environment", c.MapFrame)
	}
	if c.Engine.ScaleFrames != 7 { // flag beats env and file
		t.Errorf("engine.scale_frames = %d, want 7 from the flag", c.Engine.ScaleFrames)
	}
	if c.QueuePolicy != "all" || c.ConfThreshold != 1.5 {
		t.Errorf("queue_policy %q conf_threshold %g, want all and the default 1.5", c.QueuePolicy, c.ConfThreshold)
	}
}

func TestLoadConfigRejectsBadValues(t *testing.T) {
	cases := []struct{ yaml, want string }{
		{"queue_policy: newest\n", "'queue_policy'"},
		{"queue_size: 0\n", "'queue_size'"},
		{"conf_threshold: -1\n", "'conf_threshold'"},
		{"map_voxel: 0\n", "'map_voxel'"},
		{"base_frame: base_link\n", "'base_to_camera'"},
		{"base_frame: base_link\nbase_to_camera: \"1 2 3\"\n", "'base_to_camera'"},
		{"image_transport: theora\n", "'image_transport'"},
		{"engine:\n  device: tpu\n", "'device'"},
		{"queue_sise: 3\n", "queue_sise"},
		{"queue_size: many\n", "queue_size"},
	}
	for _, tc := range cases {
		file := filepath.Join(t.TempDir(), "c.yaml")
		if err := os.WriteFile(file, []byte(tc.yaml), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := LoadConfig(viper.New(), file)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want one naming %s", tc.yaml, err, tc.want)
		}
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

func (namedParams) ParamName(key string) string { return "~" + strings.ReplaceAll(key, ".", "/") }

func TestApplyParams(t *testing.T) {
	c, taken, err := ApplyParams(DefaultConfig(), fakeParams{
		"engine.weights":         "/m.pt",
		"map_rate":               2, // rosparam stores "2" as an int
		"publish_tf":             false,
		"engine.selected_layers": "4 11 17 23",
		"queue_size":             8,
	})
	if err != nil {
		t.Fatal(err)
	}
	if c.Engine.Weights != "/m.pt" || c.MapRate != 2 || c.PublishTF || c.QueueSize != 8 ||
		!reflect.DeepEqual(c.Engine.SelectedLayers, []int{4, 11, 17, 23}) {
		t.Errorf("ApplyParams gave %+v", c)
	}
	if len(taken) != 5 {
		t.Errorf("taken = %v, want 5 keys", taken)
	}
	if _, _, err := ApplyParams(DefaultConfig(), fakeParams{"queue_size": "big"}); err == nil || !strings.Contains(err.Error(), "parameter queue_size") {
		t.Errorf("a string for an int parameter: error %v, want one naming queue_size", err)
	}
	if _, _, err := ApplyParams(DefaultConfig(), namedParams{fakeParams{"queue_size": "big"}}); err == nil || !strings.Contains(err.Error(), "parameter ~queue_size") {
		t.Errorf("a string for an int parameter of a source that names its parameters: error %v, want one naming ~queue_size", err)
	}
	if _, _, err := ApplyParams(DefaultConfig(), fakeParams{"queue_policy": "sometimes"}); err == nil || !strings.Contains(err.Error(), "'queue_policy'") {
		t.Errorf("a bad policy: error %v, want one naming queue_policy", err)
	}
}
