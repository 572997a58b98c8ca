package cuda

import (
	"math"
	"os"
	"regexp"
	"testing"
)

// pIntBody is pack_p and pack_p8's integer rounding (ATTN_P_INT) in
// kernels/attention_hopper.cu, matched exactly, so that this test fails if
// the kernel's arithmetic changes from what it emulates.
var pIntBody = []*regexp.Regexp{
	regexp.MustCompile(`return __byte_perm\(__float_as_uint\(lo\) \+ 0x8000u, __float_as_uint\(hi\) \+ 0x8000u, 0x7632\);`),
	regexp.MustCompile(`const unsigned x = \(__float_as_uint\(__fmul_rn\(a, 0x1p-120f\)\) \+ 0x80000u\) >> 20;`),
	regexp.MustCompile(`return __byte_perm\(__byte_perm\(x, y, 0x0040\), __byte_perm\(z, w, 0x0040\), 0x5410\);`),
}

// bytePerm is CUDA's __byte_perm: byte i of the result is byte s_i (the
// selector's nibble i, 0…7) of the eight bytes x, y.
func bytePerm(x, y, s uint32) uint32 {
	b := uint64(y)<<32 | uint64(x)
	var r uint32
	for i := range 4 {
		r |= uint32(b>>(8*((s>>(4*i))&7))&0xff) << (8 * i)
	}
	return r
}

// e4m3Value is the value of a non-negative e4m3 byte.
func e4m3Value(b uint32) float64 {
	e, m := b>>3&15, b&7
	if e == 0 {
		return float64(m) / 512
	}
	return math.Ldexp(1+float64(m)/8, int(e)-7)
}

// TestPIntRounding: the kernels' integer rounding of the probabilities
// (ATTN_P_INT) gives, for every P the kernels form, the nearest bf16 (1) or
// e4m3 value (2), ties away from zero. bf16: every float in [2^-126·2^-23,
// 1] of a sample of every binade's mantissas and every tie; e4m3: likewise
// over [0, 448] (P is at most 2^8 in the FP8 kernel).
func TestPIntRounding(t *testing.T) {
	src, err := os.ReadFile("kernels/attention_hopper.cu")
	if err != nil {
		t.Fatal(err)
	}
	for _, re := range pIntBody {
		if !re.Match(src) {
			t.Fatalf("kernels/attention_hopper.cu lacks %s: update this test with the kernel's rounding", re)
		}
	}
	bf16 := func(lo, hi float32) uint32 {
		return bytePerm(math.Float32bits(lo)+0x8000, math.Float32bits(hi)+0x8000, 0x7632)
	}
	byteOf := func(p float32) uint32 { return (math.Float32bits(p*0x1p-120) + 0x80000) >> 20 }
	e4m3 := func(a, b, c, d float32) uint32 {
		x, y, z, w := byteOf(a), byteOf(b), byteOf(c), byteOf(d)
		return bytePerm(bytePerm(x, y, 0x0040), bytePerm(z, w, 0x0040), 0x5410)
	}
	// The nearest of a grid's neighbours, ties away from zero.
	nearest := func(p, below, above float64) float64 {
		if p-below < above-p {
			return below
		}
		return above
	}
	// The values: a sample of every binade's mantissas, and the ties of
	// both grids (bf16: low 16 bits 0x8000; e4m3: low 20 bits 0x80000 in its
	// normal range, odd multiples of 2^-10 below it).
	var values []uint32
	for u := uint32(1); u <= math.Float32bits(448); u += 1 + (u>>9)&0x3ff {
		values = append(values, u)
	}
	for e := uint32(0); e < 136; e++ {
		for m := uint32(0); m < 128; m++ {
			values = append(values, e<<23|m<<16|0x8000)
		}
	}
	for e := uint32(121); e <= 135; e++ {
		for m := uint32(0); m < 8; m++ {
			values = append(values, e<<23|m<<20|0x80000)
		}
	}
	for m := uint32(0); m < 8; m++ {
		values = append(values, math.Float32bits((float32(m)+0.5)/512))
	}
	checked := 0
	for _, u := range values {
		p := math.Float32frombits(u)
		if p > 448 {
			continue
		}
		if p <= 1 {
			// bf16: the two neighbours on the 2^-7-relative grid.
			got := bf16(p, 1)
			lo := float64(math.Float32frombits((got & 0xffff) << 16))
			below := float64(math.Float32frombits(u &^ 0xffff))
			above := float64(math.Float32frombits(u&^0xffff + 0x10000))
			if want := nearest(float64(p), below, above); lo != want || got>>16 != 0x3f80 {
				t.Fatalf("bf16 of %g (bits %#x): %g (pair %#x), want %g", p, u, lo, got, want)
			}
		}
		// e4m3: the neighbours on its grid (2^-9 below 2^-6, else 2^(e-3)).
		b := e4m3(p, 0, 256, 0.001953125)
		if b>>8 != 0x017800 {
			t.Fatalf("e4m3 of (0, 256, 2^-9) after %g: bytes %#x, want 00, 78, 01", p, b>>8)
		}
		step := 1.0 / 512
		if pf := float64(p); pf >= 1.0/64 {
			_, e := math.Frexp(pf) // pf = f·2^e, f in [0.5, 1)
			step = math.Ldexp(1, e-1-3)
		}
		below := math.Floor(float64(p)/step) * step
		if want, got := nearest(float64(p), below, below+step), e4m3Value(b&0xff); got != want {
			t.Fatalf("e4m3 of %g (bits %#x): %g (byte %#x), want %g", p, u, got, b&0xff, want)
		}
		checked++
	}
	if checked < 100000 {
		t.Fatalf("only %d values checked", checked)
	}
	t.Logf("%d values checked", checked)
}
