package cpu

import (
	"encoding/binary"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
)

var geluAll = flag.Bool("gelu.all", false, "TestGeluExhaustive: check every float32 (2^32 inputs, minutes on many cores) instead of four binades")

// geluRef is GELU in float64 through erfc, which keeps its relative
// precision in the negative tail where 1+erf cancels.
func geluRef(x float32) float64 {
	v := float64(x)
	return 0.5 * v * math.Erfc(-v/math.Sqrt2)
}

// geluErf64 is the per-element float64 math.Erf formula the CPU backend used
// before geluInPlace: the baseline of the benchmarks.
func geluErf64(x float32) float32 {
	v := float64(x)
	return float32(0.5 * v * (1 + math.Erf(v/math.Sqrt2)))
}

// The bounds stated in gelu.go.
const (
	geluAbsTol   = 2e-7 // × max(1, |x|)
	geluRelTol   = 1e-6 // where |GELU(x)| ≥ geluRelFloor
	geluRelFloor = 1e-37
)

// geluImpls is every implementation this CPU runs: the Go one, each SIMD
// kernel, and geluInPlace as dispatched.
func geluImpls(t testing.TB) []geluVariant {
	impls := []geluVariant{{"go", true, geluGo}, {"dispatch", true, geluInPlace}}
	for _, v := range geluVariants() {
		if !v.supported {
			t.Logf("%s: this CPU lacks the instructions, not tested here", v.name)
			continue
		}
		impls = append(impls, v)
	}
	return impls
}

// geluErrStats accumulates the worst errors against geluRef.
type geluErrStats struct {
	maxAbs, maxRel       float64 // abs error / max(1,|x|); relative error
	atAbs, atRel         float32
	bad                  int
	firstBad             string
	checked, relExcluded int
}

func (s *geluErrStats) add(x, got float32) {
	s.checked++
	want := geluRef(x)
	if math.IsInf(float64(x), -1) {
		want = 0 // the stated limit; the formula gives −∞·0
	}
	g := float64(got)
	// The exact ends stated in gelu.go.
	if x >= 5.5 && got != x {
		s.fail(x, got, want, "not exactly x")
	}
	if x <= -13.25 && (got != 0 || !math.Signbit(g)) {
		s.fail(x, got, want, "not −0")
	}
	if math.IsNaN(want) || math.IsInf(want, 0) {
		if !(math.IsNaN(g) && math.IsNaN(want) || g == want) {
			s.fail(x, got, want, "special value")
		}
		return
	}
	abs := math.Abs(g-want) / max(1, math.Abs(float64(x)))
	if abs > s.maxAbs || math.IsNaN(abs) {
		s.maxAbs, s.atAbs = abs, x
	}
	if !(abs <= geluAbsTol) {
		s.fail(x, got, want, "absolute error")
	}
	if math.Abs(want) < geluRelFloor {
		s.relExcluded++
		return
	}
	rel := math.Abs(g-want) / math.Abs(want)
	if rel > s.maxRel || math.IsNaN(rel) {
		s.maxRel, s.atRel = rel, x
	}
	if !(rel <= geluRelTol) {
		s.fail(x, got, want, "relative error")
	}
}

// merge folds o's worst cases and counts into s.
func (s *geluErrStats) merge(o *geluErrStats) {
	if o.maxAbs > s.maxAbs {
		s.maxAbs, s.atAbs = o.maxAbs, o.atAbs
	}
	if o.maxRel > s.maxRel {
		s.maxRel, s.atRel = o.maxRel, o.atRel
	}
	if s.bad == 0 {
		s.firstBad = o.firstBad
	}
	s.bad += o.bad
	s.checked += o.checked
	s.relExcluded += o.relExcluded
}

func (s *geluErrStats) fail(x, got float32, want float64, what string) {
	if s.bad == 0 {
		s.firstBad = fmt.Sprintf("%s: GELU(%g) = %g, want %g", what, x, got, want)
	}
	s.bad++
}

// geluSweepInputs returns float32s of both signs: every bit pattern from 0
// to |x| = 16 at a stride (so each binade is sampled evenly), every float32
// in short windows around the points where the formula changes behaviour,
// and random magnitudes from 1e-38 to 3e38.
func geluSweepInputs(stride uint32) []float32 {
	var xs []float32
	top := math.Float32bits(16)
	for b := uint32(0); b <= top; b += stride {
		v := math.Float32frombits(b)
		xs = append(xs, v, -v)
	}
	for _, c := range []float32{0, 1, 2, 5.5, 6, 10, 13.24, geluClamp} {
		cb := math.Float32bits(c)
		for d := uint32(0); d < 2000; d++ {
			for _, b := range []uint32{cb + d, cb - d} {
				if b < 1<<31 { // a non-negative float, not a wrap-around
					v := math.Float32frombits(b)
					xs = append(xs, v, -v)
				}
			}
		}
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 200000 {
		v := float32(math.Pow(10, -38+76.5*r.Float64()))
		xs = append(xs, v, -v)
	}
	return xs
}

// TestGeluAccuracy checks every implementation against float64 over a
// dense sweep of float32 inputs and prints the worst errors found.
func TestGeluAccuracy(t *testing.T) {
	xs := geluSweepInputs(1009)
	for _, impl := range geluImpls(t) {
		t.Run(impl.name, func(t *testing.T) {
			got := append([]float32(nil), xs...)
			impl.run(got)
			var s geluErrStats
			for i, x := range xs {
				s.add(x, got[i])
			}
			t.Logf("%d inputs: max abs err/max(1,|x|) %.3g at x=%g; max rel err %.3g (%.2f ulp) at x=%g; %d inputs with |GELU| < %g not held to the relative bound",
				s.checked, s.maxAbs, s.atAbs, s.maxRel, s.maxRel/math.Pow(2, -24), s.atRel, s.relExcluded, geluRelFloor)
			if s.bad > 0 {
				t.Errorf("%d of %d inputs out of bounds; first: %s", s.bad, s.checked, s.firstBad)
			}
		})
	}
}

// TestGeluExhaustive checks every float32 of both signs with magnitude in
// [2, 4) and [8, 16) (the larger relative errors are in the negative tail),
// or every float32 at all with -gelu.all, against float64.
func TestGeluExhaustive(t *testing.T) {
	type span struct{ lo, hi uint32 } // magnitude bit patterns [lo, hi)
	spans := []span{
		{math.Float32bits(2), math.Float32bits(4)},
		{math.Float32bits(8), math.Float32bits(16)},
	}
	if *geluAll {
		spans = []span{{0, 1 << 31}}
	}
	impls := geluImpls(t)
	stats := make([]geluErrStats, len(impls))
	for _, sp := range spans {
		const chunk = 1 << 16
		var mu sync.Mutex
		var wg sync.WaitGroup
		next := make(chan uint32)
		for range runtime.GOMAXPROCS(0) {
			wg.Go(func() {
				local := make([]geluErrStats, len(impls))
				xs := make([]float32, 0, 2*chunk)
				got := make([]float32, 2*chunk)
				for b := range next {
					xs = xs[:0]
					for v := b; v < min(b+chunk, sp.hi) && v >= b; v++ {
						x := math.Float32frombits(v)
						xs = append(xs, x, -x)
					}
					for k, impl := range impls {
						g := got[:len(xs)]
						copy(g, xs)
						impl.run(g)
						for i, x := range xs {
							local[k].add(x, g[i])
						}
					}
				}
				mu.Lock()
				for k := range stats {
					stats[k].merge(&local[k])
				}
				mu.Unlock()
			})
		}
		for b := uint64(sp.lo); b < uint64(sp.hi); b += chunk {
			next <- uint32(b)
		}
		close(next)
		wg.Wait()
	}
	for k, impl := range impls {
		s := &stats[k]
		t.Logf("%s: %d inputs: max abs err/max(1,|x|) %.3g at x=%g; max rel err %.3g (%.2f ulp) at x=%g; %d with |GELU| < %g",
			impl.name, s.checked, s.maxAbs, s.atAbs, s.maxRel, s.maxRel/math.Pow(2, -24), s.atRel, s.relExcluded, geluRelFloor)
		if s.bad > 0 {
			t.Errorf("%s: %d of %d inputs out of bounds; first: %s", impl.name, s.bad, s.checked, s.firstBad)
		}
	}
}

// TestGeluSpecialValues checks the documented edge behaviour exactly.
func TestGeluSpecialValues(t *testing.T) {
	inf, nan := float32(math.Inf(1)), float32(math.NaN())
	negZero := float32(math.Copysign(0, -1))
	type tc struct{ in, want float32 }
	cases := []tc{
		{0, 0}, {negZero, negZero},
		{inf, inf}, {-inf, negZero},
		{math.MaxFloat32, math.MaxFloat32}, {-math.MaxFloat32, negZero},
		{5.5, 5.5}, {6, 6}, {100, 100}, {1e30, 1e30},
		{-13.25, negZero}, {-14, negZero}, {-1e30, negZero},
		{-math.SmallestNonzeroFloat32, negZero},
		{2 * math.SmallestNonzeroFloat32, math.SmallestNonzeroFloat32},
	}
	for _, impl := range geluImpls(t) {
		in := make([]float32, 0, len(cases)+2)
		for _, c := range cases {
			in = append(in, c.in)
		}
		in = append(in, nan, -nan)
		impl.run(in)
		for i, c := range cases {
			g := in[i]
			if g != c.want || math.Signbit(float64(g)) != math.Signbit(float64(c.want)) {
				t.Errorf("%s: GELU(%g) = %g, want %g", impl.name, c.in, g, c.want)
			}
		}
		for _, g := range in[len(cases):] {
			if !math.IsNaN(float64(g)) {
				t.Errorf("%s: GELU(NaN) = %g, want NaN", impl.name, g)
			}
		}
	}
}

// TestGeluAsmMatchesGo compares each SIMD kernel with geluGo element by
// element: both follow the same steps, the kernels with fused multiply-adds,
// so they may differ by rounding only.
func TestGeluAsmMatchesGo(t *testing.T) {
	xs := geluSweepInputs(4093)
	want := append([]float32(nil), xs...)
	geluGo(want)
	ran := 0
	for _, v := range geluVariants() {
		if !v.supported {
			t.Logf("%s: this CPU lacks the instructions, not tested here", v.name)
			continue
		}
		ran++
		got := append([]float32(nil), xs...)
		v.run(got)
		maxRel, at, same := 0.0, float32(0), 0
		for i, x := range xs {
			g, w := float64(got[i]), float64(want[i])
			if math.IsNaN(g) != math.IsNaN(w) {
				t.Fatalf("%s: GELU(%g) = %g, Go gives %g", v.name, x, g, w)
			}
			if g == w || math.IsNaN(g) {
				same++
				continue
			}
			// Below the relative floor compare absolutely (subnormal results).
			d := math.Abs(g-w) / max(math.Abs(w), geluRelFloor)
			if d > maxRel {
				maxRel, at = d, x
			}
		}
		t.Logf("%s vs go: %d of %d identical; max relative difference %.3g (%.2f ulp) at x=%g",
			v.name, same, len(xs), maxRel, maxRel/math.Pow(2, -24), at)
		// Each is within ~8 ulps of the truth (TestGeluAccuracy); a wrong
		// step or constant in either shows up as far more.
		if maxRel > 1e-6 {
			t.Errorf("%s differs from geluGo by up to %.3g relative at x=%g, want ≤ 1e-6", v.name, maxRel, at)
		}
	}
	if ran == 0 {
		t.Log("no SIMD kernel runs on this CPU: geluInPlace is geluGo here")
	}
}

// TestGeluLengths runs every length 0..70 and a few large ones inside a
// guarded buffer: elements outside the slice stay untouched, and each
// element comes out exactly as when GELU runs on it alone (the vector body
// and the padded tail compute lane by lane, identically).
func TestGeluLengths(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	lengths := make([]int, 0, 80)
	for n := range 71 {
		lengths = append(lengths, n)
	}
	lengths = append(lengths, 127, 128, 129, 1000, 4096+13)
	const guard = 7
	sentinel := float32(-12345.5)
	for _, impl := range geluImpls(t) {
		for _, n := range lengths {
			buf := make([]float32, n+2*guard)
			for i := range buf {
				buf[i] = sentinel
			}
			x := buf[guard : guard+n]
			for i := range x {
				x[i] = float32(r.NormFloat64() * 4)
			}
			in := append([]float32(nil), x...)
			impl.run(x)
			for i := range guard {
				if buf[i] != sentinel || buf[guard+n+i] != sentinel {
					t.Fatalf("%s n=%d: wrote outside the slice", impl.name, n)
				}
			}
			for i, v := range in {
				one := []float32{v}
				impl.run(one)
				if x[i] != one[0] {
					t.Fatalf("%s n=%d: element %d (%g) = %g in bulk, %g alone", impl.name, n, i, v, x[i], one[0])
				}
				if d := math.Abs(float64(x[i]) - geluRef(v)); d > geluAbsTol*max(1, math.Abs(float64(v))) {
					t.Fatalf("%s n=%d: GELU(%g) = %g, want %g", impl.name, n, v, x[i], geluRef(v))
				}
			}
		}
	}
}

// FuzzGelu feeds arbitrary bit patterns (any float32, NaNs included) through
// geluInPlace and holds every result to the stated bounds.
func FuzzGelu(f *testing.F) {
	seed := func(vs ...float32) []byte {
		b := make([]byte, 4*len(vs))
		for i, v := range vs {
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
		}
		return b
	}
	f.Add(seed(0, 1, -1, 3, -3, 7, -7, 12, -12, 13.3, -13.3, 20))
	f.Add(seed(float32(math.Inf(-1)), float32(math.NaN()), 1e-40, -1e-40, 5.4999, -13.2))
	f.Fuzz(func(t *testing.T, b []byte) {
		xs := make([]float32, len(b)/4)
		for i := range xs {
			xs[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
		}
		got := append([]float32(nil), xs...)
		geluInPlace(got)
		var s geluErrStats
		for i, x := range xs {
			if math.IsNaN(float64(x)) {
				if !math.IsNaN(float64(got[i])) {
					t.Fatalf("GELU(NaN) = %g", got[i])
				}
				continue
			}
			s.add(x, got[i])
		}
		if s.bad > 0 {
			t.Fatal(s.firstBad)
		}
	})
}

// BenchmarkGelu times each implementation and the old float64 math.Erf loop
// on one goroutine, over one fc1 activation row (4096, in L1) and over 64
// rows (1 MiB, L2/L3); elem/ns is the figure to compare.
func BenchmarkGelu(b *testing.B) {
	impls := append([]geluVariant{{"erf64", true, func(x []float32) {
		for i, v := range x {
			x[i] = geluErf64(v)
		}
	}}}, geluImpls(b)...)
	for _, n := range []int{4096, 64 * 4096} {
		r := rand.New(rand.NewPCG(7, 8))
		src := make([]float32, n)
		for i := range src {
			src[i] = float32(r.NormFloat64() * 2)
		}
		x := make([]float32, n)
		for _, impl := range impls {
			b.Run(fmt.Sprintf("%s/n=%d", impl.name, n), func(b *testing.B) {
				b.SetBytes(int64(4 * n))
				for b.Loop() {
					b.StopTimer() // restore the inputs: erf64's time depends on them
					copy(x, src)
					b.StartTimer()
					impl.run(x)
				}
				b.ReportMetric(float64(n)*float64(b.N)/float64(b.Elapsed().Nanoseconds()), "elem/ns")
			})
		}
	}
}
