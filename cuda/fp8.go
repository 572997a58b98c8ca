package cuda

import "math"

// The host side of the FP8 cache (kernels/kvfp8.cu): e4m3 values, the
// transposed V's row length and key order, for saving and restoring the
// cache with a session and for the tests' oracle.

// fp8Rows is the rows of an FP8 page: the page size rounded up to 16, so
// that the transposed V's rows are whole 16-byte units for the TMA.
func fp8Rows(pageSize int) int { return (pageSize + 15) &^ 15 }

// fp8KeyPos is the stored position of key c (0…15) of a 16-key group in a
// row of the transposed V (f8_key_pos in kernels/fp8.cuh).
func fp8KeyPos(c int) int {
	if c < 8 {
		return 4*(c>>1) + c&1
	}
	return 4*((c-8)>>1) + 2 + c&1
}

// e4m3Max is the largest finite e4m3 value.
const e4m3Max = 448

// e4m3Value decodes an e4m3 byte: 1 sign, 4 exponent (bias 7) and 3
// mantissa bits, no infinities, S.1111.111 NaN.
func e4m3Value(b uint8) float32 {
	e, m := int(b>>3&15), float64(b&7)
	var v float64
	switch {
	case e == 15 && m == 7:
		return float32(math.NaN())
	case e == 0:
		v = m / 8 * 0x1p-6
	default:
		v = (1 + m/8) * math.Ldexp(1, e-7)
	}
	if b&0x80 != 0 {
		v = -v
	}
	return float32(v)
}

// e4m3Bits rounds x to the nearest e4m3 value, ties to even, saturating at
// ±448 (as the device's cvt.rn.satfinite); NaN stays NaN.
func e4m3Bits(x float32) uint8 {
	if x != x {
		return 0x7f
	}
	var sign uint8
	a := float64(x)
	if a < 0 {
		sign, a = 0x80, -a
	}
	if a >= e4m3Max {
		return sign | 0x7e
	}
	// Quantum of a's binade: 2^-9 below the smallest normal 2^-6.
	_, exp := math.Frexp(a) // a = f·2^exp, f in [0.5, 1)
	q := math.Ldexp(1, max(exp-1, -6)-3)
	n := math.RoundToEven(a / q)
	// n·q is the rounded value; codes are monotonic in it.
	v := n * q
	if v >= e4m3Max {
		return sign | 0x7e
	}
	if v < 0x1p-6 {
		return sign | uint8(n) // subnormal (n = 8 is the smallest normal's code)
	}
	_, e := math.Frexp(v)
	m := v/math.Ldexp(1, e-1)*8 - 8
	return sign | uint8(e-1+7)<<3 | uint8(m)
}

// fp8Scale is the scale of an array whose first write's largest magnitude
// is amax (f8_scale in kernels/fp8.cuh): the power of two at or above
// amax·16/448.
func fp8Scale(amax float32) float32 {
	t := max(amax, 1e-30) * float32(16.0/448.0)
	m, e := math.Frexp(float64(t))
	if m == 0.5 {
		e--
	}
	return float32(math.Ldexp(1, e))
}
