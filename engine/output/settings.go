package output

import "github.com/lingbotmap/lingbotmap/engine/render"

// Settings are the output folder's settings in the one schema
// (config/lingbotmap.yaml, node.Config): what `lingbotmap run` writes
// besides the trajectory and the map. The node ignores them.
type Settings struct {
	// SaveDepth writes depth/ (16-bit PNGs) and their colour previews
	// (depth_color/).
	SaveDepth bool `mapstructure:"save_depth"`
	// SaveConf writes conf/ (16-bit confidence PNGs).
	SaveConf bool `mapstructure:"save_conf"`
	// DepthScale is depth PNG units per model unit (1000: millimetres).
	DepthScale float64 `mapstructure:"depth_scale"`
	// ConfScale is confidence PNG units per confidence unit.
	ConfScale float64 `mapstructure:"conf_scale"`
	// CheckpointEvery is how many results go by between two checkpoints
	// (map.ply, run.json, the session); 0 writes them only at the end.
	CheckpointEvery int `mapstructure:"checkpoint_every"`
}

// DefaultSettings are the built-in defaults; config/lingbotmap.yaml
// repeats them and a test keeps the two equal.
func DefaultSettings() Settings {
	return Settings{SaveDepth: true, DepthScale: render.DepthScale, ConfScale: 100, CheckpointEvery: 20}
}
