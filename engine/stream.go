package engine

import (
	"context"
	"errors"
	"log/slog"
)

// New builds a Stream from cfg: loads or makes the weights, starts the backend
// and sizes the caches.
func New(ctx context.Context, cfg Config, log *slog.Logger) (Stream, error) {
	// TEMPORARY during this session's integration; replaced by the real pipeline.
	return nil, errors.New("engine: not wired yet")
}
