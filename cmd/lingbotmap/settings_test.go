package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/lingbotmap/lingbotmap/config"
	"github.com/lingbotmap/lingbotmap/engine"
	"github.com/lingbotmap/lingbotmap/engine/output"
	"github.com/lingbotmap/lingbotmap/node"
)

// settingsCommand is one command that reads the schema, with a way to build
// it so that its run function hands back what it loaded (by key).
type settingsCommand struct {
	name string
	keys []string
	args []string // positional arguments the command needs
	// build makes the command; the loaded settings land in *got.
	build func(got *map[string]any) *cobra.Command
}

func settingsCommands() []settingsCommand {
	return []settingsCommand{
		{name: "node", keys: config.Keys(&node.Config{}), build: func(*map[string]any) *cobra.Command { return newNodeCmd() }},
		{name: "run", keys: runSettings(), args: []string{"in"}, build: func(got *map[string]any) *cobra.Command {
			return newRunCmdWith(func(_ context.Context, o *runOptions, _ bool) error {
				*got = config.Values(&o.cfg)
				(*got)["conf_threshold"], (*got)["map_voxel"], (*got)["cloud_stride"] = o.confThreshold, o.voxel, o.pixelStride
				(*got)["save_depth"], (*got)["save_conf"], (*got)["depth_scale"] = o.saveDepth, o.saveConf, o.depthScale
				(*got)["conf_scale"], (*got)["checkpoint_every"] = o.confScale, o.checkpointEvery
				(*got)["camera_frame"], (*got)["base_frame"], (*got)["base_to_camera"], (*got)["odom_frame"] = o.cameraFrame, o.baseFrame, o.baseToCamera, o.odomFrame
				for k, v := range config.Values(&o.scale) {
					(*got)["scale."+k] = v
				}
				return nil
			})
		}},
		{name: "bench", keys: benchSettings(), build: func(got *map[string]any) *cobra.Command {
			return newBenchCmdWith(func(_ context.Context, o *benchOptions, _ io.Writer) error {
				*got = config.Values(&o.cfg)
				return nil
			})
		}},
		{name: "verify", keys: verifySettings(), args: []string{"case"}, build: func(got *map[string]any) *cobra.Command {
			return newVerifyCmdWith(func(_ context.Context, o *verifyOptions, _ io.Writer) error {
				e := engine.Config{Weights: o.weights, Device: o.device, Precision: o.precision, Threads: o.threads, CUDA: o.cuda, OverlapFrames: o.overlap, EncodeBesideHeads: o.beside}
				*got = config.Values(&e)
				maps.DeleteFunc(*got, func(k string, _ any) bool { return !slices.Contains(verifySettings(), k) })
				return nil
			})
		}},
	}
}

// Each command has exactly the flags of its settings, named by the one rule
// (config.FlagName), and no other flag is the name of a setting: a setting
// never has two names, and never a name that means something else.
func TestCommandFlagsAreTheSchema(t *testing.T) {
	all := config.Keys(&node.Config{})
	byFlag := map[string]string{}
	for _, k := range all {
		byFlag[config.FlagName(k)] = k
	}
	for _, c := range settingsCommands() {
		t.Run(c.name, func(t *testing.T) {
			var got map[string]any
			cmd := c.build(&got)
			var schemaFlags []string
			cmd.Flags().VisitAll(func(f *pflag.Flag) {
				if k, ok := byFlag[f.Name]; ok {
					schemaFlags = append(schemaFlags, k)
				}
				if strings.Contains(f.Name, "_") || strings.Contains(f.Name, ".") {
					t.Errorf("flag --%s: flags are spelled with hyphens", f.Name)
				}
			})
			if want := slices.Sorted(slices.Values(c.keys)); !slices.Equal(slices.Sorted(slices.Values(schemaFlags)), want) {
				t.Errorf("flags for settings %v, want %v", schemaFlags, want)
			}
			if cmd.Flags().Lookup("config") == nil {
				t.Error("no --config flag")
			}
		})
	}
	// The names users expect.
	for flag, key := range map[string]string{"device": "device", "precision": "precision", "weights": "weights",
		"keyframe-interval": "keyframe_interval", "cache-headroom": "cache_headroom", "max-frames": "max_frames",
		"cuda-pdl": "cuda.pdl", "cuda-kernel-cache": "cuda.kernel_cache", "queue-policy": "queue_policy"} {
		if byFlag[flag] != key {
			t.Errorf("--%s is %q, want %s", flag, byFlag[flag], key)
		}
	}
	for key, env := range map[string]string{"cuda.pdl": "LINGBOTMAP_CUDA_PDL", "cuda.paged_kernel": "LINGBOTMAP_CUDA_PAGED_KERNEL",
		"cuda.exact_attention": "LINGBOTMAP_CUDA_EXACT_ATTENTION", "cuda.kernel_cache": "LINGBOTMAP_CUDA_KERNEL_CACHE",
		"device": "LINGBOTMAP_DEVICE"} {
		if got := config.EnvName(key); got != env {
			t.Errorf("%s: environment variable %s, want %s", key, got, env)
		}
	}
}

// Every setting of every command reaches it from a flag, the environment and
// the --config file, in that order of precedence.
func TestCommandsLoadEverySetting(t *testing.T) {
	for _, c := range settingsCommands() {
		if c.name == "node" {
			continue // node.LoadConfig, tested in package node
		}
		for _, key := range c.keys {
			t.Run(c.name+"/"+key, func(t *testing.T) {
				def := config.Values(ptr(commandDefaults(c.name)))[key]
				fileText, fileVal := testValue(t, key, def, 1)
				envText, envVal := testValue(t, key, def, 2)
				flagText, flagVal := testValue(t, key, def, 3)
				file := filepath.Join(t.TempDir(), "c.yaml")
				yamlKey, indent := key, ""
				if section, leaf, ok := strings.Cut(key, "."); ok {
					yamlKey, indent = leaf, section+":\n  "
				}
				if err := os.WriteFile(file, []byte(indent+yamlKey+": "+yamlValue(fileText, def)+"\n"), 0o644); err != nil {
					t.Fatal(err)
				}
				load := func(args ...string) any {
					t.Helper()
					var got map[string]any
					cmd := c.build(&got)
					cmd.SetArgs(append(append(args, c.args...), "--config", file))
					cmd.SetOut(io.Discard)
					cmd.SetErr(io.Discard)
					if err := cmd.ExecuteContext(context.Background()); err != nil {
						t.Fatalf("%s %v: %v", c.name, args, err)
					}
					return got[key]
				}
				if got := load(); !reflect.DeepEqual(got, fileVal) {
					t.Errorf("from the file: %v, want %v", got, fileVal)
				}
				t.Setenv(config.EnvName(key), envText)
				if got := load(); !reflect.DeepEqual(got, envVal) {
					t.Errorf("from %s: %v, want %v", config.EnvName(key), got, envVal)
				}
				if got := load("--" + config.FlagName(key) + "=" + flagText); !reflect.DeepEqual(got, flagVal) {
					t.Errorf("from --%s: %v, want %v", config.FlagName(key), got, flagVal)
				}
			})
		}
	}
}

// A command takes only its own settings: another command's, given in the
// environment, leave it at its defaults.
func TestCommandsIgnoreOtherSettings(t *testing.T) {
	for _, c := range settingsCommands() {
		if c.name == "node" {
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			def := config.Values(ptr(commandDefaults(c.name)))
			for _, k := range config.Keys(&node.Config{}) {
				if !slices.Contains(c.keys, k) {
					text, _ := testValue(t, k, def[k], 1)
					t.Setenv(config.EnvName(k), text)
				}
			}
			var got map[string]any
			cmd := c.build(&got)
			cmd.SetArgs(c.args)
			if err := cmd.ExecuteContext(context.Background()); err != nil {
				t.Fatal(err)
			}
			others := 0
			for k, v := range got {
				if !slices.Contains(c.keys, k) {
					others++
					if !reflect.DeepEqual(v, def[k]) {
						t.Errorf("%s = %v from the environment, want the default %v", k, v, def[k])
					}
				}
			}
			if c.name == "bench" && others == 0 {
				t.Error("the test saw none of the settings bench leaves alone")
			}
		})
	}
}

// The commands' own defaults differ from the schema's in the one setting
// each that config/lingbotmap.yaml names, and nowhere else.
func TestCommandDefaults(t *testing.T) {
	base := config.Values(ptr(node.DefaultConfig()))
	for name, want := range map[string]map[string]any{
		"node": {}, "run": {"map_voxel": 0.02, "windowed": false, "window_mode": "reference", "overlap_size": 16, "overlap_frames": true}, "bench": {"model_size": "full", "overlap_frames": true}, "verify": {"precision": "fp32"},
	} {
		got := map[string]any{}
		for k, v := range config.Values(ptr(commandDefaults(name))) {
			if !reflect.DeepEqual(v, base[k]) {
				got[k] = v
			}
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: defaults differ from the schema's in %v, want %v", name, got, want)
		}
		for k, v := range want {
			if !strings.Contains(string(config.YAML), fmt.Sprintf("%s %s %v", name, k, v)) {
				t.Errorf("config/lingbotmap.yaml does not say %q", fmt.Sprintf("%s %s %v", name, k, v))
			}
		}
	}
}

func commandDefaults(name string) node.Config {
	switch name {
	case "bench":
		return benchDefaults()
	case "verify":
		return verifyDefaults()
	case "run":
		return runDefaults()
	}
	return node.DefaultConfig()
}

func ptr[T any](v T) *T { return &v }

// testValue is the i-th valid value of a setting other than its default, as
// text and as the setting holds it. Enumerations cycle through their values.
func testValue(t *testing.T, key string, def any, i int) (string, any) {
	t.Helper()
	enums := map[string][]string{
		"device":            {"cuda", "cpu", "cuda"},
		"model_size":        {"full", "tiny", "full"},
		"precision":         {"fp32", "bf16", "fp32"},
		"cuda.paged_kernel": {"fa2", "tma", "wg"},
	}
	if e, ok := enums[key]; ok {
		return e[i-1], e[i-1]
	}
	switch d := def.(type) {
	case bool:
		b := i%2 == 1 != d // file and flag flip the default, the environment keeps it
		return strconv.FormatBool(b), b
	case int:
		n := d + 14*i // multiples of 14 keep image_width valid
		return strconv.Itoa(n), n
	case int64:
		return strconv.Itoa(int(d) + i), d + int64(i)
	case float64:
		return strconv.FormatFloat(d+float64(i)/4, 'g', -1, 64), d + float64(i)/4
	case string:
		return "s" + strconv.Itoa(i), "s" + strconv.Itoa(i)
	case []int:
		return strconv.Itoa(i) + ",5", []int{i, 5}
	}
	t.Fatalf("setting %s: no test value for %T", key, def)
	return "", nil
}

// yamlValue writes a flag's text as a YAML value of the setting's type.
func yamlValue(text string, def any) string {
	if _, ok := def.([]int); ok {
		return "[" + text + "]"
	}
	if _, ok := def.(string); ok {
		return strconv.Quote(text)
	}
	return text
}

// run.json records what ran: the CPU's arithmetic, the settings as resolved,
// the --config file and where each given setting came from.
func TestRunRecordsWhatRan(t *testing.T) {
	file := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(file, []byte("scale_frames: 3\nqueue_policy: all\ncuda:\n  pdl: false\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("LINGBOTMAP_SLIDING_WINDOW", "5")
	var got *runOptions
	cmd := newRunCmdWith(func(_ context.Context, o *runOptions, _ bool) error { got = o; return nil })
	cmd.SetArgs([]string{"in", "--config", file, "--precision", "bf16"})
	if err := cmd.ExecuteContext(context.Background()); err != nil {
		t.Fatal(err)
	}
	rec := output.EngineSettings(got.cfg)
	if rec["precision"] != "fp32" || rec["device"] != "cpu" || rec["scale_frames"] != 3 || rec["sliding_window"] != 5 || rec["max_frames"] != 1024 {
		t.Errorf("engine record %v: want fp32 on the CPU, scale_frames 3, sliding_window 5 and max_frames 1024", rec)
	}
	for k := range rec {
		if strings.HasPrefix(k, "cuda.") {
			t.Errorf("engine record of a CPU run holds %s", k)
		}
	}
	want := map[string]string{"scale_frames": "file", "sliding_window": "env", "precision": "flag", "cuda.pdl": "file"}
	if got.sources.File != file || !reflect.DeepEqual(got.sources.From, want) {
		t.Errorf("sources %+v, want %s and %v", got.sources, file, want)
	}
	got.cfg.Device = "cuda"
	if rec := output.EngineSettings(got.cfg); rec["precision"] != "bf16" || rec["cuda.pdl"] != false || rec["cuda.paged_kernel"] != "auto" {
		t.Errorf("engine record on the GPU %v: want bf16 and the cuda section", rec)
	}
}

func TestVersionOnStdout(t *testing.T) {
	var out, errs bytes.Buffer
	root := newRootCmd()
	root.SetArgs([]string{"version"})
	root.SetOut(&out)
	root.SetErr(&errs)
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	if out.String() != "lingbotmap "+version+"\n" || errs.Len() != 0 {
		t.Errorf("stdout %q, stderr %q", out.String(), errs.String())
	}
}
