//go:build cuda

package cuda

import (
	"math/rand/v2"
	"testing"

	"github.com/lingbotmap/lingbotmap/engine/backend"
)

// The upload ring queues copies without waiting and hands its slots out
// again: each upload must land whole even when the caller overwrites its
// slice at once and more uploads than slots are in flight between kernels
// that read them; and a batch download must return every tensor exactly,
// through the staging buffer and, above its limit, one by one.
func TestUploadRingAndBatchDownload(t *testing.T) {
	g := fx.fp32
	rng := rand.New(rand.NewPCG(31, 7))
	randn := func(n int) []float32 {
		s := make([]float32, n)
		for i := range s {
			s[i] = float32(rng.NormFloat64())
		}
		return s
	}
	// Sizes around the slots' first size, one above upMax (the
	// synchronous path) and an empty one.
	sizes := []int{1, 257, 1000, upMin/4 + 3, 300_000, 0, upMax/4 + 1, 1 << 20, 5, 777_777, 64}
	var want [][]float32
	var ts, sums []backend.Tensor
	var sumWant [][]float32
	for i, n := range sizes {
		host := randn(n)
		want = append(want, append([]float32(nil), host...))
		ts = append(ts, g.FromHost(host, n))
		for j := range host { // the caller's slice is free again at once
			host[j] = float32(-1e30)
		}
		if n == 0 {
			continue
		}
		// A kernel between the uploads reads this one: x + x.
		sums = append(sums, g.Add(ts[i], ts[i]))
		s := make([]float32, n)
		for j, v := range want[i] {
			s[j] = v + v
		}
		sumWant = append(sumWant, s)
	}
	check := func(name string, got, want [][]float32) {
		t.Helper()
		if len(got) != len(want) {
			t.Fatalf("%s: %d results for %d tensors", name, len(got), len(want))
		}
		for i := range want {
			if len(got[i]) != len(want[i]) {
				t.Fatalf("%s %d: %d values, want %d", name, i, len(got[i]), len(want[i]))
			}
			for j := range want[i] {
				if got[i][j] != want[i][j] {
					t.Fatalf("%s %d: value %d is %g, want %g", name, i, j, got[i][j], want[i][j])
				}
			}
		}
	}
	check("upload", g.(backend.BatchDownloader).ToHostMany(ts...), want)
	check("kernel output", backend.Download(g, sums...), sumWant)
	for i, x := range ts {
		check("single", [][]float32{g.ToHost(x)}, want[i:i+1])
	}
	// Above the staging buffer's limit the batch goes one by one.
	big := []backend.Tensor{ts[6], ts[6], ts[6], ts[6], ts[6]}
	bigWant := [][]float32{want[6], want[6], want[6], want[6], want[6]}
	if 5*int64(len(want[6]))*4 <= stagingMax {
		t.Fatalf("the batch of %d bytes does not exceed stagingMax", 5*len(want[6])*4)
	}
	check("large batch", g.(backend.BatchDownloader).ToHostMany(big...), bigWant)
	for _, x := range append(ts, sums...) {
		g.Free(x)
	}
	if err := g.Err(); err != nil {
		t.Fatal(err)
	}
}
