//go:build cuda

package cuda

import (
	"math"

	"gorgonia.org/cu"
)

// The elementwise and copy kernels have forms that move four values a
// thread with 16-byte accesses and 32-bit indices; these helpers pick them
// when the sizes and addresses allow and fall back to the scalar kernels.

// fits4 says n values can go four at a time with 32-bit indices.
func fits4(n int64) bool { return n%4 == 0 && n/4 < math.MaxInt32 }

func aligned(align cu.DevicePtr, ptrs ...cu.DevicePtr) bool {
	for _, p := range ptrs {
		if p%align != 0 {
			return false
		}
	}
	return true
}

// toBF16 rounds n floats at src to bf16 at dst (owner thread).
func (g *gpu) toBF16(dst, src cu.DevicePtr, n int64) error {
	if fits4(n) && aligned(16, src) && aligned(8, dst) {
		return g.launch1D("elementwise", "f32_to_bf16_v4", n/4, dst, src, int(n/4))
	}
	return g.launch1D("elementwise", "f32_to_bf16_k", n, dst, src, n)
}

// copy2D copies a rows×cols block of floats between row strides.
func (g *gpu) copy2D(dst cu.DevicePtr, ldd int, src cu.DevicePtr, lds int, rows, cols int) error {
	n := int64(rows) * int64(cols)
	if cols%4 == 0 && ldd%4 == 0 && lds%4 == 0 && fits4(n) && aligned(16, dst, src) {
		return g.launch1D("elementwise", "copy2d_v4", n/4, dst, ldd/4, src, lds/4, rows, cols/4)
	}
	return g.launch1D("movement", "copy2d_f32", n, dst, int64(ldd), src, int64(lds), int64(rows), int64(cols))
}
