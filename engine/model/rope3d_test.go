package model

import (
	"math"
	"testing"
)

// TestRope3DTables checks the cached-grid tables against the position rule
// written out per element, across grid changes (the cache must follow them).
func TestRope3DTables(t *testing.T) {
	r := newRope3D()
	for _, c := range []struct{ f0, frames, special, gh, gw int }{
		{0, 1, 6, 27, 37}, {17, 3, 6, 27, 37}, {5, 2, 5, 4, 6}, {1000, 1, 6, 27, 37},
	} {
		cos, sin := r.tables(c.f0, c.frames, c.special, c.gh, c.gw)
		p := c.special + c.gh*c.gw
		half := len(r.tFreq) + len(r.hFreq) + len(r.wFreq)
		if len(cos) != c.frames*p*half || len(sin) != len(cos) {
			t.Fatalf("%+v: %d values, want %d", c, len(cos), c.frames*p*half)
		}
		for f := 0; f < c.frames; f++ {
			for tok := 0; tok < p; tok++ {
				hp, wp := tok, tok
				if tok >= c.special {
					hp, wp = c.special+(tok-c.special)/c.gw, c.special+(tok-c.special)%c.gw
				}
				var angles []float64
				for _, w := range r.tFreq {
					angles = append(angles, float64(c.f0+f)*w)
				}
				for _, w := range r.hFreq {
					angles = append(angles, float64(hp)*w)
				}
				for _, w := range r.wFreq {
					angles = append(angles, float64(wp)*w)
				}
				row := (f*p + tok) * half
				for m, a := range angles {
					if cos[row+m] != float32(math.Cos(a)) || sin[row+m] != float32(math.Sin(a)) {
						t.Fatalf("%+v frame %d token %d column %d: (%g, %g), want angle %g", c, f, tok, m, cos[row+m], sin[row+m], a)
					}
				}
			}
		}
	}
}
