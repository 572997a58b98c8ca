package cuda

import (
	"math"
	"testing"
)

// Every e4m3 code decodes to a value that encodes back to the same code,
// values between two codes round to the nearer (ties to the even code), and
// out-of-range values saturate.
func TestE4M3(t *testing.T) {
	var prev float32
	for b := 0; b < 0x7f; b++ {
		v := e4m3Value(uint8(b))
		if got := e4m3Bits(v); got != uint8(b) {
			t.Fatalf("code %#x = %g encodes as %#x", b, v, got)
		}
		if got := e4m3Bits(-v); b != 0 && got != uint8(b)|0x80 {
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
			if got := e4m3Bits(mid); got != want {
				t.Fatalf("midpoint %g of codes %#x and %#x encodes as %#x, want %#x", mid, b-1, b, got, want)
			}
			if got := e4m3Bits(prev + (v-prev)*0.26); got != uint8(b-1) {
				t.Fatalf("%g (near code %#x) encodes as %#x", prev+(v-prev)*0.26, b-1, got)
			}
		}
		prev = v
	}
	if v := e4m3Value(0x7e); v != 448 {
		t.Fatalf("largest code %g, want 448", v)
	}
	if v := e4m3Value(1); v != 0x1p-9 {
		t.Fatalf("smallest code %g, want 2^-9", v)
	}
	for _, x := range []float32{448, 464, 1e6, float32(math.Inf(1))} {
		if got := e4m3Bits(x); got != 0x7e {
			t.Errorf("%g encodes as %#x, want 0x7e (448)", x, got)
		}
		if got := e4m3Bits(-x); got != 0xfe {
			t.Errorf("%g encodes as %#x, want 0xfe (-448)", -x, got)
		}
	}
	if !math.IsNaN(float64(e4m3Value(e4m3Bits(float32(math.NaN()))))) {
		t.Error("NaN does not stay NaN")
	}
}

// The transposed V's key order is a permutation of each 16-key group, and
// the one the Hopper kernel's P fragments take: register element e of lane
// t holds keys 2t, 2t+1, 8+2t, 9+2t at positions 4t…4t+3.
func TestFP8KeyPos(t *testing.T) {
	seen := map[int]bool{}
	for c := range 16 {
		p := fp8KeyPos(c)
		if p < 0 || p >= 16 || seen[p] {
			t.Fatalf("key %d at position %d (taken or out of the group)", c, p)
		}
		seen[p] = true
	}
	for tg := range 4 {
		for e, key := range []int{2 * tg, 2*tg + 1, 8 + 2*tg, 9 + 2*tg} {
			if p := fp8KeyPos(key); p != 4*tg+e {
				t.Errorf("key %d at position %d, want %d", key, p, 4*tg+e)
			}
		}
	}
	if fp8Rows(999) != 1008 || fp8Rows(16) != 16 || fp8Rows(15) != 16 {
		t.Errorf("fp8Rows(999, 16, 15) = %d, %d, %d", fp8Rows(999), fp8Rows(16), fp8Rows(15))
	}
}
