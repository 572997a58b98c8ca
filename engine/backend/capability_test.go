package backend_test

import (
	"slices"
	"testing"

	"github.com/lingbotmap/lingbotmap/engine/backend"
	"github.com/lingbotmap/lingbotmap/engine/cpu"
)

// deviceDouble is a backend with every optional capability, as a GPU
// backend has them, and a store with every store capability.
type deviceDouble struct{ backend.Backend }

func (deviceDouble) Err() error                     { return nil }
func (deviceDouble) Trim()                          {}
func (deviceDouble) MemoryUsage() (cur, peak int64) { return 0, 0 }
func (deviceDouble) ResetMemoryPeak()               {}
func (deviceDouble) RestartProfile()                {}
func (deviceDouble) Close() error                   { return nil }
func (deviceDouble) Unproject(_, _ backend.Tensor, _ backend.Unprojection) ([]float32, []int32, error) {
	return nil, nil, nil
}

type storeDouble struct{ backend.KVStore }

func (storeDouble) Release() error                                    { return nil }
func (storeDouble) Bytes() int64                                      { return 0 }
func (storeDouble) Close() error                                      { return nil }
func (storeDouble) ExportKV(int, []int32, []float32, []float32) error { return nil }
func (storeDouble) ImportKV(int, []int32, []float32, []float32) error { return nil }

// halfDouble has MemoryUsage without ResetMemoryPeak: not a MemoryReporter.
type halfDouble struct{ backend.Backend }

func (halfDouble) MemoryUsage() (cur, peak int64) { return 0, 0 }
func (halfDouble) Trim()                          {}

// TestCapabilities: each named capability is found exactly when its whole
// method set is there, and the CPU backend (the reference, which caches
// nothing on a device) declares only its store's release and snapshot.
func TestCapabilities(t *testing.T) {
	c := cpu.New(cpu.Config{Threads: 1})
	store, err := c.NewKVStore(backend.KVSpec{Layers: 1, Pages: 2, PageSize: 3, Heads: 1, HeadDim: 4})
	if err != nil {
		t.Fatal(err)
	}
	all := []string{backend.CapErrors, backend.CapTrim, backend.CapMemory, backend.CapProfile, backend.CapClose,
		backend.CapPoints, backend.CapRelease, backend.CapKVSize, backend.CapKVClose, backend.CapKVSnap}
	cases := []struct {
		name  string
		be    backend.Backend
		store backend.KVStore
		want  []string
	}{
		{"cpu", c, store, []string{backend.CapRelease, backend.CapKVSnap}},
		{"device", deviceDouble{c}, storeDouble{store}, all},
		{"device without a store", deviceDouble{c}, nil, all[:6]},
		{"partial", halfDouble{c}, store, []string{backend.CapTrim, backend.CapRelease, backend.CapKVSnap}},
	}
	for _, tc := range cases {
		if got := backend.Capabilities(tc.be, tc.store); !slices.Equal(got, tc.want) {
			t.Errorf("%s: capabilities %v, want %v", tc.name, got, tc.want)
		}
	}
}
