package e4m3

import (
	"math"
	"testing"
)

// Every e4m3 code decodes to a value that encodes back to the same code,
// values between two codes round to the nearer (ties to the even code), and
// out-of-range values saturate.
func TestCodes(t *testing.T) {
	var prev float32
	for b := 0; b < 0x7f; b++ {
		v := Value(uint8(b))
		if got := Bits(v); got != uint8(b) {
			t.Fatalf("code %#x = %g encodes as %#x", b, v, got)
		}
		if got := Bits(-v); b != 0 && got != uint8(b)|0x80 {
			t.Fatalf("code -%#x = %g encodes as %#x", b, -v, got)
		}
		if b > 0 {
			if v <= prev {
				t.Fatalf("code %#x = %g not above the code before (%g)", b, v, prev)
			}
			mid := (prev + v) / 2
			want := uint8(b)
			if (b-1)%2 == 0 {
				want = uint8(b - 1) // a tie goes to the even code
			}
			if got := Bits(mid); got != want {
				t.Fatalf("midpoint %g of codes %#x and %#x encodes as %#x, want %#x", mid, b-1, b, got, want)
			}
			if got := Bits(prev + (v-prev)*0.26); got != uint8(b-1) {
				t.Fatalf("%g (near code %#x) encodes as %#x", prev+(v-prev)*0.26, b-1, got)
			}
		}
		prev = v
	}
	if v := Value(0x7e); v != 448 {
		t.Fatalf("largest code %g, want 448", v)
	}
	if v := Value(1); v != 0x1p-9 {
		t.Fatalf("smallest code %g, want 2^-9", v)
	}
	for _, x := range []float32{448, 464, 1e6, float32(math.Inf(1))} {
		if got := Bits(x); got != 0x7e {
			t.Errorf("%g encodes as %#x, want 0x7e (448)", x, got)
		}
		if got := Bits(-x); got != 0xfe {
			t.Errorf("%g encodes as %#x, want 0xfe (-448)", -x, got)
		}
	}
	if !math.IsNaN(float64(Value(Bits(float32(math.NaN()))))) {
		t.Error("NaN does not stay NaN")
	}
}

// Scale is a power of two with the first write's largest magnitude at
// 448/32 to 448/16 of it, and Scales takes each head's, ignoring NaN.
func TestScale(t *testing.T) {
	for _, a := range []float32{1e-3, 0.7, 1, 3.5, 28, 448, 1e5} {
		s := Scale(a)
		m, _ := math.Frexp(float64(s))
		if m != 0.5 {
			t.Fatalf("Scale(%g) = %g, not a power of two", a, s)
		}
		if r := float64(a / s); r > 448.0/16 || r <= 448.0/32 {
			t.Errorf("Scale(%g) = %g: the largest value at %g of the scale, want (14, 28]", a, s, r)
		}
		if got := Round(a, s); got != a && math.Abs(float64(got-a)) > float64(a)/16 {
			t.Errorf("Round(%g, %g) = %g, more than half a quantum off", a, s, got)
		}
	}
	rows := []float32{1, -3, float32(math.NaN()), 0.5, 2, -20, 0, 7}
	got := Scales(rows, 2, 2) // heads {1,-3,2,-20} and {NaN,0.5,0,7}
	if got[0] != Scale(20) || got[1] != Scale(7) {
		t.Errorf("Scales = %v, want [%g %g]", got, Scale(20), Scale(7))
	}
}
