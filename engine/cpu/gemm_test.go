package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/gonum"
)

// gemmCase is one product to check: op(a) is m×k, op(b) k×n, and each
// matrix is stored with pad extra values per row (leading dimension = row
// length + pad), so strided calls are covered.
type gemmCase struct {
	transA, transB      bool
	m, n, k             int
	padA, padB, padC    int
	alpha, beta         float32
	nanC                bool // fill c with NaN: beta 0 must not read it
	checkAll            bool // compare every value, not a sample
	skipGoKernel        bool // too large for the slow pure-Go kernel
	attentionHeadOffset int  // a and b start this far into their buffers
}

func (tc gemmCase) String() string {
	return fmt.Sprintf("tA=%v,tB=%v,%dx%dx%d,pad=%d/%d/%d,alpha=%g,beta=%g",
		tc.transA, tc.transB, tc.m, tc.n, tc.k, tc.padA, tc.padB, tc.padC, tc.alpha, tc.beta)
}

// gemmData holds the operands of a case and c's initial values.
type gemmData struct {
	a, b, c0      []float32
	lda, ldb, ldc int
	aOff, bOff    int
	aRows, bRows  int
	aCols, bCols  int
	tc            gemmCase
}

func newGemmData(r *rand.Rand, tc gemmCase) *gemmData {
	d := &gemmData{tc: tc, aOff: tc.attentionHeadOffset, bOff: tc.attentionHeadOffset}
	d.aRows, d.aCols = tc.m, tc.k
	if tc.transA {
		d.aRows, d.aCols = tc.k, tc.m
	}
	d.bRows, d.bCols = tc.k, tc.n
	if tc.transB {
		d.bRows, d.bCols = tc.n, tc.k
	}
	// BLAS wants leading dimensions of at least 1 even for empty rows.
	d.lda, d.ldb, d.ldc = max(d.aCols+tc.padA, 1), max(d.bCols+tc.padB, 1), max(tc.n+tc.padC, 1)
	d.a = randSlice(r, d.aOff+d.aRows*d.lda)
	d.b = randSlice(r, d.bOff+d.bRows*d.ldb)
	d.c0 = randSlice(r, tc.m*d.ldc)
	if tc.nanC {
		for i := range d.c0 {
			d.c0[i] = float32(math.NaN())
		}
	}
	return d
}

func (d *gemmData) opA(i, p int) float32 {
	if d.tc.transA {
		return d.a[d.aOff+p*d.lda+i]
	}
	return d.a[d.aOff+i*d.lda+p]
}

func (d *gemmData) opB(p, j int) float32 {
	if d.tc.transB {
		return d.b[d.bOff+j*d.ldb+p]
	}
	return d.b[d.bOff+p*d.ldb+j]
}

// want returns the float64 reference for c[i,j] and the scale its rounding
// error grows with (Σ|a·b| and |beta·c|).
func (d *gemmData) want(i, j int) (val, scale float64) {
	var s, abs float64
	for p := range d.tc.k {
		v := float64(d.opA(i, p)) * float64(d.opB(p, j))
		s += v
		abs += math.Abs(v)
	}
	alpha, beta := float64(d.tc.alpha), float64(d.tc.beta)
	val, scale = alpha*s, math.Abs(alpha)*abs
	if beta != 0 {
		c := float64(d.c0[i*d.ldc+j])
		val += beta * c
		scale += math.Abs(beta * c)
	}
	return val, scale
}

// verify compares c with the reference (all values or a sample including
// the border rows and columns) and checks that the padding between c's rows
// was left alone.
func (d *gemmData) verify(t *testing.T, name string, c []float32) {
	t.Helper()
	tc := d.tc
	tol := 1e-5 * math.Sqrt(float64(max(tc.k, 1)))
	bad := 0
	check := func(i, j int) {
		want, scale := d.want(i, j)
		got := c[i*d.ldc+j]
		if diff := math.Abs(float64(got) - want); diff > tol*scale+1e-30 || math.IsNaN(float64(got)) {
			if bad < 5 {
				t.Errorf("%s %v: c[%d,%d] = %g, want %g (scale %g)", name, tc, i, j, got, want, scale)
			}
			bad++
		}
	}
	if tc.checkAll {
		for i := range tc.m {
			for j := range tc.n {
				check(i, j)
			}
		}
	} else {
		r := rand.New(rand.NewPCG(uint64(tc.m), uint64(tc.n)))
		for j := range tc.n {
			check(0, j)
			check(tc.m-1, j)
		}
		for i := range tc.m {
			check(i, 0)
			check(i, tc.n-1)
		}
		for range 400 {
			check(r.IntN(tc.m), r.IntN(tc.n))
		}
	}
	for i := range tc.m {
		for j := tc.n; j < d.ldc && i*d.ldc+j < len(c); j++ {
			if got, was := c[i*d.ldc+j], d.c0[i*d.ldc+j]; math.Float32bits(got) != math.Float32bits(was) {
				t.Fatalf("%s %v: padding c[%d,%d] changed from %g to %g", name, tc, i, j, was, got)
			}
		}
	}
	if bad > 0 {
		t.Fatalf("%s %v: %d values off", name, tc, bad)
	}
}

// runCase runs the product through compute on a fresh copy of c and verifies it.
func (d *gemmData) runCase(t *testing.T, name string, compute func(g *gemmCall)) {
	t.Helper()
	c := append([]float32(nil), d.c0...)
	g := gemmCall{transA: d.tc.transA, transB: d.tc.transB, m: d.tc.m, n: d.tc.n, k: d.tc.k,
		alpha: d.tc.alpha, beta: d.tc.beta, a: d.a[d.aOff:], b: d.b[d.bOff:], c: c,
		lda: d.lda, ldb: d.ldb, ldc: d.ldc}
	compute(&g)
	d.verify(t, name, c)
}

// gemmCases lists the model's shapes, odd edges and every trans/alpha/beta mix.
func gemmCases(r *rand.Rand) []gemmCase {
	var cases []gemmCase
	// Small and odd shapes, every transpose combination, strided, all values checked.
	small := [][3]int{{1, 1, 1}, {7, 13, 5}, {6, 16, 1}, {6, 16, 2}, {5, 15, 3}, {13, 2, 3},
		{1, 40, 17}, {40, 1, 9}, {12, 32, 256}, {13, 33, 257}, {150, 20, 300}, {7, 4100, 3}}
	ab := [][2]float32{{1, 0}, {0.5, -1.5}, {-2, 1}, {0, 0.25}, {1, 0}}
	for si, s := range small {
		for combo := range 4 {
			v := ab[(si+combo)%len(ab)]
			cases = append(cases, gemmCase{
				transA: combo&1 != 0, transB: combo&2 != 0, m: s[0], n: s[1], k: s[2],
				padA: r.IntN(3) * 5, padB: r.IntN(3) * 3, padC: r.IntN(2) * 7,
				alpha: v[0], beta: v[1], nanC: v[1] == 0 && combo%2 == 0, checkAll: true,
			})
		}
	}
	// k = 0 scales c by beta.
	cases = append(cases, gemmCase{m: 5, n: 9, k: 0, alpha: 1, beta: 0.5, padC: 3, checkAll: true},
		gemmCase{m: 5, n: 9, k: 0, alpha: 1, beta: 0, nanC: true, checkAll: true})
	// Random shapes.
	for range 24 {
		v := ab[r.IntN(len(ab))]
		cases = append(cases, gemmCase{
			transA: r.IntN(2) == 1, transB: r.IntN(2) == 1,
			m: 1 + r.IntN(80), n: 1 + r.IntN(90), k: 1 + r.IntN(600),
			padA: r.IntN(9), padB: r.IntN(9), padC: r.IntN(9),
			alpha: v[0], beta: v[1], checkAll: true,
		})
	}
	// Attention with 16 heads of 64 (rows of q/k/v are 1024 wide, head 5):
	// q·kᵀ against a full chunk and pages of 999, 15 and 7 keys, then P·v.
	const heads, hd = 16, 64
	for _, keys := range []int{1024, 999, 15, 7} {
		cases = append(cases, gemmCase{transB: true, m: 64, n: keys, k: hd,
			padA: (heads - 1) * hd, padB: (heads - 1) * hd, alpha: 0.125, attentionHeadOffset: 5 * hd, checkAll: true})
		cases = append(cases, gemmCase{m: 64, n: hd, k: keys, padB: (heads - 1) * hd, alpha: 1,
			attentionHeadOffset: 5 * hd, checkAll: true})
	}
	cases = append(cases, gemmCase{transB: true, m: 37, n: 1024, k: hd,
		padA: (heads - 1) * hd, padB: (heads - 1) * hd, alpha: 0.125, attentionHeadOffset: 3 * hd, checkAll: true})
	// im2col convolutions (no trans, long n) and the transposed-conv product (transA).
	cases = append(cases,
		gemmCase{m: 24, n: 3700, k: 27, alpha: 1, beta: 1, checkAll: true},
		gemmCase{m: 256, n: 1369, k: 2304, alpha: 1, skipGoKernel: true},
		gemmCase{transA: true, m: 1369, n: 4 * 64, k: 256, alpha: 1, skipGoKernel: true},
	)
	// The Linear layers: x[1005,K]·wᵀ with w [N,K], with and without a bias in c.
	for _, s := range [][2]int{{1024, 3072}, {1024, 4096}, {4096, 1024}, {1024, 1024}} {
		cases = append(cases, gemmCase{transB: true, m: 1005, n: s[1], k: s[0], alpha: 1, beta: 1, skipGoKernel: true})
	}
	cases = append(cases, gemmCase{transB: true, m: 1005, n: 1024, k: 1024, alpha: 1, beta: 0, nanC: true, skipGoKernel: true})
	return cases
}

// TestGemmDriverGoKernel checks the blocking, packing, edge tiles and
// splitting with the pure-Go microkernel, on every architecture.
func TestGemmDriverGoKernel(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for _, tc := range gemmCases(r) {
		if tc.skipGoKernel {
			continue
		}
		d := newGemmData(r, tc)
		d.runCase(t, "serial", func(g *gemmCall) { g.run(gemmGo, 1, 0) })
		// minParallel 0 forces the split even on tiny products.
		d.runCase(t, "split3", func(g *gemmCall) { g.run(gemmGo, 3, 0) })
	}
}

// TestSgemm checks the function the backend calls (the AVX2 GEMM on amd64,
// gonum elsewhere) on every case, the model's full-size shapes included.
func TestSgemm(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, tc := range gemmCases(r) {
		d := newGemmData(r, tc)
		d.runCase(t, "sgemm", func(g *gemmCall) {
			sgemm(g.transA, g.transB, g.m, g.n, g.k, g.alpha, g.a, g.lda, g.b, g.ldb, g.beta, g.c, g.ldc)
		})
	}
}

// TestGemmRejectsShortSlices: a call whose slices are too short for its sizes
// must stop with a message naming the matrix, before any kernel writes.
func TestGemmRejectsShortSlices(t *testing.T) {
	cases := []struct {
		g    gemmCall
		want string
	}{
		{gemmCall{m: 4, n: 4, k: 4, a: make([]float32, 15), b: make([]float32, 16), c: make([]float32, 16), lda: 4, ldb: 4, ldc: 4}, "a has 15 values, needs 16"},
		{gemmCall{m: 4, n: 4, k: 4, transB: true, a: make([]float32, 16), b: make([]float32, 16), c: make([]float32, 16), lda: 4, ldb: 5, ldc: 4}, "b has 16 values, needs 19"},
		{gemmCall{m: 6, n: 16, k: 4, a: make([]float32, 24), b: make([]float32, 64), c: make([]float32, 95), lda: 4, ldb: 16, ldc: 16}, "c has 95 values, needs 96"},
		{gemmCall{m: 4, n: 4, k: 4, a: make([]float32, 16), b: make([]float32, 16), c: make([]float32, 16), lda: 4, ldb: 4, ldc: 3}, "leading dimension of c is 3"},
		{gemmCall{m: -1, n: 4, k: 4, lda: 4, ldb: 4, ldc: 4}, "negative size"},
	}
	for _, tc := range cases {
		msg := func() (msg string) {
			defer func() { msg = fmt.Sprint(recover()) }()
			tc.g.alpha = 1
			tc.g.run(gemmGo, 1, 0)
			return "no panic"
		}()
		if !strings.Contains(msg, tc.want) {
			t.Errorf("got %q, want a message containing %q", msg, tc.want)
		}
	}
}

// BenchmarkSgemm compares sgemm with gonum's Sgemm on the model's shapes.
// name: shape as m×n×k with the transposes; metric GFLOP/s = 2mnk per second.
func BenchmarkSgemm(b *testing.B) {
	type shape struct {
		name           string
		transA, transB bool
		m, n, k        int
		lda, ldb       int
	}
	shapes := []shape{
		{"linear_qkv_1005x3072x1024_tB", false, true, 1005, 3072, 1024, 1024, 1024},
		{"linear_fc1_1005x4096x1024_tB", false, true, 1005, 4096, 1024, 1024, 1024},
		{"linear_fc2_1005x1024x4096_tB", false, true, 1005, 1024, 4096, 4096, 4096},
		{"linear_proj_1005x1024x1024_tB", false, true, 1005, 1024, 1024, 1024, 1024},
		{"attn_qk_64x1024x64_tB_strided", false, true, 64, 1024, 64, 1024, 1024},
		{"attn_pv_64x64x1024_strided", false, false, 64, 64, 1024, 1024, 1024},
		{"conv_im2col_256x1369x2304", false, false, 256, 1369, 2304, 2304, 1369},
	}
	r := rand.New(rand.NewPCG(1, 1))
	for _, s := range shapes {
		ar, br := s.m, s.k
		if s.transA {
			ar = s.k
		}
		if s.transB {
			br = s.n
		}
		a, bm := randSlice(r, ar*s.lda), randSlice(r, br*s.ldb)
		c := make([]float32, s.m*s.n)
		flops := 2 * float64(s.m) * float64(s.n) * float64(s.k)
		b.Run(s.name+"/fast", func(b *testing.B) {
			for b.Loop() {
				sgemm(s.transA, s.transB, s.m, s.n, s.k, 1, a, s.lda, bm, s.ldb, 0, c, s.n)
			}
			b.ReportMetric(flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
		b.Run(s.name+"/gonum", func(b *testing.B) {
			ta, tb := blas.NoTrans, blas.NoTrans
			if s.transA {
				ta = blas.Trans
			}
			if s.transB {
				tb = blas.Trans
			}
			for b.Loop() {
				gonum.Implementation{}.Sgemm(ta, tb, s.m, s.n, s.k, 1, a, s.lda, bm, s.ldb, 0, c, s.n)
			}
			b.ReportMetric(flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}
