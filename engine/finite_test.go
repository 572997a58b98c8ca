package engine

import (
	"math"
	"testing"
)

func TestFirstNonFinite(t *testing.T) {
	bads := []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1)), math.Float32frombits(0xff800001)}
	// The largest finite values, subnormals and zeros of both signs are finite.
	fill := func(p []float32) {
		vals := []float32{math.MaxFloat32, -math.MaxFloat32, math.SmallestNonzeroFloat32, 0, float32(math.Copysign(0, -1)), 1, -0.5}
		for i := range p {
			p[i] = vals[i%len(vals)]
		}
	}
	for n := 0; n < 40; n++ {
		p := make([]float32, n)
		fill(p)
		if got := firstNonFinite(p); got != -1 {
			t.Fatalf("n=%d: finite values reported at %d", n, got)
		}
		for at := range n {
			for _, b := range bads {
				fill(p)
				p[at] = b
				if got := firstNonFinite(p); got != at {
					t.Fatalf("n=%d: %v at %d found at %d", n, b, at, got)
				}
			}
		}
	}
	// A frame large enough to be split into parts: a bad value in each part,
	// at its edges, and the first of two.
	p := make([]float32, 3*518*378)
	for _, at := range []int{0, 1, len(p)/4 - 1, len(p) / 4, len(p) / 2, len(p) - 2, len(p) - 1} {
		fill(p)
		p[at] = float32(math.NaN())
		if got := firstNonFinite(p); got != at {
			t.Fatalf("NaN at %d of %d found at %d", at, len(p), got)
		}
	}
	fill(p)
	p[len(p)-7], p[1000] = float32(math.Inf(1)), float32(math.NaN())
	if got := firstNonFinite(p); got != 1000 {
		t.Fatalf("two bad values: found %d, want 1000", got)
	}
}

// BenchmarkFirstNonFinite: one 518×378 frame's pixels, all finite (every
// frame pays this before its upload), against the plain loop it replaced.
func BenchmarkFirstNonFinite(b *testing.B) {
	p := make([]float32, 3*518*378)
	for i := range p {
		p[i] = float32(i%255) / 255
	}
	b.Run("loop", func(b *testing.B) {
		for b.Loop() {
			for _, v := range p {
				if math.Float32bits(v)&expBits == expBits {
					b.Fatal("non-finite")
				}
			}
		}
	})
	b.Run("firstNonFinite", func(b *testing.B) {
		for b.Loop() {
			if firstNonFinite(p) >= 0 {
				b.Fatal("non-finite")
			}
		}
	})
}
