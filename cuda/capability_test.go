//go:build cuda

package cuda

import (
	"io"
	"slices"
	"testing"

	"github.com/lingbotmap/lingbotmap/engine/backend"
)

// TestCapabilities: the engine finds every capability it uses on the GPU
// backend and its KV store (sticky errors, trimming, memory reports,
// profiling, close, unprojection; releasing, sizing, closing and snapshotting the store).
func TestCapabilities(t *testing.T) {
	want := []string{backend.CapErrors, backend.CapTrim, backend.CapMemory, backend.CapProfile, backend.CapClose, backend.CapPoints,
		backend.CapRelease, backend.CapKVSize, backend.CapKVClose, backend.CapKVSnap}
	for _, g := range []Backend{fx.bf16, fx.fp32} {
		st, err := g.NewKVStore(backend.KVSpec{Layers: 1, Pages: 2, PageSize: 3, Heads: 1, HeadDim: 64})
		if err != nil {
			t.Fatal(err)
		}
		if got := backend.Capabilities(g, st); !slices.Equal(got, want) {
			t.Errorf("%s backend: capabilities %v, want %v", g.(*gpu).cfg.Precision, got, want)
		}
		if err := st.(io.Closer).Close(); err != nil {
			t.Fatal(err)
		}
	}
}
