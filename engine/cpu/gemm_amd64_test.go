package cpu

import (
	"math"
	"math/rand/v2"
	"runtime"
	"testing"

	"golang.org/x/sys/cpu"
)

// gemmAsmKernels lists the assembly kernels and whether this CPU runs them.
func gemmAsmKernels() []struct {
	name      string
	kern      gemmKernel
	supported bool
} {
	return []struct {
		name      string
		kern      gemmKernel
		supported bool
	}{
		{"avx2_6x16", gemmAVX2, cpu.X86.HasAVX2 && cpu.X86.HasFMA},
		{"avx512_8x32", gemmAVX512, cpu.X86.HasAVX512F},
	}
}

// TestGemmKernelAsmMatchesGo runs each assembly microkernel and the Go tile
// on the same packed strips, for short and odd k, strided c, and beta 0 over
// NaN, and checks that nothing outside the tile is written.
func TestGemmKernelAsmMatchesGo(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for _, kc := range gemmAsmKernels() {
		if !kc.supported {
			t.Logf("%s: this CPU lacks the instructions, not tested here", kc.name)
			continue
		}
		mr, nr := kc.kern.mr, kc.kern.nr
		ldc := nr + 5
		for _, k := range []int{0, 1, 2, 3, 7, 64, 191, 256} {
			for _, ab := range [][2]float32{{1, 0}, {0.5, 2}, {-1, 1}} {
				a := randSlice(r, max(k, 1)*mr)
				b := randSlice(r, max(k, 1)*nr)
				c0 := randSlice(r, mr*ldc)
				if ab[1] == 0 {
					for i := range c0 {
						c0[i] = float32(math.NaN())
					}
				}
				got, want := append([]float32(nil), c0...), append([]float32(nil), c0...)
				kc.kern.fn(k, &a[0], &b[0], &got[0], ldc, ab[0], ab[1])
				gemmTileGo(mr, nr, k, &a[0], &b[0], &want[0], ldc, ab[0], ab[1])
				for i := range got {
					g, w := float64(got[i]), float64(want[i])
					if i%ldc >= nr {
						if math.Float32bits(got[i]) != math.Float32bits(c0[i]) {
							t.Fatalf("%s k=%d: kernel wrote outside its tile at %d", kc.name, k, i)
						}
						continue
					}
					if math.IsNaN(g) || math.Abs(g-w) > 1e-5*math.Sqrt(float64(k+1))*(1+math.Abs(w)) {
						t.Fatalf("%s k=%d alpha=%g beta=%g: c[%d] = %g, want %g", kc.name, k, ab[0], ab[1], i, g, w)
					}
				}
			}
		}
	}
}

// TestGemmDriverAsmSplit runs each assembly kernel through the blocked loops
// and the split path on every case, including small ones that sgemm itself
// would keep serial.
func TestGemmDriverAsmSplit(t *testing.T) {
	for _, kc := range gemmAsmKernels() {
		if !kc.supported {
			t.Logf("%s: this CPU lacks the instructions, not tested here", kc.name)
			continue
		}
		r := rand.New(rand.NewPCG(9, 10))
		for _, tc := range gemmCases(r) {
			if tc.skipGoKernel {
				continue
			}
			d := newGemmData(r, tc)
			d.runCase(t, kc.name+"-split3", func(g *gemmCall) { g.run(kc.kern, 3, 0) })
		}
	}
}

// BenchmarkGemmKernel times each microkernel alone on L1-resident strips
// (k = its kc): the ceiling one core can reach.
func BenchmarkGemmKernel(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	kernels := append(gemmAsmKernels(), struct {
		name      string
		kern      gemmKernel
		supported bool
	}{"go_6x16", gemmGo, true})
	for _, kc := range kernels {
		if !kc.supported {
			continue
		}
		k, mr, nr := kc.kern.kc, kc.kern.mr, kc.kern.nr
		a, bs := randSlice(r, k*mr), randSlice(r, k*nr)
		c := make([]float32, mr*nr)
		b.Run(kc.name, func(b *testing.B) {
			for b.Loop() {
				kc.kern.fn(k, &a[0], &bs[0], &c[0], nr, 1, 0)
			}
			b.ReportMetric(2*float64(k*mr*nr)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}

// BenchmarkGemmDriverKernels runs the whole blocked GEMM with each assembly
// kernel on one Linear shape (x[1005,1024]·wᵀ, w [3072,1024]), to show what
// CPUs without AVX-512 get.
func BenchmarkGemmDriverKernels(b *testing.B) {
	const m, n, k = 1005, 3072, 1024
	r := rand.New(rand.NewPCG(3, 3))
	a, w := randSlice(r, m*k), randSlice(r, n*k)
	c := make([]float32, m*n)
	for _, kc := range gemmAsmKernels() {
		if !kc.supported {
			continue
		}
		b.Run(kc.name, func(b *testing.B) {
			for b.Loop() {
				g := gemmCall{transB: true, m: m, n: n, k: k, alpha: 1, a: a, b: w, c: c, lda: k, ldb: k, ldc: n}
				g.run(kc.kern, runtime.GOMAXPROCS(0), gemmParallelMin)
			}
			b.ReportMetric(2*float64(m*n*k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}

// TestInterleave8MatchesGo checks the AVX transpose packing against the Go
// loop for k not a multiple of 8 and odd strides, and that it writes only
// the eight columns of each destination row.
func TestInterleave8MatchesGo(t *testing.T) {
	if !gemmHasAVX {
		t.Skip("this CPU has no AVX: interleave8 uses the Go loop only")
	}
	r := rand.New(rand.NewPCG(11, 12))
	for _, sz := range [][3]int{{8, 8, 8}, {64, 1024, 32}, {19, 37, 13}, {7, 9, 8}, {384, 400, 32}} {
		kc, ld, stride := sz[0], sz[1], sz[2]
		src := randSlice(r, 7*ld+kc)
		got := randSlice(r, (kc-1)*stride+8)
		want := append([]float32(nil), got...)
		interleave8(got, stride, src, ld, kc)
		interleave8Go(want, stride, src, ld, 0, kc)
		for i := range got {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				t.Fatalf("kc=%d ld=%d stride=%d: dst[%d] = %g, want %g", kc, ld, stride, i, got[i], want[i])
			}
		}
		for p := range kc {
			for q := range 8 {
				if got[p*stride+q] != src[q*ld+p] {
					t.Fatalf("kc=%d: dst[%d,%d] = %g, want src[%d,%d] = %g", kc, p, q, got[p*stride+q], q, p, src[q*ld+p])
				}
			}
		}
	}
}
