//go:build !amd64

package cpu

// geluAsm has no SIMD kernel on this architecture: it does nothing and
// reports 0 elements done, so geluInPlace runs geluGo on all of x.
func geluAsm(x []float32) int { return 0 }

// geluVariants lists the SIMD kernels: none here.
func geluVariants() []geluVariant { return nil }
