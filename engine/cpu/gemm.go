package cpu

// A blocked float32 GEMM in the Goto/BLIS style, for the CPU backend's hot
// path (Linear, attention, im2col convolutions).
//
// c[m,n] = alpha·op(a)·op(b) + beta·c, all row-major, is computed with an
// mr×nr microkernel as:
//
//	for jc over n in steps of gemmNC          (B panel, lives in L3)
//	  for pc over k in steps of kc            (one k-block)
//	    pack op(b)[pc:pc+kc, jc:jc+nc] into nr-wide strips, [kc][nr] each
//	    for ic over m in steps of gemmMC      (A block, lives in L2)
//	      pack op(a)[ic:ic+mc, pc:pc+kc] into mr-row strips, [kc][mr] each
//	      for each B strip (stays in L1), for each A strip:
//	        microkernel: the mr×nr tile in registers, kc rank-1 updates,
//	        then c = alpha·tile + beta·c
//
// The kernels (gemm_amd64.s) are 8×32 for AVX-512 (16 ZMM accumulators, 2 B
// loads and 8 broadcasts of A per k step, kc 384) and 6×16 for AVX2+FMA (12
// YMM accumulators, kc 256). Their rates and the choices below are recorded
// with their measurements in NOTES.md (BenchmarkGemmKernel, BenchmarkSgemm).
//
// Packing absorbs the transposes and strides, and pads partial strips with
// zeros, so a kernel always computes a full tile; tiles that overhang the
// edge of c go through a small buffer and are merged in Go. Rows of a matrix
// become strip columns through 8×8 AVX transposes (transpose8). beta is used
// on the first k-block only; later blocks accumulate (beta 1). beta 0 means c
// is never read, as in BLAS, so NaNs in uninitialised output cannot leak.
//
// Large products run on several goroutines that share each packed B panel
// and take (row block, column range) items from a counter (see parallel).
// Small products stay on the caller's goroutine: attention calls sgemm from
// tasks that are already parallel.

import (
	"fmt"
	"sync"
	"sync/atomic"
	"unsafe"
)

const (
	gemmMC = 144  // rows per packed A block (a multiple of every mr): ≤ 216 KiB, in L2
	gemmNC = 4096 // columns per packed B panel (a multiple of every nr): 4 MiB, in L3

	// gemmMaxTile bounds mr·nr of any microkernel (the edge-tile buffer).
	gemmMaxTile = 8 * 32

	// gemmParallelMin is the m·n·k below which a product runs serially;
	// 64×1024×64 attention blocks (4 Mi) stay serial.
	gemmParallelMin = 1 << 23
)

// gemmKernel is a microkernel and its tile: fn computes the mr×nr tile
// acc = Σ_p a[p*mr+i]·b[p*nr+j] over k steps of packed strips and writes
// c[i*ldc+j] = alpha·acc + beta·c[i*ldc+j] (c not read when beta is 0).
// kc is its k-block, tuned per kernel (the strips it streams stay near L1).
type gemmKernel struct {
	mr, nr, kc int
	fn         func(k int, a, b, c *float32, ldc int, alpha, beta float32)
}

// gemmCall is one product in the layout sgemm receives it.
type gemmCall struct {
	transA, transB bool
	m, n, k        int
	alpha, beta    float32
	a, b, c        []float32
	lda, ldb, ldc  int
}

// gemmBuffers holds packed panels.
type gemmBuffers struct {
	a, b []float32
}

// gemmPool recycles packed panels between calls: attention issues thousands of
// small products per frame, and fresh 256 KiB panels each time would make the
// garbage collector a large share of the work. It holds no state that affects
// results.
var gemmPool = sync.Pool{New: func() any { return new(gemmBuffers) }}

// grow returns s resized to n, reallocating only when it is too small.
func grow(s []float32, n int) []float32 {
	if cap(s) < n {
		return make([]float32, n)
	}
	return s[:n]
}

// check panics with a description when the slices cannot hold the matrices
// the dimensions describe: the assembly kernel does no bounds checks, so this
// is the line that keeps a wrong call from writing outside c.
func (g *gemmCall) check() {
	if g.m < 0 || g.n < 0 || g.k < 0 {
		panic(fmt.Sprintf("cpu: sgemm with negative size m=%d n=%d k=%d", g.m, g.n, g.k))
	}
	need := func(name string, s []float32, rows, cols, ld int) {
		if rows == 0 || cols == 0 {
			return
		}
		if ld < cols {
			panic(fmt.Sprintf("cpu: sgemm: leading dimension of %s is %d, less than its %d columns", name, ld, cols))
		}
		if n := (rows-1)*ld + cols; len(s) < n {
			panic(fmt.Sprintf("cpu: sgemm: %s has %d values, needs %d for %d×%d with leading dimension %d", name, len(s), n, rows, cols, ld))
		}
	}
	ar, ac := g.m, g.k
	if g.transA {
		ar, ac = ac, ar
	}
	br, bc := g.k, g.n
	if g.transB {
		br, bc = bc, br
	}
	need("a", g.a, ar, ac, g.lda)
	need("b", g.b, br, bc, g.ldb)
	need("c", g.c, g.m, g.n, g.ldc)
}

// run computes the product with kern, on up to threads goroutines when
// m·n·k is at least minParallel.
func (g *gemmCall) run(kern gemmKernel, threads, minParallel int) {
	g.check()
	if g.m == 0 || g.n == 0 {
		return
	}
	if g.k == 0 || g.alpha == 0 {
		g.scaleC()
		return
	}
	if threads > 1 && g.m*g.n*g.k >= minParallel {
		g.parallel(kern, threads)
		return
	}
	g.serial(kern)
}

// scaleC handles the products with nothing to accumulate: c = beta·c.
func (g *gemmCall) scaleC() {
	for i := range g.m {
		row := g.c[i*g.ldc : i*g.ldc+g.n]
		if g.beta == 0 {
			clear(row)
			continue
		}
		for j := range row {
			row[j] *= g.beta
		}
	}
}

// serial runs the blocked loops on the calling goroutine.
func (g *gemmCall) serial(kern gemmKernel) {
	buf := gemmPool.Get().(*gemmBuffers)
	defer gemmPool.Put(buf)
	kcMax := min(g.k, kern.kc)
	buf.a = grow(buf.a, roundUp(min(g.m, gemmMC), kern.mr)*kcMax)
	buf.b = grow(buf.b, roundUp(min(g.n, gemmNC), kern.nr)*kcMax)
	for jc := 0; jc < g.n; jc += gemmNC {
		nc := min(gemmNC, g.n-jc)
		for pc := 0; pc < g.k; pc += kern.kc {
			kc := min(kern.kc, g.k-pc)
			beta := g.beta
			if pc > 0 {
				beta = 1
			}
			g.packB(buf.b, kern.nr, pc, kc, jc, nc)
			for ic := 0; ic < g.m; ic += gemmMC {
				mc := min(gemmMC, g.m-ic)
				g.packA(buf.a, kern.mr, ic, mc, pc, kc)
				g.macro(kern, buf.a, buf.b, ic, mc, jc, nc, kc, beta)
			}
		}
	}
}

// parallel runs the blocked loops on threads goroutines that share each
// packed B panel: for every k-block they first pack the panel's strips
// together, then take (row block, column range) items from a counter, each
// packing its own A block. Handing out items instead of fixed halves keeps
// both cores busy when one of them is also serving other work.
func (g *gemmCall) parallel(kern gemmKernel, threads int) {
	shared := gemmPool.Get().(*gemmBuffers)
	defer gemmPool.Put(shared)
	kcMax := min(g.k, kern.kc)
	shared.b = grow(shared.b, roundUp(min(g.n, gemmNC), kern.nr)*kcMax)
	own := make([]*gemmBuffers, threads)
	for w := range own {
		own[w] = gemmPool.Get().(*gemmBuffers)
		defer gemmPool.Put(own[w])
	}

	// Rows per item: at most gemmMC, and small enough for about four items
	// per thread, but not below two strips.
	mc := min(gemmMC, max(roundUp((g.m+4*threads-1)/(4*threads), kern.mr), 2*kern.mr))
	mBlocks := (g.m + mc - 1) / mc
	for w := range own {
		own[w].a = grow(own[w].a, roundUp(min(g.m, mc), kern.mr)*kcMax)
	}
	for jc := 0; jc < g.n; jc += gemmNC {
		nc := min(gemmNC, g.n-jc)
		// Too few row blocks for the threads: cut the panel into column ranges too.
		colW := roundUp(nc, kern.nr)
		if mBlocks < 2*threads {
			chunks := (2*threads + mBlocks - 1) / mBlocks
			colW = roundUp((nc+chunks-1)/chunks, kern.nr)
		}
		nChunks := (nc + colW - 1) / colW
		for pc := 0; pc < g.k; pc += kern.kc {
			kc := min(kern.kc, g.k-pc)
			beta := g.beta
			if pc > 0 {
				beta = 1
			}
			const packGroup = 8 // B strips per packing item
			strips := (nc + kern.nr - 1) / kern.nr
			spread(threads, (strips+packGroup-1)/packGroup, func(_, item int) {
				jr := item * packGroup * kern.nr
				g.packB(shared.b[jr*kc:], kern.nr, pc, kc, jc+jr, min(packGroup*kern.nr, nc-jr))
			})
			spread(threads, mBlocks*nChunks, func(w, item int) {
				ic, j0 := item/nChunks*mc, item%nChunks*colW
				pa := own[w].a
				g.packA(pa, kern.mr, ic, min(mc, g.m-ic), pc, kc)
				g.macro(kern, pa, shared.b[j0*kc:], ic, min(mc, g.m-ic), jc+j0, min(colW, nc-j0), kc, beta)
			})
		}
	}
}

// spread runs fn(worker, item) for items 0..items-1 on up to threads
// goroutines (the caller is worker 0), each taking the next item from a
// shared counter until none are left.
func spread(threads, items int, fn func(worker, item int)) {
	var next atomic.Int64
	work := func(w int) {
		for {
			item := int(next.Add(1)) - 1
			if item >= items {
				return
			}
			fn(w, item)
		}
	}
	var wg sync.WaitGroup
	for w := 1; w < min(threads, items); w++ {
		wg.Go(func() { work(w) })
	}
	work(0)
	wg.Wait()
}

func roundUp(x, unit int) int { return (x + unit - 1) / unit * unit }

// macro runs the microkernel over one packed A block and one packed B panel,
// updating c[ic:ic+mc, jc:jc+nc].
func (g *gemmCall) macro(kern gemmKernel, pa, pb []float32, ic, mc, jc, nc, kc int, beta float32) {
	var edge [gemmMaxTile]float32
	for jr := 0; jr < nc; jr += kern.nr {
		nr := min(kern.nr, nc-jr)
		b := &pb[jr*kc]
		for ir := 0; ir < mc; ir += kern.mr {
			mr := min(kern.mr, mc-ir)
			a := &pa[ir*kc]
			off := (ic+ir)*g.ldc + jc + jr
			if mr == kern.mr && nr == kern.nr {
				kern.fn(kc, a, b, &g.c[off], g.ldc, g.alpha, beta)
				continue
			}
			// Overhanging tile: compute all of it into edge, keep the part inside c.
			kern.fn(kc, a, b, &edge[0], kern.nr, g.alpha, 0)
			for i := range mr {
				row := g.c[off+i*g.ldc : off+i*g.ldc+nr]
				src := edge[i*kern.nr : i*kern.nr+nr]
				if beta == 0 {
					copy(row, src)
					continue
				}
				for j, v := range src {
					row[j] = v + beta*row[j]
				}
			}
		}
	}
}

// packA copies op(a)[ic:ic+mc, pc:pc+kc] into mr-row strips laid out
// [kc][mr], zero-padding the last strip.
func (g *gemmCall) packA(dst []float32, mr, ic, mc, pc, kc int) {
	for ir := 0; ir < mc; ir += mr {
		rows := min(mr, mc-ir)
		strip := dst[ir*kc : ir*kc+kc*mr]
		if rows < mr {
			clear(strip)
		}
		i0 := ic + ir
		if g.transA {
			// op(a)[i][p] = a[p*lda+i]: row p of a holds the strip's k step p.
			for p := range kc {
				src := g.a[(pc+p)*g.lda+i0 : (pc+p)*g.lda+i0+rows]
				copy(strip[p*mr:p*mr+rows], src)
			}
			continue
		}
		interleave(strip, mr, g.a[i0*g.lda+pc:], g.lda, rows, kc)
	}
}

// packB copies op(b)[pc:pc+kc, jc:jc+nc] into nr-column strips laid out
// [kc][nr], zero-padding the last strip.
func (g *gemmCall) packB(dst []float32, nr, pc, kc, jc, nc int) {
	for jr := 0; jr < nc; jr += nr {
		cols := min(nr, nc-jr)
		strip := dst[jr*kc : jr*kc+kc*nr]
		if cols < nr {
			clear(strip)
		}
		j0 := jc + jr
		if g.transB {
			// op(b)[p][j] = b[j*ldb+p]: row j of b is the strip's column j.
			interleave(strip, nr, g.b[j0*g.ldb+pc:], g.ldb, cols, kc)
			continue
		}
		for p := range kc {
			src := g.b[(pc+p)*g.ldb+j0 : (pc+p)*g.ldb+j0+cols]
			copy(strip[p*nr:p*nr+cols], src)
		}
	}
}

// interleave writes dst[p*stride+r] = src[r*ld+p] for r < rows, p < kc: it
// turns rows of a matrix into the columns of a packed strip. Rows go eight
// at a time (interleave8: SIMD transposes where the CPU has them).
func interleave(dst []float32, stride int, src []float32, ld, rows, kc int) {
	r := 0
	for ; r+8 <= rows; r += 8 {
		interleave8(dst[r:], stride, src[r*ld:], ld, kc)
	}
	for ; r < rows; r++ {
		d := dst[r:]
		for p, v := range src[r*ld:][:kc] {
			d[p*stride] = v
		}
	}
}

// interleave8Go is interleave for eight rows and k steps p0..kc-1, so that
// each k step writes 32 contiguous bytes.
func interleave8Go(dst []float32, stride int, src []float32, ld, p0, kc int) {
	s0 := src[0*ld:][:kc]
	s1 := src[1*ld:][:kc]
	s2 := src[2*ld:][:kc]
	s3 := src[3*ld:][:kc]
	s4 := src[4*ld:][:kc]
	s5 := src[5*ld:][:kc]
	s6 := src[6*ld:][:kc]
	s7 := src[7*ld:][:kc]
	for p := p0; p < len(s0); p++ {
		d := dst[p*stride:][:8]
		d[0], d[1], d[2], d[3] = s0[p], s1[p], s2[p], s3[p]
		d[4], d[5], d[6], d[7] = s4[p], s5[p], s6[p], s7[p]
	}
}

// gemmGo is the pure-Go 6×16 microkernel: the specification the assembly
// kernels are tested against, and what runs the blocked loops in tests on
// machines without AVX2.
var gemmGo = gemmKernel{mr: 6, nr: 16, kc: 256, fn: gemmKernelGo}

// gemmKernelGo is gemmTileGo at 6×16.
func gemmKernelGo(k int, a, b, c *float32, ldc int, alpha, beta float32) {
	gemmTileGo(6, 16, k, a, b, c, ldc, alpha, beta)
}

// gemmTileGo is the microkernel contract in plain Go for any mr×nr up to
// gemmMaxTile; the tests hold each assembly kernel against it.
func gemmTileGo(mr, nr, k int, a, b, c *float32, ldc int, alpha, beta float32) {
	pa := unsafe.Slice(a, k*mr)
	pb := unsafe.Slice(b, k*nr)
	var acc [gemmMaxTile]float32
	for p := range k {
		bp := pb[p*nr : p*nr+nr]
		for i := range mr {
			av := pa[p*mr+i]
			row := acc[i*nr : i*nr+nr]
			for j, bv := range bp {
				row[j] += av * bv
			}
		}
	}
	pc := unsafe.Slice(c, (mr-1)*ldc+nr)
	for i := range mr {
		row := pc[i*ldc : i*ldc+nr]
		for j := range row {
			if beta == 0 {
				row[j] = alpha * acc[i*nr+j]
			} else {
				row[j] = alpha*acc[i*nr+j] + beta*row[j]
			}
		}
	}
}
