package engine

import (
	"math"
	"runtime"
	"sync"
)

// expBits is a float32's exponent field: all ones for NaN and ±Inf.
const expBits = 0x7f800000

// firstNonFinite returns the index of the first NaN or ±Inf in p, or -1.
// Every frame's pixels pass through it before they go to the device, which
// waits meanwhile, so a large frame is scanned in parts at once
// (BenchmarkFirstNonFinite compares one loop with the parts).
func firstNonFinite(p []float32) int {
	parts := 1
	if len(p) >= 1<<16 {
		parts = min(runtime.GOMAXPROCS(0), 4)
	}
	first := make([]int, parts)
	var wg sync.WaitGroup
	for k := range parts {
		lo, hi := len(p)*k/parts, len(p)*(k+1)/parts
		wg.Go(func() {
			first[k] = -1
			for i, v := range p[lo:hi] {
				if math.Float32bits(v)&expBits == expBits {
					first[k] = lo + i
					return
				}
			}
		})
	}
	wg.Wait()
	for _, i := range first {
		if i >= 0 {
			return i
		}
	}
	return -1
}
