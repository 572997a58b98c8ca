package node

import (
	"testing"
)

// The core's own decoder of outside input: the list strings of settings
// (engine/geom fuzzes the transform strings).

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
