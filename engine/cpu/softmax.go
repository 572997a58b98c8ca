package cpu

import "math"

// Softmax row kernels for attend: the row maximum and the shifted
// exponentials with their sum. The full model evaluates ~28·10⁹ exponentials
// per frame, so these run as assembly where the CPU has it (softmax_amd64.s:
// AVX-512F, else AVX2 + FMA, whose callers leave the last len%8 elements to
// Go) and as the portable Go below everywhere else.
//
// The exponential, exp(d) with d = x − m:
//
//   - d is split as k·ln2 + r with k = round(d/ln2) and |r| ≤ ln2/2; exp(r)
//     is a degree-6 polynomial; 2^k is made in the exponent bits (AVX2, Go)
//     or applied with VSCALEFPS (AVX-512).
//   - The assembly works in float32. x − m is rounded in float32, which for
//     |d| near 100 is off by up to 4·10⁻⁶ (half an ulp of 64); it therefore
//     carries the rounding error of that subtraction (Knuth's TwoSum) into r,
//     so that the result is exp of the exact difference. Without it the
//     error reaches 10⁻⁶ (measured).
//   - The Go version works in float64, where x − m is exact.
//   - Relative error against float64 math.Exp, measured by softmax_test.go
//     over d in [−87.3, 88]: at most 8.8·10⁻⁸ in assembly, 6·10⁻⁸ in Go (the
//     polynomial alone is within 1.1·10⁻⁸; the rest is float32 rounding).
//     The promised bound, which the tests hold it to, is 3·10⁻⁷.
const (
	expLo = -87.33654 // ln 2⁻¹²⁶: below this the result would be subnormal
	expHi = 88.0      // exp(88) < MaxFloat32/2 (see above); 2^k ≤ 2¹²⁷

	// exp(r) ≈ 1 + r + r²·(c2 + c3·r + c4·r² + c5·r³ + c6·r⁴) on
	// |r| ≤ ln2/2: Chebyshev interpolation of (exp(r)−1−r)/r² at five
	// nodes, coefficients rounded to float32 (the same values sit in
	// softmax_amd64.s); error ≤ 1.1·10⁻⁸ relative.
	expC2 = 0.5
	expC3 = 0.166665763
	expC4 = 0.0416665561
	expC5 = 0.00836319011
	expC6 = 0.0013926198
)

// softmaxKernel is one vector implementation of the row kernels, for tests
// to run each one. Both functions cover a prefix of x and report its length;
// the Go code does the rest.
type softmaxKernel struct {
	name      string
	ok        bool // this CPU runs it
	rowMax    func(x []float32) (m float32, done int)
	expSubSum func(x []float32, m float32) (sum float64, done int)
}

// rowMax returns the largest element of x, or −Inf for an empty x.
//
// NaN: exactly a plain `if v > m { m = v }` loop started at m = x[0], in the
// assembly too (each lane keeps its value when the new one is NaN): NaNs are
// skipped, unless x[0] is NaN, which then is the result. Between +0 and −0
// either may be returned.
func rowMax(x []float32) float32 {
	if len(x) == 0 {
		return float32(math.Inf(-1))
	}
	m, done := rowMaxVec(x)
	if done == 0 {
		m = x[0]
	}
	for _, v := range x[done:] {
		if v > m {
			m = v
		}
	}
	return m
}

// expSubSum overwrites x[i] with exp(x[i] − m) and returns the sum of the
// new values. See the comment above expLo for the accuracy of each value
// and the ranges that give 0 and +Inf.
//
// The sum is of the float32 values written to x. The assembly adds pairs of
// them in float32 (exp ≤ e⁸⁸ < MaxFloat32/2 keeps these finite) (relative error ≤ 2⁻²⁴ ≈ 6·10⁻⁸ per pair, all terms being
// ≥ 0) and accumulates the pairs in float64 (error ≤ len(x)·2⁻⁵³); the Go
// code accumulates in float64. The sum's relative error against the sum of
// math.Exp is therefore within the per-value bound plus 6·10⁻⁸.
func expSubSum(x []float32, m float32) float64 {
	sum, done := expSubSumVec(x, m)
	return sum + expSubSumGo(x[done:], m)
}

// rowMaxGo is rowMax without the assembly; rowMaxVec's twin in tests.
func rowMaxGo(x []float32) float32 {
	if len(x) == 0 {
		return float32(math.Inf(-1))
	}
	m := x[0]
	for _, v := range x[1:] {
		if v > m {
			m = v
		}
	}
	return m
}

// expSubSumGo is expSubSum in portable Go, in float64: as fast as the
// assembly per element is not the aim here, only the tails and CPUs without
// AVX2 use it.
func expSubSumGo(x []float32, m float32) float64 {
	const (
		// Adding 1.5·2⁵² rounds a float64 of magnitude < 2⁵¹ to an integer.
		roundMagic = 0x1.8p52
		log2e      = math.Log2E
		ln2        = math.Ln2
	)
	mf := float64(m)
	var sum float64
	for i, v := range x {
		d := float64(v) - mf
		var e float64
		switch {
		case d < expLo:
			e = 0
		case d > expHi:
			e = math.Inf(1)
		case d != d:
			e = d
		default:
			k := (d*log2e + roundMagic) - roundMagic
			r := d - k*ln2
			p := 1 + r + r*r*(expC2+r*(expC3+r*(expC4+r*(expC5+r*expC6))))
			// k ∈ [−126, 127] here, so 2^k is a normal float64.
			e = p * math.Float64frombits(uint64(int64(k)+1023)<<52)
		}
		f := float32(e)
		x[i] = f
		sum += float64(f)
	}
	return sum
}
