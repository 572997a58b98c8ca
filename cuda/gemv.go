//go:build cuda

package cuda

import (
	"fmt"
	"slices"
	"unsafe"

	"gorgonia.org/cu"

	"github.com/lingbotmap/lingbotmap/engine/backend"
)

// The camera head in bf16 (Config.CameraHeadBF16): its matrices are stored
// as bf16 only, rounded once at load, and its linears, a token a frame, run
// the GEMV kernels of kernels/gemv.cu, which read the weights in 16-byte
// vectors and keep the activations and the sums in fp32. cuBLASLt has no
// GEMM with an fp32 A and a bf16 B, and rounding the token to bf16 would
// change more than the weights.

// gemvWarps is GEMV_WARPS of kernels/gemv.cu: the outputs of a block.
const gemvWarps = 8

// headBF16Matrix says whether a head parameter of this shape is kept in
// bf16 when the camera head runs in bf16: a matrix whose rows are whole
// 16-byte vectors of bf16. Biases, norms and the 9-wide pose embedding (and
// the empty pose, an input) stay fp32.
func headBF16Matrix(shape []int) bool {
	return len(shape) == 2 && shape[0] > 0 && shape[1] > 0 && shape[1]%8 == 0
}

// uploadHeadBF16 stores a head matrix as bf16 only. The values are rounded on
// the host and copied as they are: no fp32 copy is ever made on the device.
func (g *gpu) uploadHeadBF16(data []float32, shape []int) backend.Tensor {
	bits := make([]uint16, len(data))
	for i, v := range data {
		bits[i] = bf16Bits(v)
	}
	var out *Tensor
	g.run("upload", func() error {
		bf, err := g.pool.getAs(int64(len(bits))*2, catWeightBF)
		if err != nil {
			return err
		}
		// toDevice copies floats: two bf16 values a float (a row holds a
		// multiple of 8).
		if err := g.toDevice(bf.ptr, unsafe.Slice((*float32)(unsafe.Pointer(&bits[0])), len(bits)/2)); err != nil {
			g.pool.put(bf)
			return err
		}
		out = &Tensor{buf: &buffer{live: true, bfOnly: true, headBF: true, cat: catWeight, bf: bf}, shape: slices.Clone(shape)}
		return nil
	})
	if out == nil {
		return placeholder(shape)
	}
	return out
}

// gemvKernel is the kernel for a block row of r rows of x.
func gemvKernel(rows int) (name string, r int) {
	switch {
	case rows <= 1:
		return "gemv_bf16_r1", 1
	case rows == 2:
		return "gemv_bf16_r2", 2
	case rows <= 4:
		return "gemv_bf16_r4", 4
	}
	return "gemv_bf16_r8", 8
}

// gemvBF16 writes x·wᵀ + b, plus rt when set, then the exact GELU when gelu,
// to out (fp32 [rows, m]) for a head matrix w kept in bf16. Owner thread.
func (g *gpu) gemvBF16(out cu.DevicePtr, xt, wt, bt, rt *Tensor, rows, k, m int, gelu bool) error {
	if rows == 0 || m == 0 {
		return nil
	}
	if wt.buf.bf == nil || k%8 != 0 {
		return fmt.Errorf("bf16 GEMV on a %v matrix without its bf16 rows of 8", wt.shape)
	}
	if err := g.restoreF32(xt); err != nil {
		return err
	}
	xp := xt.ptr()
	if !aligned(16, xp) {
		s, err := g.scratch(int64(rows) * int64(k) * 4)
		if err != nil {
			return err
		}
		defer g.pool.put(s)
		if err := g.copy2D(s.ptr, k, xp, k, rows, k); err != nil {
			return err
		}
		xp = s.ptr
	}
	name, r := gemvKernel(rows)
	chunks := (rows + r - 1) / r
	if chunks > 65535 {
		return fmt.Errorf("bf16 GEMV on %d rows: more than %d block rows", rows, 65535)
	}
	act := 0
	if gelu {
		act = 1
	}
	grid := [3]int{(m + gemvWarps - 1) / gemvWarps, chunks, 1}
	return g.launch("gemv", name, grid, [3]int{gemvWarps * 32, 1, 1}, 0, out, xp, wt.buf.bf.ptr, ptrOf(bt), ptrOf(rt), rows, k, m, act)
}
