package engine

import (
	"fmt"

	"github.com/lingbotmap/lingbotmap/cuda"
	"github.com/lingbotmap/lingbotmap/engine/backend"
	"github.com/lingbotmap/lingbotmap/engine/cpu"
)

// newBackend starts the backend cfg.Device names. A binary built without the
// cuda tag answers "cuda" with cuda.ErrNotBuilt.
func newBackend(cfg Config) (backend.Backend, error) {
	switch cfg.Device {
	case "cpu":
		return cpu.New(cpu.Config{Threads: cfg.Threads}), nil
	case "cuda":
		cc := cuda.DefaultConfig()
		if cfg.Precision == "fp32" {
			cc.Precision = cuda.FP32
		}
		be, err := cuda.New(cc)
		if err != nil {
			return nil, fmt.Errorf("engine: device cuda: %w", err)
		}
		return be, nil
	}
	return nil, fmt.Errorf("engine: unknown device %q", cfg.Device)
}
