// Package e4m3 is the FP8 (E4M3) number format of the FP8 KV cache
// (precision fp8): encoding with round to nearest even and saturation, as
// the GPU's cvt.rn.satfinite does, decoding, and the cache's rule for a
// scale. The CUDA backend keeps the cache in this format; the CPU backend
// rounds its float32 cache to it, as the reference for the GPU.
package e4m3

import "math"

// Max is the largest finite value.
const Max = 448

// Value decodes a byte: 1 sign, 4 exponent (bias 7) and 3 mantissa bits,
// no infinities, S.1111.111 NaN.
func Value(b uint8) float32 {
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

// Bits rounds x to the nearest value, ties to even, saturating at ±448;
// NaN stays NaN.
func Bits(x float32) uint8 {
	if x != x {
		return 0x7f
	}
	var sign uint8
	a := float64(x)
	if a < 0 {
		sign, a = 0x80, -a
	}
	if a >= Max {
		return sign | 0x7e
	}
	// The quantum of a's binade: 2^-9 below the smallest normal, 2^-6.
	_, exp := math.Frexp(a) // a = f·2^exp, f in [0.5, 1)
	q := math.Ldexp(1, max(exp-1, -6)-3)
	n := math.RoundToEven(a / q)
	v := n * q // the rounded value; codes are monotonic in it
	if v >= Max {
		return sign | 0x7e
	}
	if v < 0x1p-6 {
		return sign | uint8(n) // subnormal (n = 8 is the smallest normal's code)
	}
	_, e := math.Frexp(v)
	m := v/math.Ldexp(1, e-1)*8 - 8
	return sign | uint8(e-1+7)<<3 | uint8(m)
}

// Round is x rounded to e4m3 at scale s: Value(Bits(x/s))·s. With s a
// power of two it is exact arithmetic around the one rounding.
func Round(x, s float32) float32 { return Value(Bits(x/s)) * s }

// Scale is the scale of an array whose first write's largest magnitude is
// amax: the power of two at or above amax·16/448, so that values up to 16
// times the first write's still fit, while small ones keep their relative
// precision down to 2^-6 of the scale (the smallest normal).
func Scale(amax float32) float32 {
	t := max(amax, 1e-30) * float32(16.0/448.0)
	m, e := math.Frexp(float64(t))
	if m == 0.5 {
		e--
	}
	return float32(math.Ldexp(1, e))
}

// Scales are the per-head scales of rows of heads·dim values (the first
// write of a layer's K or V): NaN is ignored, as on the GPU.
func Scales(rows []float32, heads, dim int) []float32 {
	amax := make([]float32, heads)
	for j, x := range rows {
		if a, h := float32(math.Abs(float64(x))), j%(heads*dim)/dim; a > amax[h] {
			amax[h] = a
		}
	}
	for h, a := range amax {
		amax[h] = Scale(a)
	}
	return amax
}
