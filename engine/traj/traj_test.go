package traj

import (
	"bytes"
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// rotAxis is the rotation by angle a about the unit axis u (Rodrigues).
func rotAxis(u [3]float64, a float64) [3][3]float64 {
	n := math.Sqrt(u[0]*u[0] + u[1]*u[1] + u[2]*u[2])
	x, y, z := u[0]/n, u[1]/n, u[2]/n
	c, s, t := math.Cos(a), math.Sin(a), 1-math.Cos(a)
	return [3][3]float64{
		{t*x*x + c, t*x*y - s*z, t*x*z + s*y},
		{t*x*y + s*z, t*y*y + c, t*y*z - s*x},
		{t*x*z - s*y, t*y*z + s*x, t*z*z + c},
	}
}

// spiral is a reference trajectory that moves in all three axes and turns, so
// that the alignment is well determined: n poses at 30 Hz from t0.
func spiral(n int, t0 float64) Trajectory {
	tr := make(Trajectory, n)
	for i := range n {
		a := float64(i) * 0.05
		tr[i] = Pose{
			Time: t0 + float64(i)/30,
			T:    [3]float64{2 * math.Cos(a), 2 * math.Sin(a), 0.3*a + 0.2*math.Sin(3*a)},
			R:    mulMat(rotAxis([3]float64{0, 0, 1}, a), rotAxis([3]float64{1, 0.5, 0}, 0.3*math.Sin(a))),
		}
	}
	return tr
}

// inverse of a similarity transform.
func (g Sim3) inverse() Sim3 {
	rt := transpose(g.R)
	t := mulVec(rt, g.T)
	return Sim3{S: 1 / g.S, R: rt, T: [3]float64{-t[0] / g.S, -t[1] / g.S, -t[2] / g.S}}
}

func maxAbsDiff(a, b [3][3]float64) float64 {
	var m float64
	for r := range 3 {
		for c := range 3 {
			m = max(m, math.Abs(a[r][c]-b[r][c]))
		}
	}
	return m
}

func TestSim3RecoveredExactly(t *testing.T) {
	ref := spiral(300, 1000)
	truth := Sim3{S: 0.37, R: rotAxis([3]float64{0.3, -1, 0.7}, 2.1), T: [3]float64{4, -1.5, 0.25}}
	// est lives in its own frame and scale: ref = truth(est). Its stamps are
	// jittered within the association tolerance.
	inv := truth.inverse()
	est := make(Trajectory, len(ref))
	for i, p := range ref {
		est[i] = inv.ApplyPose(p)
		est[i].Time += 0.004 * math.Sin(float64(i))
	}
	rep, err := Evaluate(est, ref, DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	if rep.Pairs != 300 {
		t.Fatalf("associated %d pairs, want 300", rep.Pairs)
	}
	if rep.ATE.RMSE > 1e-9 || rep.ATE.Max > 1e-9 {
		t.Errorf("ATE after Sim(3) = %+v, want ≈ 0", rep.ATE)
	}
	if rep.RPETrans.Max > 1e-9 || rep.RPERot.Max > 1e-6 {
		t.Errorf("RPE after Sim(3): trans %+v rot %+v, want ≈ 0", rep.RPETrans, rep.RPERot)
	}
	g := rep.Alignment
	if math.Abs(g.S-truth.S) > 1e-10 {
		t.Errorf("scale %v, want %v", g.S, truth.S)
	}
	if d := maxAbsDiff(g.R, truth.R); d > 1e-10 {
		t.Errorf("rotation off by %g:\n%v\nwant\n%v", d, g.R, truth.R)
	}
	if dist(g.T, truth.T) > 1e-9 {
		t.Errorf("translation %v, want %v", g.T, truth.T)
	}

	// SE(3) cannot undo the scale: a large error remains.
	opt := DefaultOptions()
	opt.Align = AlignSE3
	rep3, err := Evaluate(est, ref, opt)
	if err != nil {
		t.Fatal(err)
	}
	if rep3.ATE.RMSE < 0.5 {
		t.Errorf("ATE after SE(3) on a scaled estimate = %g, want large", rep3.ATE.RMSE)
	}
	if rep3.Alignment.S != 1 {
		t.Errorf("SE(3) alignment has scale %g", rep3.Alignment.S)
	}
}

func TestSE3RecoveredExactly(t *testing.T) {
	ref := spiral(120, 0)
	truth := Sim3{S: 1, R: rotAxis([3]float64{1, 1, 1}, -0.8), T: [3]float64{-3, 2, 1}}
	inv := truth.inverse()
	est := make(Trajectory, len(ref))
	for i, p := range ref {
		est[i] = inv.ApplyPose(p)
	}
	opt := DefaultOptions()
	opt.Align = AlignSE3
	rep, err := Evaluate(est, ref, opt)
	if err != nil {
		t.Fatal(err)
	}
	if rep.ATE.RMSE > 1e-9 || maxAbsDiff(rep.Alignment.R, truth.R) > 1e-10 || dist(rep.Alignment.T, truth.T) > 1e-9 {
		t.Errorf("SE(3) not recovered: ATE %g, alignment %+v", rep.ATE.RMSE, rep.Alignment)
	}
	// Without alignment the error is the displacement itself.
	opt.Align = AlignNone
	rep, err = Evaluate(est, ref, opt)
	if err != nil {
		t.Fatal(err)
	}
	var sq float64
	for i := range est {
		d := dist(est[i].T, ref[i].T)
		sq += d * d
	}
	if want := math.Sqrt(sq / float64(len(est))); math.Abs(rep.ATE.RMSE-want) > 1e-12 {
		t.Errorf("unaligned ATE %g, want %g", rep.ATE.RMSE, want)
	}
	// RPE is invariant to a rigid transform of the whole estimate.
	if rep.RPETrans.Max > 1e-9 || rep.RPERot.Max > 1e-6 {
		t.Errorf("RPE of a rigidly moved trajectory: %+v %+v, want ≈ 0", rep.RPETrans, rep.RPERot)
	}
}

// With isotropic Gaussian position noise of σ per axis, e² is σ²·χ²(3): the
// ATE RMSE tends to √3·σ (less the few degrees of freedom the alignment
// absorbs), and consecutive-pose RPE to √6·σ (two independent noises). The
// relative standard deviation of an RMSE over 3N squares is 1/√(6N) ≈ 0.9%
// for N = 2000, so 4% is a wide bound that still catches a wrong formula.
func TestKnownNoise(t *testing.T) {
	const n, sigma = 2000, 0.01
	rng := rand.New(rand.NewPCG(7, 11))
	ref := spiral(n, 50)
	est := make(Trajectory, n)
	for i, p := range ref {
		est[i] = p
		for k := range 3 {
			est[i].T[k] += sigma * rng.NormFloat64()
		}
	}
	for _, align := range []Alignment{AlignNone, AlignSE3, AlignSim3} {
		opt := DefaultOptions()
		opt.Align = align
		rep, err := Evaluate(est, ref, opt)
		if err != nil {
			t.Fatal(err)
		}
		dof := map[Alignment]float64{AlignNone: 0, AlignSE3: 6, AlignSim3: 7}[align]
		want := sigma * math.Sqrt(3*(1-dof/(3*n)))
		if rel := math.Abs(rep.ATE.RMSE-want) / want; rel > 0.04 {
			t.Errorf("%s: ATE RMSE %g, want %g ± 4%%", align, rep.ATE.RMSE, want)
		}
		if want := sigma * math.Sqrt(6); math.Abs(rep.RPETrans.RMSE-want)/want > 0.04 {
			t.Errorf("%s: RPE trans RMSE %g, want %g ± 4%%", align, rep.RPETrans.RMSE, want)
		}
		if rep.RPERot.Max > 1e-3 {
			t.Errorf("%s: RPE rotation %g° without rotation noise", align, rep.RPERot.Max)
		}
	}

	// Rotation noise about the world z axis, angle θ_i ~ N(0, σθ): the relative
	// rotation error is |θ_j − θ_i|, so its RMSE tends to √2·σθ (in degrees).
	const sigmaDeg = 0.5
	for i, p := range ref {
		est[i] = p
		est[i].R = mulMat(rotAxis([3]float64{0, 0, 1}, sigmaDeg*math.Pi/180*rng.NormFloat64()), p.R)
	}
	opt := DefaultOptions()
	opt.Align = AlignNone
	rep, err := Evaluate(est, ref, opt)
	if err != nil {
		t.Fatal(err)
	}
	if want := sigmaDeg * math.Sqrt2; math.Abs(rep.RPERot.RMSE-want)/want > 0.05 {
		t.Errorf("RPE rotation RMSE %g°, want %g° ± 5%%", rep.RPERot.RMSE, want)
	}
	if rep.ATE.Max != 0 {
		t.Errorf("ATE %g with exact positions", rep.ATE.Max)
	}
}

func TestRPEDelta(t *testing.T) {
	// A straight line at 1 m per pose with the estimate at 1.1 m per pose and
	// no alignment: every RPE over Δ poses is 0.1·Δ.
	var est, ref Trajectory
	id := Identity().R
	for i := range 10 {
		ref = append(ref, Pose{Time: float64(i), T: [3]float64{float64(i), 0, 0}, R: id})
		est = append(est, Pose{Time: float64(i), T: [3]float64{1.1 * float64(i), 0, 0}, R: id})
	}
	opt := DefaultOptions()
	opt.Align = AlignNone
	opt.Delta = 3
	rep, err := Evaluate(est, ref, opt)
	if err != nil {
		t.Fatal(err)
	}
	if rep.RPETrans.N != 7 || math.Abs(rep.RPETrans.Mean-0.3) > 1e-12 || rep.RPETrans.Std > 1e-12 {
		t.Errorf("RPE at Δ=3: %+v, want 7 errors of 0.3", rep.RPETrans)
	}
	// ATE: errors 0.1·i for i = 0..9.
	if math.Abs(rep.ATE.Mean-0.45) > 1e-12 || math.Abs(rep.ATE.Median-0.45) > 1e-12 || math.Abs(rep.ATE.Max-0.9) > 1e-12 {
		t.Errorf("ATE %+v, want mean 0.45 median 0.45 max 0.9", rep.ATE)
	}
	opt.Delta = 10
	if _, err := Evaluate(est, ref, opt); err == nil || !strings.Contains(err.Error(), "delta 10") {
		t.Errorf("Δ larger than the trajectory: err = %v", err)
	}
}

func TestSummarise(t *testing.T) {
	s := Summarise([]float64{3, 1, 4, 1, 5})
	want := Stats{N: 5, Mean: 2.8, Median: 3, Min: 1, Max: 5, RMSE: math.Sqrt(52.0 / 5), Std: 1.6}
	if s.N != want.N || math.Abs(s.Mean-want.Mean) > 1e-12 || s.Median != want.Median || s.Min != 1 || s.Max != 5 ||
		math.Abs(s.RMSE-want.RMSE) > 1e-12 || math.Abs(s.Std-want.Std) > 1e-12 {
		t.Errorf("Summarise = %+v, want %+v", s, want)
	}
	if s := Summarise([]float64{1, 2, 3, 10}); s.Median != 2.5 {
		t.Errorf("even median %g, want 2.5", s.Median)
	}
}

func TestAssociate(t *testing.T) {
	mk := func(ts ...float64) Trajectory {
		tr := make(Trajectory, len(ts))
		for i, x := range ts {
			tr[i] = Pose{Time: x}
		}
		return tr
	}
	// Closest candidates first, one-to-one: est 0.01 takes ref 0.009 (d=0.001)
	// before est 0 can (d=0.009); est 0 then has no partner. est 2 matches
	// 2.001, est 1 nothing (1.5 is too far), ref 0.012 is left over.
	pairs, err := Associate(mk(0, 0.01, 1, 2), mk(0.009, 0.012, 1.5, 2.001), 0.02, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := []Pair{{0, 1}, {1, 0}, {3, 3}}
	if len(pairs) != len(want) {
		t.Fatalf("pairs %v, want %v", pairs, want)
	}
	for i := range want {
		if pairs[i] != want[i] {
			t.Fatalf("pairs %v, want %v", pairs, want)
		}
	}
	// The offset is added to the estimate's stamps.
	pairs, err = Associate(mk(0, 1, 2), mk(10, 11, 12), 0.02, 10)
	if err != nil || len(pairs) != 3 {
		t.Fatalf("with offset: %v %v", pairs, err)
	}
	if _, err := Associate(mk(1), mk(1), 0, 0); err == nil {
		t.Error("zero max difference accepted")
	}
}

// Estimate at 30 Hz, reference at 100 Hz with a two-second gap and different
// extents: only stamps within 10 ms pair, each at most once.
func TestAssociateGapsAndLengths(t *testing.T) {
	ref := spiral(1, 0)[:0]
	for i := range 2000 { // 0..20 s
		ts := float64(i) / 100
		if ts >= 5 && ts < 7 {
			continue
		}
		ref = append(ref, Pose{Time: ts + 0.0003, T: [3]float64{math.Cos(ts), math.Sin(ts), 0.1 * ts}, R: Identity().R})
	}
	est := spiral(1, 0)[:0]
	for i := range 450 { // 0..15 s
		ts := 3 + float64(i)/30
		est = append(est, Pose{Time: ts, T: [3]float64{math.Cos(ts), math.Sin(ts), 0.1 * ts}, R: Identity().R})
	}
	pairs, err := Associate(est, ref, 0.01, 0)
	if err != nil {
		t.Fatal(err)
	}
	seenR := map[int]bool{}
	inGap := 0
	for _, p := range pairs {
		if d := math.Abs(est[p.Est].Time - ref[p.Ref].Time); d >= 0.01 {
			t.Fatalf("pair %v differs by %g s", p, d)
		}
		if seenR[p.Ref] {
			t.Fatalf("reference pose %d used twice", p.Ref)
		}
		seenR[p.Ref] = true
		if ts := est[p.Est].Time; ts > 5.01 && ts < 6.99 {
			inGap++
		}
	}
	if inGap != 0 {
		t.Errorf("%d estimated poses in the reference's gap were associated", inGap)
	}
	// 3..15 s at 30 Hz less the 2 s gap: 450 − 60 = 390 poses have a partner.
	if len(pairs) < 388 || len(pairs) > 391 {
		t.Errorf("%d pairs, want about 390", len(pairs))
	}
	rep, err := Evaluate(est, ref, Options{MaxDiff: 0.01, Align: AlignSim3, Delta: 1})
	if err != nil {
		t.Fatal(err)
	}
	// Pairs differ by up to 10 ms on a path moving at about 1 m/s.
	if rep.EstPoses != 450 || rep.RefPoses != 1800 || rep.Pairs != len(pairs) || rep.ATE.Max > 0.0101 {
		t.Errorf("est %d ref %d pairs %d ATE %+v", rep.EstPoses, rep.RefPoses, rep.Pairs, rep.ATE)
	}
}

func TestReadTUM(t *testing.T) {
	in := "# timestamp tx ty tz qx qy qz qw\n\n" +
		"2.0 1 2 3 0 0 0 2\n" + // unnormalised quaternion, out of order
		"  1.0,0,0,0,0,0,0.7071067811865476,0.7071067811865476\r\n" +
		"\t# indented comment\n" +
		"3.5\t-1\t-2\t-3\t0\t0\t0\t1\n"
	tr, err := ReadTUM(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if len(tr) != 3 || tr[0].Time != 1 || tr[1].Time != 2 || tr[2].Time != 3.5 {
		t.Fatalf("poses %+v", tr)
	}
	if tr[1].T != [3]float64{1, 2, 3} || tr[1].R != Identity().R {
		t.Errorf("pose at 2 s: %+v", tr[1])
	}
	// 90° about z maps x to y.
	if v := mulVec(tr[0].R, [3]float64{1, 0, 0}); dist(v, [3]float64{0, 1, 0}) > 1e-12 {
		t.Errorf("rotation maps x to %v", v)
	}
	var buf bytes.Buffer
	if err := WriteTUM(&buf, tr); err != nil {
		t.Fatal(err)
	}
	back, err := ReadTUM(&buf)
	if err != nil {
		t.Fatal(err)
	}
	for i := range tr {
		if back[i].Time != tr[i].Time || dist(back[i].T, tr[i].T) > 1e-6 || maxAbsDiff(back[i].R, tr[i].R) > 1e-7 {
			t.Errorf("round trip pose %d: %+v, want %+v", i, back[i], tr[i])
		}
	}
}

func TestReadTUMErrors(t *testing.T) {
	cases := []struct{ name, in, want string }{
		{"empty", "", "no poses"},
		{"only comments", "# a\n\n# b\n", "no poses"},
		{"too few fields", "0 1 2 3 0 0 0 1\n1 1 2 3 0 0 1\n", "line 2: expected 8 values"},
		{"too many fields", "0 1 2 3 0 0 0 1 9\n", "line 1: expected 8 values"},
		{"NaN", "0 1 2 3 0 0 0 1\n1 nan 2 3 0 0 0 1\n", "line 2: value 2 (\"nan\") is not a finite number"},
		{"Inf", "0 1 2 inf 0 0 0 1\n", "not a finite number"},
		{"word", "0 1 2 x 0 0 0 1\n", "line 1: value 4 (\"x\") is not a number"},
		{"zero quaternion", "0 1 2 3 0 0 0 0\n", "line 1: quaternion"},
		{"repeated stamp", "0 1 2 3 0 0 0 1\n0 1 2 3 0 0 0 1\n", "line 2: timestamp 0 repeats line 1"},
		{"long line", strings.Repeat("1", maxLineLen+10), "longer than"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := ReadTUM(strings.NewReader(c.in))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("err = %v, want it to contain %q", err, c.want)
			}
		})
	}
}

func TestDegenerateEvaluations(t *testing.T) {
	id := Identity().R
	line := func(n int, scale float64) Trajectory {
		var tr Trajectory
		for i := range n {
			tr = append(tr, Pose{Time: float64(i), T: [3]float64{scale * float64(i), 0, 0}, R: id})
		}
		return tr
	}
	same := func(n int) Trajectory {
		var tr Trajectory
		for i := range n {
			tr = append(tr, Pose{Time: float64(i), T: [3]float64{1, 2, 3}, R: id})
		}
		return tr
	}
	cases := []struct {
		name     string
		est, ref Trajectory
		align    Alignment
		want     string
	}{
		{"two poses", line(2, 1), line(2, 1), AlignSim3, "need at least 3"},
		{"no overlap in time", line(5, 1), func() Trajectory {
			tr := line(5, 1)
			for i := range tr {
				tr[i].Time += 100
			}
			return tr
		}(), AlignSim3, "only 0 of 5"},
		{"identical estimate", same(5), line(5, 1), AlignSim3, "estimated positions are all the same"},
		{"identical reference", line(5, 1), same(5), AlignSE3, "reference positions are all the same"},
		{"bad alignment", line(5, 1), line(5, 1), "affine", "sim3, se3 or none"},
		{"empty", nil, line(5, 1), AlignSim3, "needs poses"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			opt := DefaultOptions()
			opt.Align = c.align
			_, err := Evaluate(c.est, c.ref, opt)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("err = %v, want it to contain %q", err, c.want)
			}
		})
	}
	// A straight line is collinear: the rotation about it is free, so evo
	// refuses it, and so do we, for sim3 and se3; --align none still works.
	for _, a := range []Alignment{AlignSim3, AlignSE3} {
		opt := DefaultOptions()
		opt.Align = a
		_, err := Evaluate(line(6, 2), line(6, 1), opt)
		if !errors.Is(err, ErrDegenerate) || !strings.Contains(err.Error(), "the 6 associated positions lie on one line") {
			t.Errorf("collinear, %s: %v", a, err)
		}
	}
	opt := DefaultOptions()
	opt.Align = AlignNone
	rep, err := Evaluate(line(6, 1), line(6, 1), opt)
	if err != nil || rep.ATE.Max != 0 {
		t.Errorf("collinear, none: %v, %+v", err, rep)
	}
}

func FuzzReadTUM(f *testing.F) {
	f.Add("# c\n1 0 0 0 0 0 0 1\n2,1,1,1,0,0,1,0\n")
	f.Add("1 nan 0 0 0 0 0 1\n")
	f.Add("1e308 1e308 -1e308 0 0 0 0 1e-200\n")
	f.Add("\n\n\r\n  \t ")
	f.Fuzz(func(t *testing.T, in string) {
		tr, err := ReadTUM(strings.NewReader(in))
		if err != nil {
			return
		}
		for i, p := range tr {
			if i > 0 && !(tr[i-1].Time < p.Time) {
				t.Fatalf("not strictly increasing at %d", i)
			}
			for r := range 3 {
				if math.IsNaN(p.T[r]) || math.IsInf(p.T[r], 0) {
					t.Fatalf("non-finite position %v", p.T)
				}
			}
			// The rotation is orthonormal.
			if d := maxAbsDiff(mulMat(p.R, transpose(p.R)), Identity().R); d > 1e-9 {
				t.Fatalf("rotation not orthonormal (%g): %v", d, p.R)
			}
		}
	})
}

// A row cut short by a crash (no newline, does not parse) is ignored; a cut
// row in the middle of a file, or a bad row that ends with a newline, is
// still an error.
func TestReadTUMIgnoresTornLastLine(t *testing.T) {
	whole := "# timestamp tx ty tz qx qy qz qw\n1 0 0 0 0 0 0 1\n2 1 0 0 0 0 0 1\n"
	for _, tail := range []string{"3 2 0", "3 2 0 0 0 0 0.1", "3", "3 2 0 0 0 0 0 1e"} {
		tr, err := ReadTUM(strings.NewReader(whole + tail))
		if err != nil || len(tr) != 2 {
			t.Errorf("tail %q: %d poses, %v", tail, len(tr), err)
		}
	}
	tr, err := ReadTUM(strings.NewReader(whole + "3 2 0 0 0 0 0 1"))
	if err != nil || len(tr) != 3 {
		t.Errorf("a whole last line without newline: %d poses, %v", len(tr), err)
	}
	for _, bad := range []string{whole + "3 2 0\n", "1 0 0\n" + whole} {
		if _, err := ReadTUM(strings.NewReader(bad)); err == nil || !strings.Contains(err.Error(), "expected 8 values") {
			t.Errorf("%q: %v", bad, err)
		}
	}
}
