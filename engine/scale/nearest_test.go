package scale

import (
	"testing"
	"time"
)

func TestNearest(t *testing.T) {
	t0 := time.Unix(1700000000, 0)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	items := []time.Time{ms(0), ms(40), ms(60), ms(100), ms(140)}
	id := func(s time.Time) time.Time { return s }
	for _, c := range []struct {
		at, tol, want int
	}{
		{50, 20, 1},  // 40 and 60 equally near: the first
		{55, 20, 2},  // 60 is nearer
		{100, 0, 3},  // exact, no tolerance
		{120, 20, 3}, // 100 and 140 at exactly tol: the first
		{120, 19, -1},
		{-30, 30, 0}, // before every item
		{300, 50, -1},
	} {
		if got := Nearest(items, id, ms(c.at), time.Duration(c.tol)*time.Millisecond); got != c.want {
			t.Errorf("Nearest at %d ms, tol %d ms: %d, want %d", c.at, c.tol, got, c.want)
		}
	}
	if got := Nearest(nil, id, t0, time.Second); got != -1 {
		t.Errorf("Nearest of none: %d", got)
	}
}
