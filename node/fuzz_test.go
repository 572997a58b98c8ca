package node

import (
	"math"
	"testing"
)

// The core's own decoders of outside input: the transform and list strings
// of settings.

func FuzzParseTransform(f *testing.F) {
	f.Add("0 0 0 -0.5 0.5 -0.5 0.5")
	f.Add("1 2 3 0 0 0 1")
	f.Add("1e308 1 1 1e-300 0 0 0")
	f.Add("  4 5 6   0 0 1 0  ")
	f.Fuzz(func(t *testing.T, s string) {
		m, err := ParseTransform(s)
		if err != nil {
			return
		}
		// An accepted transform has a proper rotation: RᵀR = I.
		for i := range 3 {
			for j := range 3 {
				var d float64
				for k := range 3 {
					d += m[k][i] * m[k][j]
				}
				want := 0.0
				if i == j {
					want = 1
				}
				if math.Abs(d-want) > 1e-6 || math.IsNaN(d) {
					t.Fatalf("%q gave a rotation that is not orthonormal: %v", s, m)
				}
			}
		}
	})
}

func FuzzParseInts(f *testing.F) {
	f.Add("4 11 17 23")
	f.Add("[0, 2,3 ,4]")
	f.Add("99999999999999999999")
	f.Fuzz(func(t *testing.T, s string) {
		if v, err := parseInts(s); err == nil && len(v) > len(s) {
			t.Fatalf("%q gave %d numbers", s, len(v))
		}
	})
}
