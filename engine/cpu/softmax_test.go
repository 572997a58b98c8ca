package cpu

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

const (
	// expRelBound is the promised relative error of each exp(x − m) against
	// float64 math.Exp, for results in float32's normal range.
	expRelBound = 3e-7
	// expSumBound adds the float32 pair sums of the assembly (2⁻²⁴).
	expSumBound = expRelBound + 0x1p-24
	// expEdge is how close to expLo or expHi d may be for the result to be
	// either side's: the assembly compares float32(x − m), the Go code x − m.
	expEdge = 1e-4
)

type expImpl struct {
	name string
	fn   func(x []float32, m float32) float64
}

// expImpls returns the implementations under test: the dispatch that attend
// uses, each vector kernel this CPU runs (its tail done by the Go code), and
// the Go code alone.
func expImpls(t testing.TB) []expImpl {
	impls := []expImpl{{"dispatch", expSubSum}, {"go", expSubSumGo}}
	for _, k := range softmaxKernels() {
		if !k.ok {
			t.Logf("kernel %s: this CPU cannot run it, not tested", k.name)
			continue
		}
		impls = append(impls, expImpl{k.name, func(x []float32, m float32) float64 {
			sum, done := k.expSubSum(x, m)
			return sum + expSubSumGo(x[done:], m)
		}})
	}
	return impls
}

// checkExp says what is wrong with got as exp(x − m), or returns nil; the
// relative error of an ordinary result goes to *worst.
func checkExp(x, m, got float32, worst *float64) error {
	d := float64(x) - float64(m)
	g := float64(got)
	want := math.Exp(d)
	switch {
	case math.IsNaN(d):
		if !math.IsNaN(g) {
			return fmt.Errorf("exp(%g − %g) = %g, want NaN", x, m, got)
		}
		return nil
	case d < expLo-expEdge:
		if got != 0 {
			return fmt.Errorf("exp(%g − %g) = %g, want 0 (flushed below %g)", x, m, got, expLo)
		}
		return nil
	case d > expHi+expEdge:
		if !math.IsInf(g, 1) {
			return fmt.Errorf("exp(%g − %g) = %g, want +Inf (above %g)", x, m, got, expHi)
		}
		return nil
	case d < expLo+expEdge && got == 0, d > expHi-expEdge && math.IsInf(g, 1):
		return nil
	}
	rel := math.Abs(g-want) / want
	*worst = max(*worst, rel)
	if !(rel <= expRelBound) {
		return fmt.Errorf("exp(%g − %g) = %g, want %g: relative error %.3g > %g", x, m, got, want, rel, expRelBound)
	}
	return nil
}

// checkExpRow runs fn on a copy of x and checks every value and the sum.
func checkExpRow(t *testing.T, fn func([]float32, float32) float64, x []float32, m float32, worst, worstSum *float64) {
	t.Helper()
	// Sixteen sentinels after the row catch a vector store past its end.
	buf := append(slices.Clone(x), slices.Repeat([]float32{-7}, 16)...)
	got := buf[:len(x):len(x)]
	sum := fn(got, m)
	for i, v := range buf[len(x):] {
		if v != -7 {
			t.Fatalf("len %d: element %d past the end was overwritten with %g", len(x), i, v)
		}
	}
	faults := 0
	var ref float64
	nan, inf := false, false
	for i := range x {
		if err := checkExp(x[i], m, got[i], worst); err != nil {
			if faults++; faults <= 5 {
				t.Errorf("len %d, element %d: %v", len(x), i, err)
			}
		}
		nan = nan || math.IsNaN(float64(got[i]))
		inf = inf || math.IsInf(float64(got[i]), 1)
		if d := float64(x[i]) - float64(m); d >= expLo {
			ref += math.Exp(d)
		}
	}
	switch {
	case nan:
		if !math.IsNaN(sum) {
			t.Errorf("len %d: sum %g, want NaN (a value is NaN)", len(x), sum)
		}
	case inf:
		if !math.IsInf(sum, 1) {
			t.Errorf("len %d: sum %g, want +Inf (a value is +Inf)", len(x), sum)
		}
	default:
		// Flushed values are each below the smallest normal float32.
		tol := expSumBound*ref + float64(len(x))*0x1p-126
		if !(math.Abs(sum-ref) <= tol) {
			t.Errorf("len %d: sum %.9g, want %.9g ± %.3g", len(x), sum, ref, tol)
		}
		if ref > 0 {
			*worstSum = max(*worstSum, math.Abs(sum-ref)/ref)
		}
	}
}

// softmaxRow returns n values x = top − span·u, u uniform in [0, 1).
func softmaxRow(rng *rand.Rand, n int, top, span float64) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(top - span*rng.Float64())
	}
	return x
}

func expLengths() []int {
	var ns []int
	for n := 0; n <= 70; n++ {
		ns = append(ns, n)
	}
	return append(ns, 1000, 1023, 1024, 4097)
}

// TestExpSubSumRandomRows checks every value and the sum against math.Exp on
// rows of many lengths, with d = x − m over [−104, 0] as attention has it
// (m the row maximum, or a given m above it) and over (0, 88].
func TestExpSubSumRandomRows(t *testing.T) {
	for _, impl := range expImpls(t) {
		t.Run(impl.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, 2))
			var worst, worstSum float64
			for _, n := range expLengths() {
				for _, top := range []float64{0, 3.7, -20, 1000} {
					x := softmaxRow(rng, n, top, 104)
					checkExpRow(t, impl.fn, x, rowMax(x), &worst, &worstSum)
					checkExpRow(t, impl.fn, x, float32(top), &worst, &worstSum)
					// Positive arguments, not used by attend.
					x = softmaxRow(rng, n, top+88, 88)
					checkExpRow(t, impl.fn, x, float32(top), &worst, &worstSum)
				}
			}
			t.Logf("%s: worst relative error %.3g per value, %.3g on sums", impl.name, worst, worstSum)
		})
	}
}

// TestExpSubSumEdges places the edge arguments at every lane of the vector
// kernels and in the tails, with m = 0 and with m = 5.5.
func TestExpSubSumEdges(t *testing.T) {
	inf := math.Inf(1)
	edges := []struct {
		d    float64
		want float64 // NaN: only within the bound of math.Exp
	}{
		{0, 1}, {-1e-30, 1}, {-1, math.NaN()}, {-87, math.NaN()}, {-88, 0},
		{-104, 0}, {-200, 0}, {-inf, 0}, {1, math.NaN()}, {88, math.NaN()},
		{89, inf}, {inf, inf}, {math.NaN(), math.NaN()},
	}
	for _, impl := range expImpls(t) {
		for _, m := range []float32{0, 5.5} {
			var x []float32
			// 17 rounds of 13: each edge in every lane of 8 and of 16 (13 is
			// odd) and in the tails (221 = 27·8 + 5 = 13·16 + 13).
			for range 17 {
				for _, e := range edges {
					x = append(x, float32(float64(m)+e.d))
				}
			}
			got := slices.Clone(x)
			impl.fn(got, m)
			var worst float64
			for i := range x {
				e := edges[i%len(edges)]
				if err := checkExp(x[i], m, got[i], &worst); err != nil {
					t.Errorf("%s, m %g, element %d: %v", impl.name, m, i, err)
				}
				if !math.IsNaN(e.want) && float64(got[i]) != e.want {
					t.Errorf("%s, m %g, element %d: exp(%g) = %g, want exactly %g", impl.name, m, i, e.d, got[i], e.want)
				}
			}
			var wsum float64
			checkExpRow(t, impl.fn, x[:len(edges)-1], m, &worst, &wsum) // without NaN: sum is +Inf
		}
	}
}

// TestExpSubSumAsmMatchesGo compares each vector kernel alone with the Go
// code on the same rows: each value and the sums within the bound.
func TestExpSubSumAsmMatchesGo(t *testing.T) {
	for _, k := range softmaxKernels() {
		t.Run(k.name, func(t *testing.T) {
			if !k.ok {
				t.Skipf("this CPU cannot run the %s kernel", k.name)
			}
			rng := rand.New(rand.NewPCG(3, 4))
			worst := 0.0
			for _, n := range []int{8, 16, 24, 1024, 4096} {
				for _, span := range []float64{1, 20, 104, 200} {
					x := softmaxRow(rng, n, 0, span)
					m := rowMax(x)
					a, g := slices.Clone(x), slices.Clone(x)
					sa, done := k.expSubSum(a, m)
					if done != n {
						t.Fatalf("kernel covered %d of %d elements", done, n)
					}
					sg := expSubSumGo(g, m)
					for i := range a {
						if a[i] == g[i] {
							continue
						}
						hi := max(math.Abs(float64(a[i])), math.Abs(float64(g[i])))
						rel := math.Abs(float64(a[i])-float64(g[i])) / hi
						d := float64(x[i]) - float64(m)
						if d < expLo+expEdge && (a[i] == 0 || g[i] == 0) {
							continue // either side of the flush threshold
						}
						worst = max(worst, rel)
						if !(rel <= expRelBound) {
							t.Errorf("n %d, element %d: exp(%g) kernel %g, Go %g: relative difference %.3g", n, i, d, a[i], g[i], rel)
						}
					}
					if rel := math.Abs(sa-sg) / sg; !(rel <= expSumBound) {
						t.Errorf("n %d, span %g: sums kernel %.9g, Go %.9g: relative difference %.3g", n, span, sa, sg, rel)
					}
				}
			}
			t.Logf("%s: worst relative difference from Go %.3g", k.name, worst)
		})
	}
	if len(softmaxKernels()) == 0 {
		t.Skip("no vector softmax kernels on this architecture: nothing to compare")
	}
}

// TestExpSubSumAccuracySweep walks d over [−87.3, 0] in small steps, with
// m's that make x − m inexact in float32, and reports the worst error.
func TestExpSubSumAccuracySweep(t *testing.T) {
	const n = 1 << 16
	for _, impl := range expImpls(t) {
		var worst, worstSum float64
		for _, m := range []float32{0, 0.1, 37.25, -61.3} {
			x := make([]float32, n)
			for i := range x {
				x[i] = float32(float64(m) - 87.3*float64(i)/n)
			}
			checkExpRow(t, impl.fn, x, m, &worst, &worstSum)
		}
		t.Logf("%s: worst relative error over the sweep %.3g", impl.name, worst)
	}
}

func TestRowMaxRandomRows(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, n := range append(expLengths()[1:], 127, 4096) {
		for _, shift := range []float64{0, -5, -1e4} {
			x := make([]float32, n)
			for i := range x {
				v := rng.NormFloat64() * 3
				if shift != 0 { // negative-only rows
					v = -math.Abs(v) + shift
				}
				x[i] = float32(v)
			}
			if got, want := rowMax(x), slices.Max(x); got != want {
				t.Errorf("len %d, shift %g: rowMax %g, want %g", n, shift, got, want)
			}
		}
	}
	if got := rowMax([]float32{-3.5}); got != -3.5 {
		t.Errorf("rowMax of one element: %g, want -3.5", got)
	}
	if got := rowMax(nil); !math.IsInf(float64(got), -1) {
		t.Errorf("rowMax of no elements: %g, want -Inf", got)
	}
}

// TestRowMaxNaN checks the documented NaN rule with a NaN at every position
// of the vector part and of the tail, and the maximum at every other one
// (before and after the NaN in the same lane).
func TestRowMaxNaN(t *testing.T) {
	nan := float32(math.NaN())
	for _, n := range []int{8, 40, 69} {
		for pos := 0; pos < n; pos++ {
			for top := 0; top < n; top++ {
				if top == pos {
					continue
				}
				x := make([]float32, n)
				for i := range x {
					x[i] = float32(-i - 1)
				}
				x[pos], x[top] = nan, 100
				got := rowMax(x)
				switch {
				case pos == 0:
					if !math.IsNaN(float64(got)) {
						t.Fatalf("len %d, NaN first, max at %d: rowMax %g, want NaN", n, top, got)
					}
				case got != 100:
					t.Fatalf("len %d, NaN at %d, max at %d: rowMax %g, want 100 (NaN skipped)", n, pos, top, got)
				}
			}
		}
	}
	x := []float32{1, 2, float32(math.Inf(1)), 3, 4, 5, 6, 7, 8}
	if got := rowMax(x); !math.IsInf(float64(got), 1) {
		t.Errorf("rowMax with +Inf: %g", got)
	}
}

// TestRowMaxAsmMatchesGo runs each vector kernel alone against the loop.
func TestRowMaxAsmMatchesGo(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for _, k := range softmaxKernels() {
		if !k.ok {
			t.Logf("this CPU cannot run the %s kernel", k.name)
			continue
		}
		for _, n := range []int{8, 16, 24, 32, 40, 56, 64, 1024, 4096} {
			x := make([]float32, n)
			for i := range x {
				x[i] = float32(rng.NormFloat64()*10 - 50)
			}
			got, done := k.rowMax(x)
			if want := rowMaxGo(x); done != n || got != want {
				t.Errorf("%s, len %d: kernel %g over %d elements, plain loop %g", k.name, n, got, done, want)
			}
		}
	}
	if len(softmaxKernels()) == 0 {
		t.Skip("no vector softmax kernels on this architecture: nothing to compare")
	}
}

// FuzzExpSubSum feeds arbitrary float32 bit patterns (NaN, ±Inf, subnormals
// included) and an arbitrary m: no crash, every value and the sum as
// checkExpRow requires, and rowMax equal to the plain loop.
func FuzzExpSubSum(f *testing.F) {
	floats := func(v ...float32) []byte {
		b := make([]byte, 4*len(v))
		for i, x := range v {
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
		}
		return b
	}
	inf := float32(math.Inf(1))
	nan := float32(math.NaN())
	f.Add(floats(0, -1, -2, -3, -87, -88, -104, -200, 1), float32(0))
	f.Add(floats(-inf, inf, nan, 0x1p-149, -0x1p-149, 3e38, -3e38, 88.5, 88.37), float32(0))
	f.Add(floats(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17), float32(17))
	f.Add(floats(1, 2, 3), inf)
	f.Add(floats(1, 2, 3, 4, 5, 6, 7, 8), -inf)
	f.Add(floats(1, 2, 3, 4, 5, 6, 7, 8), nan)
	f.Add(floats(1e30, -1e30, 1e-30, -1e-30, 5, 6, 7, 8), float32(1e-30))
	// exp(88) twice in one lane of the assembly's float32 pair sums.
	f.Add(floats(88, 88, 88, 88, 88, 88, 88, 88, 88, 88, 88, 88, 88, 88, 88, 88), float32(0))
	f.Add(floats(176.19, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), float32(88))
	f.Fuzz(func(t *testing.T, raw []byte, m float32) {
		x := make([]float32, min(len(raw)/4, 4096))
		for i := range x {
			x[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
		}
		got, want := rowMax(x), rowMaxGo(x)
		if math.Float32bits(got) != math.Float32bits(want) && !(got != got && want != want) && !(got == 0 && want == 0) {
			t.Errorf("rowMax %g, plain loop %g", got, want)
		}
		var worst, worstSum float64
		for _, impl := range expImpls(t) {
			checkExpRow(t, impl.fn, x, m, &worst, &worstSum)
		}
	})
}

// softmaxBenchRow is a row that expSubSum maps into itself with m = 1: the first
// call takes [−29, 1] to (0, 1], later ones (0, 1] to (0.37, 1], so
// repeated calls keep ordinary arguments.
func softmaxBenchRow(n int) []float32 {
	return softmaxRow(rand.New(rand.NewPCG(9, 10)), n, 1, 30)
}

// BenchmarkExpSubSum: exponentials per ns on a 1024-element row, for the
// dispatch, the portable Go, each vector kernel, and the scalar math.Exp
// loop attend had.
func BenchmarkExpSubSum(b *testing.B) {
	const n = 1024
	run := func(b *testing.B, fn func([]float32, float32) float64) {
		x := softmaxBenchRow(n)
		var s float64
		for b.Loop() {
			s += fn(x, 1)
		}
		b.ReportMetric(float64(n)*float64(b.N)/float64(b.Elapsed().Nanoseconds()), "elements/ns")
		if math.IsNaN(s) {
			b.Fatal("NaN sum")
		}
	}
	for _, impl := range expImpls(b) {
		b.Run(impl.name, func(b *testing.B) { run(b, impl.fn) })
	}
	b.Run("mathexp", func(b *testing.B) {
		run(b, func(x []float32, m float32) float64 {
			var sum float64
			for i, v := range x {
				p := math.Exp(float64(v) - float64(m))
				sum += p
				x[i] = float32(p)
			}
			return sum
		})
	})
}

// BenchmarkRowMax: elements per ns on a 1024-element row, kernel vs the
// plain loop.
func BenchmarkRowMax(b *testing.B) {
	const n = 1024
	run := func(b *testing.B, fn func([]float32) float32) {
		x := softmaxBenchRow(n)
		var s float32
		for b.Loop() {
			s += fn(x)
		}
		b.ReportMetric(float64(n)*float64(b.N)/float64(b.Elapsed().Nanoseconds()), "elements/ns")
		if s != s {
			b.Fatal("NaN max")
		}
	}
	b.Run("dispatch", func(b *testing.B) { run(b, rowMax) })
	b.Run("loop", func(b *testing.B) { run(b, rowMaxGo) })
}
