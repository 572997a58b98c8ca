package cpu

import (
	"runtime"

	"golang.org/x/sys/cpu"
)

// Microkernels in gemm_amd64.s, with the contract of gemmKernel.fn.
//
//go:noescape
func sgemmKernel6x16(k int, a, b, c *float32, ldc int, alpha, beta float32)

//go:noescape
func sgemmKernel8x32(k int, a, b, c *float32, ldc int, alpha, beta float32)

// transpose8 (gemm_amd64.s, AVX) writes dst[p*stride+r] = src[r*ld+p] for
// r < 8, p < 8·blocks.
//
//go:noescape
func transpose8(dst *float32, stride int, src *float32, ld int, blocks int)

// gemmHasAVX says whether transpose8 can run.
var gemmHasAVX = cpu.X86.HasAVX

// interleave8 is interleave for eight rows: whole 8×8 blocks through
// transpose8, the remaining k steps in Go.
func interleave8(dst []float32, stride int, src []float32, ld, kc int) {
	blocks := 0
	if gemmHasAVX && kc >= 8 {
		blocks = kc / 8
		// The assembly does not check bounds: make sure both ends are inside.
		_ = src[7*ld+8*blocks-1]
		_ = dst[(8*blocks-1)*stride+7]
		transpose8(&dst[0], stride, &src[0], ld, blocks)
	}
	interleave8Go(dst, stride, src, ld, 8*blocks, kc)
}

var (
	// gemmAVX2 needs AVX2 and FMA: 12 YMM accumulators.
	gemmAVX2 = gemmKernel{mr: 6, nr: 16, kc: 256, fn: sgemmKernel6x16}
	// gemmAVX512 needs AVX-512F: 16 ZMM accumulators, twice the FMA width;
	// kc 384 measured best (192-512 tried): fewer write-backs of c per k.
	gemmAVX512 = gemmKernel{mr: 8, nr: 32, kc: 384, fn: sgemmKernel8x32}
)

// gemmBest returns the widest kernel this CPU runs, or false when it lacks
// AVX2 or FMA.
func gemmBest() (gemmKernel, bool) {
	switch {
	case cpu.X86.HasAVX512F:
		return gemmAVX512, true
	case cpu.X86.HasAVX2 && cpu.X86.HasFMA:
		return gemmAVX2, true
	}
	return gemmKernel{}, false
}

// sgemmFast computes c = alpha·op(a)·op(b) + beta·c with the blocked SIMD
// GEMM and reports true, or reports false (touching nothing) when the CPU
// has no kernel here.
func sgemmFast(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) bool {
	kern, ok := gemmBest()
	if !ok {
		return false
	}
	g := gemmCall{transA: transA, transB: transB, m: m, n: n, k: k, alpha: alpha, beta: beta,
		a: a, b: b, c: c, lda: lda, ldb: ldb, ldc: ldc}
	g.run(kern, runtime.GOMAXPROCS(0), gemmParallelMin)
	return true
}
