package cpu

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/lingbotmap/lingbotmap/engine/backend"
	"github.com/lingbotmap/lingbotmap/engine/backend/e4m3"
)

// The fp8 store rounds every written value to e4m3 at its layer's per-head
// scale, which the layer's first write sets (16 times its largest value
// fits); restoring into a fresh store takes the scales from the values.
func TestFP8KVStore(t *testing.T) {
	b := New(Config{Threads: 2, FP8KV: true})
	spec := backend.KVSpec{Layers: 2, Pages: 3, PageSize: 5, Heads: 2, HeadDim: 4}
	s, err := b.NewKVStore(spec)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	ld := spec.Heads * spec.HeadDim
	rows := func(n int, scale float64) []float32 {
		x := make([]float32, n*ld)
		for i := range x {
			x[i] = float32(rng.NormFloat64() * scale)
			if i%ld >= spec.HeadDim {
				x[i] *= 10 // head 1 is ten times larger: its own scale
			}
		}
		return x
	}
	k0, v0 := rows(5, 1), rows(5, 0.1)
	b.WriteKV(s, 1, 2, 0, b.FromHost(k0, 5, ld), b.FromHost(v0, 5, ld), 0, 5)
	// A later write up to 16 times larger still fits; beyond 32 times (the
	// scale is a power of two), it saturates.
	k1, v1 := rows(2, 1), rows(2, 0.1)
	k1[0] = 64 * float32(maxAbs(headOf(k0, 0, spec.HeadDim, ld)))
	b.WriteKV(s, 1, 0, 3, b.FromHost(k1, 2, ld), b.FromHost(v1, 2, ld), 0, 2)

	sk := append(e4m3.Scales(k0, spec.Heads, spec.HeadDim), e4m3.Scales(v0, spec.Heads, spec.HeadDim)...)
	if sk[1] < 8*sk[0] {
		t.Fatalf("scales %v: head 1, ten times larger, should have a scale 8 or 16 times head 0's", sk)
	}
	k := make([]float32, 2*5*ld)
	v := make([]float32, 2*5*ld)
	snap := s.(backend.KVSnapshotter)
	if err := snap.ExportKV(1, []int32{2, 0}, k, v); err != nil {
		t.Fatal(err)
	}
	for j := range k0 {
		h := j % ld / spec.HeadDim
		if want := e4m3.Round(k0[j], sk[h]); k[j] != want {
			t.Fatalf("K element %d: %g stored as %g, want %g", j, k0[j], k[j], want)
		}
		if want := e4m3.Round(v0[j], sk[spec.Heads+h]); v[j] != want {
			t.Fatalf("V element %d: %g stored as %g, want %g", j, v0[j], v[j], want)
		}
		if d := math.Abs(float64(k[j] - k0[j])); d > math.Abs(float64(k0[j]))/16+float64(sk[h])/1024 {
			t.Fatalf("K element %d: %g stored as %g, more than half a quantum off", j, k0[j], k[j])
		}
	}
	if got, want := k[5*ld+3*ld], e4m3.Max*sk[0]; got != want {
		t.Errorf("a value 64 times the first write's: %g, want the saturated %g", got, want)
	}
	// Restored into the same store: unchanged. Into a fresh store: the
	// scales come from the values, here the same ones up to the saturated
	// value's head, so head 1 is unchanged.
	if err := snap.ImportKV(1, []int32{2, 0}, k, v); err != nil {
		t.Fatal(err)
	}
	k2 := make([]float32, len(k))
	v2 := make([]float32, len(v))
	if err := snap.ExportKV(1, []int32{2, 0}, k2, v2); err != nil {
		t.Fatal(err)
	}
	for j := range k {
		if k2[j] != k[j] || v2[j] != v[j] {
			t.Fatalf("re-imported element %d: %g, %g; want %g, %g", j, k2[j], v2[j], k[j], v[j])
		}
	}
	fresh, err := b.NewKVStore(spec)
	if err != nil {
		t.Fatal(err)
	}
	if err := fresh.(backend.KVSnapshotter).ImportKV(1, []int32{2, 0}, k, v); err != nil {
		t.Fatal(err)
	}
	if err := fresh.(backend.KVSnapshotter).ExportKV(1, []int32{2, 0}, k2, v2); err != nil {
		t.Fatal(err)
	}
	for j := range k {
		if d := math.Abs(float64(k2[j] - k[j])); d > math.Abs(float64(k[j]))/16+float64(e4m3.Max*sk[0])/1024 {
			t.Fatalf("restored element %d: %g, want %g within e4m3's rounding", j, k2[j], k[j])
		}
	}
	// After a Release (a reset) the pages read as zeros and the next first
	// write sets new scales: the value 64 times the old first write's is
	// now the first write's largest, and kept to e4m3's rounding.
	if err := s.(backend.KVReleaser).Release(); err != nil {
		t.Fatal(err)
	}
	if err := snap.ExportKV(1, []int32{2, 0}, k2, v2); err != nil {
		t.Fatal(err)
	}
	for j := range k2 {
		if k2[j] != 0 || v2[j] != 0 {
			t.Fatalf("released store: element %d reads %g, %g, want zeros", j, k2[j], v2[j])
		}
	}
	b.WriteKV(s, 1, 0, 3, b.FromHost(k1, 2, ld), b.FromHost(v1, 2, ld), 0, 2)
	if err := snap.ExportKV(1, []int32{0}, k2[:5*ld], v2[:5*ld]); err != nil {
		t.Fatal(err)
	}
	if got := k2[3*ld]; math.Abs(float64(got-k1[0])) > math.Abs(float64(k1[0]))/16 {
		t.Errorf("after a release, the first write's largest value %g is stored as %g", k1[0], got)
	}
	// The fp32 store keeps values as written.
	plain, err := New(Config{Threads: 2}).NewKVStore(spec)
	if err != nil {
		t.Fatal(err)
	}
	if plain.(*kvStore).fp8 {
		t.Error("a store without FP8KV rounds")
	}
}

func maxAbs(x []float32) float64 {
	m := 0.0
	for _, v := range x {
		m = max(m, math.Abs(float64(v)))
	}
	return m
}

// headOf is head h's values of rows of ld values.
func headOf(x []float32, h, d, ld int) []float32 {
	var out []float32
	for r := 0; r < len(x)/ld; r++ {
		out = append(out, x[r*ld+h*d:r*ld+(h+1)*d]...)
	}
	return out
}
