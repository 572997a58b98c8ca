package ros1

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/lingbotmap/lingbotmap/engine"
	"github.com/lingbotmap/lingbotmap/engine/golden/goldentest"
	"github.com/lingbotmap/lingbotmap/internal/shared/sharedtest"
	"github.com/lingbotmap/lingbotmap/node"
)

func goldenDir(t *testing.T) string {
	t.Helper()
	return sharedtest.Path(t, "golden", "images_kf1")
}

func loadGolden(t *testing.T, key string) []float32 {
	t.Helper()
	return goldentest.Output(t, "images_kf1", key)
}

// newNode composes the node core with this transport, as cmd/lingbotmap does.
func newNode(env ROSEnv, cfg node.Config, stream engine.Stream, log *slog.Logger) (*node.Node, error) {
	tr := New(Options{Env: env, Log: log,
		MasterCheckInterval: time.Duration(cfg.MasterCheckInterval * float64(time.Second))})
	return node.New(node.Options{Config: cfg, Transport: tr, Log: log,
		NewStream: func(context.Context, node.Config) (engine.Stream, error) { return stream, nil }})
}

// mul4 multiplies two 4×4 matrices.
func mul4(a, b [4][4]float64) [4][4]float64 {
	var c [4][4]float64
	for i := range 4 {
		for j := range 4 {
			for k := range 4 {
				c[i][j] += a[i][k] * b[k][j]
			}
		}
	}
	return c
}
