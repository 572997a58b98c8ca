package main

import (
	"slices"
	"strings"

	"github.com/spf13/pflag"

	"github.com/lingbotmap/lingbotmap/config"
	"github.com/lingbotmap/lingbotmap/engine"
	"github.com/lingbotmap/lingbotmap/engine/output"
	"github.com/lingbotmap/lingbotmap/node"
)

// Every command reads the one schema, node.Config (config/lingbotmap.yaml), and
// takes flags for the settings it uses; `node` uses them all. A --config file
// may hold any key of the schema, so one file serves every command.

// runSettings are the settings of `lingbotmap run`: all of the engine's,
// those of the map it writes (confidence threshold, pixel stride, voxel)
// and those of its output folder.
func runSettings() []string {
	keys := append(config.Keys(&engine.Config{}), "conf_threshold", "cloud_stride", "map_voxel",
		"camera_frame", "base_frame", "base_to_camera", "odom_frame")
	keys = append(keys, config.Keys(&output.Settings{})...)
	// the metric scale's section (run_scale.go)
	return append(keys, slices.DeleteFunc(config.Keys(&node.Config{}), func(k string) bool { return !strings.HasPrefix(k, "scale.") })...)
}

// benchSettings are the settings of `lingbotmap bench`: the model, its cache
// and the backend, and for --pipeline the input width and the schedule
// (bench alone makes its own random frames at --width × --height and times
// the streaming path without keyframe choices).
func benchSettings() []string {
	return append([]string{"weights", "model_size", "seed", "device", "threads", "precision", "selected_layers",
		"scale_frames", "sliding_window", "max_frames", "cache_headroom", "camera_iterations",
		"image_width", "keyframe_interval", "windowed", "window_size", "overlap_size", "overlap_frames", "encode_beside_heads"}, cudaSettings()...)
}

// verifySettings are the settings of `lingbotmap verify`: the backend and the
// weights; the golden case's manifest sets the model and its schedule.
func verifySettings() []string {
	return append([]string{"weights", "device", "threads", "precision", "overlap_frames", "encode_beside_heads"}, cudaSettings()...)
}

// cudaSettings are the keys of the cuda section.
func cudaSettings() []string {
	return slices.DeleteFunc(config.Keys(&engine.Config{}), func(k string) bool { return !strings.HasPrefix(k, "cuda.") })
}

// bindSettings registers the flags of keys on fs over the defaults def.
func bindSettings(fs *pflag.FlagSet, def node.Config, keys []string) (*config.Binding, error) {
	return config.Bind(fs, &def, keys)
}
