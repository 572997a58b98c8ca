package traj

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
)

// tumLines writes n poses at the given decimal stamps (as strings, like a
// file) on a non-degenerate curve.
func tumLines(stamps []string) string {
	var b strings.Builder
	for i, s := range stamps {
		a := float64(i) * 0.3
		fmt.Fprintf(&b, "%s %.6f %.6f %.6f 0 0 0 1\n", s, math.Cos(a), math.Sin(a), 0.1*float64(i))
	}
	return b.String()
}

func mustRead(t *testing.T, s string) Trajectory {
	t.Helper()
	tr, err := ReadTUM(strings.NewReader(s))
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// Exact timestamp matches are found whatever --max-diff is: with stamps
// near 1.7e9 s (float64 spacing 2.4e-7 s) and max-diff 1e-9 s, all 50 pairs
// of identical stamps associate, as TUM's associate.py and evo find.
func TestAssociateExactMatchesBelowResolution(t *testing.T) {
	var ref, est, early, nextMicro []string
	for i := range 50 {
		us := 1_700_000_000_000_000 + int64(i)*33_333 // microseconds
		ref = append(ref, fmt.Sprintf("%d.%06d", us/1e6, us%1e6))
		est = append(est, fmt.Sprintf("%d.%06d", us/1e6, us%1e6))
		e := us - 100_000 // 0.1 s earlier, for --offset 0.1
		early = append(early, fmt.Sprintf("%d.%06d", e/1e6, e%1e6))
		n := us + 1
		nextMicro = append(nextMicro, fmt.Sprintf("%d.%06d", n/1e6, n%1e6))
	}
	r := mustRead(t, tumLines(ref))
	for _, c := range []struct {
		name    string
		est     []string
		maxDiff float64
		offset  float64
		want    int
	}{
		{"identical stamps, max-diff 1e-9", est, 1e-9, 0, 50},
		{"identical stamps, max-diff 1e-12", est, 1e-12, 0, 50},
		{"identical stamps, default max-diff", est, 0.02, 0, 50},
		{"offset 0.1 s makes them equal, max-diff 1e-9", early, 1e-9, 0.1, 50},
		// One microsecond apart is a real difference, larger than 1e-9 s.
		{"1 µs apart, max-diff 1e-9", nextMicro, 1e-9, 0, 0},
		{"1 µs apart, max-diff 2e-6", nextMicro, 2e-6, 0, 50},
	} {
		pairs, err := Associate(mustRead(t, tumLines(c.est)), r, c.maxDiff, c.offset)
		if err != nil {
			t.Fatal(err)
		}
		if len(pairs) != c.want {
			t.Errorf("%s: %d pairs, want %d", c.name, len(pairs), c.want)
		}
		for i, p := range pairs {
			if p.Est != i || p.Ref != i {
				t.Errorf("%s: pair %d is %+v", c.name, i, p)
				break
			}
		}
	}
	// And the evaluation with it is exact.
	opt := DefaultOptions()
	opt.MaxDiff = 1e-9
	rep, err := Evaluate(mustRead(t, tumLines(est)), r, opt)
	if err != nil || rep.Pairs != 50 || rep.ATE.Max > 1e-9 {
		t.Errorf("evaluate: %v %+v", err, rep)
	}
}

func TestStampResolution(t *testing.T) {
	if r := stampResolution(1.7e9, 0); r < 2*2.38e-7 || r > 5e-7 {
		t.Errorf("resolution at 1.7e9 s: %g", r)
	}
	if r := stampResolution(10, 0.5); r > 1e-14 {
		t.Errorf("resolution at 10 s: %g", r)
	}
}

// Degenerate point sets are refused as evo does, for both alignments;
// a planar set (rank 2) is not degenerate.
func TestUmeyamaDegenerate(t *testing.T) {
	line := func(n int, dir [3]float64) [][3]float64 {
		var out [][3]float64
		for i := range n {
			f := float64(i) - 1.5
			out = append(out, [3]float64{1 + f*dir[0], -2 + f*dir[1], 0.5 + f*dir[2]})
		}
		return out
	}
	// A line in a general direction, at a large offset (UTM-like).
	far := line(40, [3]float64{0.3, -0.7, 0.2})
	for i := range far {
		far[i][0] += 4e5
		far[i][1] += 5e6
	}
	for _, c := range []struct {
		name     string
		src, dst [][3]float64
	}{
		{"collinear both", line(10, [3]float64{1, 2, 3}), line(10, [3]float64{1, 2, 3})},
		{"collinear estimate only", line(10, [3]float64{1, 0, 0}), [][3]float64{{0, 0, 0}, {1, 0, 0}, {0, 1, 0}, {0, 0, 1}, {1, 1, 0}, {1, 0, 1}, {0, 1, 1}, {1, 1, 1}, {2, 0, 0}, {0, 2, 0}}},
		{"collinear far away", far, far},
		{"two points", line(2, [3]float64{1, 0, 0}), line(2, [3]float64{0, 1, 0})},
		{"one point repeated", [][3]float64{{1, 1, 1}, {1, 1, 1}, {1, 1, 1}}, line(3, [3]float64{1, 0, 0})},
	} {
		for _, scale := range []bool{true, false} {
			_, err := Umeyama(c.src, c.dst, scale)
			if !errors.Is(err, ErrDegenerate) {
				t.Errorf("%s (scale %v): %v, want ErrDegenerate", c.name, scale, err)
			}
		}
	}
	// Planar (a circle in z = 0): rank 2, aligns exactly.
	var circle [][3]float64
	for i := range 12 {
		a := float64(i) * math.Pi / 6
		circle = append(circle, [3]float64{math.Cos(a), math.Sin(a), 0})
	}
	g, err := Umeyama(circle, circle, true)
	if err != nil || math.Abs(g.S-1) > 1e-12 {
		t.Errorf("planar: %v, %+v", err, g)
	}
	// Nearly straight but really 3-D (1 cm sideways over 100 m) is accepted.
	var drive [][3]float64
	for i := range 100 {
		drive = append(drive, [3]float64{float64(i), 0.01 * math.Sin(float64(i)), 0.01 * math.Cos(float64(i)*0.7)})
	}
	if _, err := Umeyama(drive, drive, true); err != nil {
		t.Errorf("near-straight drive: %v", err)
	}
}
