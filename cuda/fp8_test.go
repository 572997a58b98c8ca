package cuda

import "testing"

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
