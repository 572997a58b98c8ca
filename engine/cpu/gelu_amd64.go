package cpu

import (
	"math"

	"golang.org/x/sys/cpu"
)

// Kernels in gelu_amd64.s: GELU in place on x[0:n], n a multiple of 8
// (geluAVX2, needs AVX2 and FMA) or of 16 (geluAVX512, needs AVX-512F),
// with the constants of gelu.go broadcast in tab.
//
//go:noescape
func geluAVX2(x *float32, n int, tab *geluTable)

//go:noescape
func geluAVX512(x *float32, n int, tab *geluTable)

// geluTable holds each constant the kernels need, broadcast over a ZMM
// register's 16 lanes (AVX2 reads the first 8), as float32 bit patterns.
// Rows are in the order gelu_amd64.s addresses them (64 bytes each).
type geluTable [24][16]uint32

// geluTab is never written after package initialisation.
var geluTab = newGeluTable()

func newGeluTable() *geluTable {
	rows := [...]uint32{
		0x7fffffff, // 0 |x| mask
		math.Float32bits(geluClamp),
		math.Float32bits(-0.5),
		math.Float32bits(geluLog2e),
		math.Float32bits(geluLn2Hi),
		math.Float32bits(geluLn2Lo), // 5
		math.Float32bits(geluE6),
		math.Float32bits(geluE5),
		math.Float32bits(geluE4),
		math.Float32bits(geluE3),
		math.Float32bits(geluE2), // 10
		math.Float32bits(1),
		math.Float32bits(geluP4),
		math.Float32bits(geluP3),
		math.Float32bits(geluP2),
		math.Float32bits(geluP1), // 15
		math.Float32bits(geluP0),
		math.Float32bits(geluQ5),
		math.Float32bits(geluQ4),
		math.Float32bits(geluQ3),
		math.Float32bits(geluQ2), // 20
		math.Float32bits(geluQ1),
		127,        // exponent bias, as an int32
		0x80000000, // sign bit
	}
	t := new(geluTable)
	for i, v := range rows {
		for j := range t[i] {
			t[i][j] = v
		}
	}
	return t
}

// geluKernel names a SIMD kernel: geluNone, or one of the assembly ones.
type geluKernel int

const (
	geluNone geluKernel = iota
	geluKernAVX2
	geluKernAVX512
)

// geluBest picks the widest kernel this CPU runs.
func geluBest() geluKernel {
	switch {
	case cpu.X86.HasAVX512F:
		return geluKernAVX512
	case cpu.X86.HasAVX2 && cpu.X86.HasFMA:
		return geluKernAVX2
	}
	return geluNone
}

// width is how many elements the kernel takes at a time.
func (k geluKernel) width() int {
	if k == geluKernAVX512 {
		return 16
	}
	return 8
}

// run calls the kernel directly (not through a func value, so that the tail
// buffer of geluWith stays on the stack).
func (k geluKernel) run(x *float32, n int) {
	if k == geluKernAVX512 {
		geluAVX512(x, n, geluTab)
		return
	}
	geluAVX2(x, n, geluTab)
}

// geluAsm runs GELU over all of x with the SIMD kernel and returns len(x),
// or returns 0 (touching nothing) when the CPU has none.
func geluAsm(x []float32) int {
	k := geluBest()
	if k == geluNone {
		return 0
	}
	geluWith(k, x)
	return len(x)
}

// geluWith runs kernel k over x. The last partial vector goes through the
// kernel from a padded copy, so every element gets the same arithmetic.
func geluWith(k geluKernel, x []float32) {
	w := k.width()
	n := len(x) - len(x)%w
	if n > 0 {
		k.run(&x[0], n)
	}
	if rem := len(x) - n; rem > 0 {
		var buf [16]float32
		copy(buf[:], x[n:])
		k.run(&buf[0], w)
		copy(x[n:], buf[:rem])
	}
}

// geluVariants lists the assembly kernels and whether this CPU runs them.
func geluVariants() []geluVariant {
	return []geluVariant{
		{"avx2", cpu.X86.HasAVX2 && cpu.X86.HasFMA, func(x []float32) { geluWith(geluKernAVX2, x) }},
		{"avx512", cpu.X86.HasAVX512F, func(x []float32) { geluWith(geluKernAVX512, x) }},
	}
}
