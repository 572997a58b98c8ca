package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"

	"github.com/lingbotmap/lingbotmap/engine/backend"
	"github.com/lingbotmap/lingbotmap/engine/model"
	"github.com/lingbotmap/lingbotmap/engine/weights"
)

// ErrCacheFull is returned by a streaming (non-windowed) Stream once the number
// of committed frames reaches MaxFrames: the 3D RoPE table and the special-token
// pool are sized for that many. Use windowed mode or a larger keyframe interval
// for longer runs, or Reset.
var ErrCacheFull = errors.New("engine: KV cache full")

// BackendFactory starts the backend a configuration names (cfg.Device,
// cfg.Threads, cfg.Precision). The program that composes the engine chooses
// the backends; the engine imports none of them.
type BackendFactory func(cfg Config) (backend.Backend, error)

// New builds a Stream from cfg: loads the checkpoint (or makes a random model),
// starts the backend with newBackend and sizes the caches. The stream owns
// the backend and closes it (when it is an io.Closer) with itself.
func New(ctx context.Context, cfg Config, newBackend BackendFactory, log *slog.Logger) (Stream, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("engine: invalid config: %w", err)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	store, err := openWeights(cfg)
	if err != nil {
		return nil, err
	}
	// the stream keeps the store (a mapping) until it has fingerprinted
	// it, which only a session's save or resume needs
	keep := false
	defer func() {
		if !keep {
			store.Close()
		}
	}()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if newBackend == nil {
		return nil, errors.New("engine: no backend factory")
	}
	be, err := newBackend(cfg)
	if err != nil {
		return nil, fmt.Errorf("engine: %w", err)
	}
	m, err := model.Load(be, store, model.Options{
		ScaleFrames:      cfg.ScaleFrames,
		SlidingWindow:    cfg.SlidingWindow,
		MaxFrames:        cfg.MaxFrames,
		CameraIterations: cfg.CameraIterations,
		CacheHeadroom:    cfg.CacheHeadroom,
		SelectedLayers:   cfg.SelectedLayers,
		Log:              log,
	})
	if err != nil {
		if c, ok := be.(io.Closer); ok {
			c.Close()
		}
		return nil, fmt.Errorf("engine: %w", err)
	}
	log.Info("model ready", "backend", be.Name(), "capabilities", backend.Capabilities(be, nil), "weights", weightsName(cfg))
	s := newStream(cfg, log, be, m)
	s.weights, keep = store, true
	return s, nil
}

func weightsName(cfg Config) string {
	if cfg.Weights != "" {
		return cfg.Weights
	}
	return fmt.Sprintf("random %s model (seed %d)", cfg.ModelSize, cfg.Seed)
}

// openWeights opens the checkpoint, or makes the random model of cfg.ModelSize.
func openWeights(cfg Config) (weights.Store, error) {
	if cfg.Weights != "" {
		s, err := weights.Open(cfg.Weights)
		if err != nil {
			return nil, fmt.Errorf("engine: %w", err)
		}
		// the whole key set at once: missing, extra and mis-shaped keys by name
		if _, err := weights.Check(s); err != nil {
			s.Close()
			return nil, fmt.Errorf("engine: checkpoint %s: %w", cfg.Weights, err)
		}
		return s, nil
	}
	arch := weights.TinyArch()
	if cfg.ModelSize == "full" {
		arch = weights.FullArch()
	}
	return weights.Random(arch, cfg.Seed), nil
}
