package cuda

import (
	"math"
	"os"
	"regexp"
	"strconv"
	"sync"
	"testing"
)

// ex2PolyConsts are the constants of ex2_poly in kernels/attention_hopper.cu,
// read from the source so that the test checks the kernel's polynomial and
// not a copy of it.
type ex2PolyConsts struct {
	clamp, round float32
	c            [4]float32 // c[0] + c[1]·f + c[2]·f² + c[3]·f³
}

var ex2PolyBody = regexp.MustCompile(`(?s)float ex2_poly\(float x\) \{\s*` +
	`x = fmaxf\(x, (-?[0-9.]+)f\);\s*` +
	`const float r = x \+ ([0-9.]+)f;[^\n]*\n\s*` +
	`const float f = x - \(r - ([0-9.]+)f\);\s*` +
	`const float p = fmaf\(fmaf\(fmaf\(([0-9.e-]+)f, f, ([0-9.e-]+)f\), f, ([0-9.e-]+)f\), f, ([0-9.e-]+)f\);\s*` +
	`return __int_as_float\(__float_as_int\(p\) \+ \(__float_as_int\(r\) << 23\)\);\s*\}`)

func readEx2Poly(t *testing.T) ex2PolyConsts {
	t.Helper()
	src, err := os.ReadFile("kernels/attention_hopper.cu")
	if err != nil {
		t.Fatal(err)
	}
	m := ex2PolyBody.FindStringSubmatch(string(src))
	if m == nil {
		t.Fatal("kernels/attention_hopper.cu: ex2_poly is not the clamp, rounding, cubic and exponent add this test emulates; update the test with it")
	}
	num := func(s string) float32 {
		v, err := strconv.ParseFloat(s, 32)
		if err != nil {
			t.Fatal(err)
		}
		return float32(v)
	}
	if m[2] != m[3] {
		t.Fatalf("ex2_poly adds %s and subtracts %s: the rounding constant must be the same", m[2], m[3])
	}
	return ex2PolyConsts{clamp: num(m[1]), round: num(m[2]), c: [4]float32{num(m[7]), num(m[6]), num(m[5]), num(m[4])}}
}

// fmaf is the device's fused multiply-add in float32. The product of two
// float32 is exact in float64, so only the sum is rounded twice (to
// float64, then float32), which can differ from one rounding by an ulp of
// float32 in rare ties: far below the errors measured here.
func fmaf(a, b, c float32) float32 { return float32(math.FMA(float64(a), float64(b), float64(c))) }

// eval is ex2_poly, operation by operation in float32 as the GPU runs it
// (CUDA does not reassociate x + r - r; --fmad fuses nothing here but the
// written fmaf calls).
func (k ex2PolyConsts) eval(x float32) float32 {
	x = max(x, k.clamp)
	r := float32(x + k.round)
	f := float32(x - float32(r-k.round))
	p := fmaf(fmaf(fmaf(k.c[3], f, k.c[2]), f, k.c[1]), f, k.c[0])
	return math.Float32frombits(math.Float32bits(p) + math.Float32bits(r)<<23)
}

// poly is the cubic alone, on the reduced argument.
func (k ex2PolyConsts) poly(f float32) float32 {
	return fmaf(fmaf(fmaf(k.c[3], f, k.c[2]), f, k.c[1]), f, k.c[0])
}

// ex2PolyMaxRelErr bounds ex2_poly's relative error: far under the rounding
// of P to bf16 (2^-9 relative) and e4m3 (2^-4) that follows it.
const ex2PolyMaxRelErr = 1e-4

// TestEx2Poly checks the polynomial exponential of the attention kernels
// (ATTN_EXP_POLY) against 2^x in float64: (1) the cubic on every float32 of
// the reduced range [-0.5, 0.5] of magnitude at least 2^-8 (every 256th
// below), whose relative error is the function's wherever the result is
// normal; (2) the whole function, range reduction and exponent add
// included, on every 61st float32 of [-126, 16] (the kernels' arguments
// are at most 0, or 8.5 with the lazy rescale, plus rounding), on every
// float32 within 64 ulps of each half-integer (where the rounding of the
// reduction flips), and on the clamped values below, -inf included.
func TestEx2Poly(t *testing.T) {
	k := readEx2Poly(t)
	if k.round != 12582912 {
		t.Fatalf("ex2_poly rounds with %g, want 1.5·2^23 = 12582912", k.round)
	}
	type worst struct {
		err float64
		at  float32
	}
	relErr := func(got float32, x float64) float64 { return math.Abs(float64(got)/math.Exp2(x) - 1) }
	// (1) The cubic, both signs of each binade on its own goroutine pair.
	lo, hi := math.Float32bits(0x1p-8), math.Float32bits(0.5)
	var mu sync.Mutex
	var wg sync.WaitGroup
	poly := worst{}
	for _, sign := range []uint32{0, 1 << 31} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w := worst{}
			check := func(b uint32) {
				f := math.Float32frombits(b | sign)
				if e := relErr(k.poly(f), float64(f)); !(e <= w.err) {
					w = worst{e, f}
				}
			}
			for b := uint32(0); b < lo; b += 256 {
				check(b)
			}
			for b := lo; b <= hi; b++ {
				check(b)
			}
			mu.Lock()
			if !(w.err <= poly.err) {
				poly = w
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	// (2) The whole function.
	full := worst{}
	check := func(x float32) {
		want := float64(x)
		if x < k.clamp {
			want = float64(k.clamp)
		}
		if e := relErr(k.eval(x), want); !(e <= full.err) {
			full = worst{e, x}
		}
	}
	for b := uint32(0); b <= math.Float32bits(126); b += 61 {
		check(-math.Float32frombits(b))
	}
	for b := uint32(0); b <= math.Float32bits(16); b += 61 {
		check(math.Float32frombits(b))
	}
	for h := -252; h <= 32; h++ {
		c := float32(h) / 2
		for d := float32(-64); d <= 64; d++ {
			check(c + d*ulp32(c))
		}
	}
	for _, x := range []float32{-125, -125.5, -126, -200, -1e30, float32(math.Inf(-1))} {
		check(x)
		if got, want := k.eval(x), float32(math.Exp2(float64(k.clamp))); x <= k.clamp && math.Abs(float64(got/want)-1) > ex2PolyMaxRelErr {
			t.Errorf("ex2_poly(%g) = %g, want the clamp's 2^%g = %g", x, got, k.clamp, want)
		}
	}
	t.Logf("ex2_poly: largest relative error %.3g of the cubic on [-0.5, 0.5] (at %g), %.3g of the whole function (at %g)", poly.err, poly.at, full.err, full.at)
	for _, w := range []worst{poly, full} {
		if !(w.err <= ex2PolyMaxRelErr) {
			t.Errorf("ex2_poly's relative error %.3g at %g exceeds %g", w.err, w.at, ex2PolyMaxRelErr)
		}
	}
}

// ulp32 is the spacing of float32 values at x (x ≠ 0: that of the smallest
// normal).
func ulp32(x float32) float32 {
	if x == 0 {
		return math.Float32frombits(1 << 23)
	}
	b := math.Float32bits(float32(math.Abs(float64(x))))
	return math.Float32frombits(b+1) - math.Float32frombits(b)
}
