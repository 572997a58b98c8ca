package backend_test

import (
	"slices"
	"testing"

	"github.com/lingbotmap/lingbotmap/engine/backend"
	"github.com/lingbotmap/lingbotmap/engine/cpu"
)

// batched is a CPU backend that also downloads in batches, counting them.
type batched struct {
	*cpu.Backend
	batches, tensors int
}

func (b *batched) ToHostMany(ts ...backend.Tensor) [][]float32 {
	b.batches++
	b.tensors += len(ts)
	out := make([][]float32, len(ts))
	for i, t := range ts {
		out[i] = b.ToHost(t)
	}
	return out
}

// Download returns every tensor in order, through one ToHostMany where the
// backend has it and through ToHost where it does not.
func TestDownload(t *testing.T) {
	plain := cpu.New(cpu.Config{})
	want := [][]float32{{1, 2, 3}, {}, {-4.5}, {7, 8}}
	var ts []backend.Tensor
	for _, w := range want {
		ts = append(ts, plain.FromHost(w, len(w)))
	}
	check := func(name string, got [][]float32) {
		t.Helper()
		if len(got) != len(want) {
			t.Fatalf("%s: %d results, want %d", name, len(got), len(want))
		}
		for i := range want {
			if !slices.Equal(got[i], want[i]) {
				t.Fatalf("%s: result %d is %v, want %v", name, i, got[i], want[i])
			}
		}
	}
	check("plain", backend.Download(plain, ts...))
	b := &batched{Backend: plain}
	check("batched", backend.Download(b, ts...))
	if b.batches != 1 || b.tensors != len(want) {
		t.Fatalf("%d batches of %d tensors, want 1 of %d", b.batches, b.tensors, len(want))
	}
}
