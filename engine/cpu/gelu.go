package cpu

import "math"

// Exact GELU in float32, without math.Erf.
//
// GELU(x) = x·Φ(x), Φ the standard normal CDF. Writing c = Φ(−|x|) = φ(|x|)·R(|x|),
// with φ the normal density and R Mills' ratio, gives
//
//	GELU(x) = x·c        for x < 0,
//	GELU(x) = x − x·c    for x ≥ 0,
//
// a single formula over the whole line: no erf-near-±1 cancellation, so the
// negative tail keeps full relative precision until it leaves the normal
// float32 range. R is smooth on [0, ∞) (R(0) = √(π/2), R(a) ≈ 1/a for large
// a): a degree-4/5 rational with positive coefficients (so Horner's rule
// has no cancellation), fitted in float64 for minimal relative error on
// [0, 13.3] by Lawson-reweighted linearised least squares, is within 5e-9
// of it. One division per element, no branches. φ(a)'s exp(−a²/2) uses
// an exactly split a² so that its rounding (up to 2e-6 relative at a = 13)
// does not reach the result.
//
// Bounds, checked by TestGeluAccuracy and TestGeluExhaustive against
// 0.5·x·erfc(−x/√2) in float64: relative error ≤ 1e-6 wherever
// |GELU(x)| ≥ 1e-37, absolute error ≤ 2e-7·max(1, |x|) everywhere.
// Measured worst cases: 4.2e-7 relative (7 ulps, SIMD kernels) and 4.8e-7
// (8 ulps, geluGo without fused multiply-adds), both in the negative tail;
// 9.3e-8·max(1, |x|) absolute; over all 2^32 inputs (go test -gelu.all). For
// x ≥ 5.5 the result is exactly x (Φ rounds to 1); for x ≤ −13.25 (true
// |GELU| < 6e-39, subnormal) it is −0. NaN gives NaN, +Inf gives +Inf and
// −Inf gives −0.
const (
	// geluClamp bounds |x| before the rational and the exp: beyond it
	// exp(−a²/2) flushes to 0, which is also what keeps ±Inf finite inside.
	geluClamp = 13.3

	// Mills' ratio R(a) ≈ (p0+…+p4·a⁴)/(1+q1·a+…+q5·a⁵)·√(2π); the p's hold
	// the 1/√(2π) of φ, so p/q·exp(−a²/2) is Φ(−a) directly.
	geluP0 = 0.5
	geluP1 = 0.4356869
	geluP2 = 0.18130718
	geluP3 = 0.03998432
	geluP4 = 0.004020213
	geluQ1 = 1.6692587
	geluQ2 = 1.1944859
	geluQ3 = 0.46438146
	geluQ4 = 0.100233205
	geluQ5 = 0.010077037

	// exp(y) = 2^k·e^r with k = round(y·log2e) and r = y − k·ln2, ln2 split
	// so that k·ln2Hi is exact for |k| < 2^15 (Cody–Waite); e^r on
	// |r| ≤ ln2/2 by a degree-6 polynomial with relative error 2e-9.
	geluLog2e = 1.442695
	geluLn2Hi = 0.693359375
	geluLn2Lo = -0.00021219444
	geluE2    = 0.49999994
	geluE3    = 0.1666643
	geluE4    = 0.041668005
	geluE5    = 0.008374196
	geluE6    = 0.0013843607
	geluRound = 1.5 * (1 << 23)
)

// geluInPlace replaces every x[i] by x[i]/2·(1+erf(x[i]/√2)) (PyTorch's exact GELU).
//
// It keeps no state: goroutines may run it on disjoint parts of a tensor,
// and each element's result does not depend on where the parts are cut.
func geluInPlace(x []float32) {
	n := geluAsm(x)
	geluGo(x[n:])
}

// geluGo is the portable form of the kernel, element by element; the SIMD
// kernels compute the same steps in the same order, but with fused
// multiply-adds, so their results may differ from this by a few ulps.
func geluGo(x []float32) {
	for i, v := range x {
		x[i] = geluScalar(v)
	}
}

// geluScalar is GELU of one element by the formula above.
func geluScalar(x float32) float32 {
	// Bit operations rather than math.Abs and math.Copysign: those go
	// through float64 and cost as much as the arithmetic here.
	sign := math.Float32bits(x) & (1 << 31)
	a := math.Float32frombits(math.Float32bits(x) &^ sign)
	if a > geluClamp { // false for NaN, which stays NaN through s
		a = geluClamp
	}
	s := math.Float32frombits(math.Float32bits(a) | sign)

	// a² = h + l exactly: the product of two float32s fits in a float64.
	a2 := float64(a) * float64(a)
	h := float32(a2)
	l := float32(a2 - float64(h))

	// e = exp(−h/2 − l/2): −l/2 folds into the reduced argument.
	y := -0.5 * h
	// Adding and removing 1.5·2²³ rounds to the nearest integer, ties to
	// even, as VROUNDPS does; |y·log2e| ≤ 128 is far inside its range.
	kf := float32(y*geluLog2e+geluRound) - geluRound
	r := y - kf*geluLn2Hi
	r -= kf * geluLn2Lo
	r -= 0.5 * l
	p := float32(geluE6)
	p = p*r + geluE5
	p = p*r + geluE4
	p = p*r + geluE3
	p = p*r + geluE2
	p = p*r + 1
	p = p*r + 1
	// 2^k, flushed to 0 below 2^−126 (k ≥ −126 keeps exp normal or nearly so).
	e := p * math.Float32frombits(uint32(max(int32(kf)+127, 0))<<23)

	num := float32(geluP4)
	num = num*a + geluP3
	num = num*a + geluP2
	num = num*a + geluP1
	num = num*a + geluP0
	den := float32(geluQ5)
	den = den*a + geluQ4
	den = den*a + geluQ3
	den = den*a + geluQ2
	den = den*a + geluQ1
	den = den*a + 1

	t := s * num / den * e // x·Φ(−|x|), ±0 past the clamp
	if sign != 0 {
		return t
	}
	return x - t
}

// geluVariant is one implementation of geluInPlace's arithmetic, listed by
// geluVariants for tests and benchmarks that compare them.
type geluVariant struct {
	name      string
	supported bool // this CPU has the instructions
	run       func([]float32)
}
