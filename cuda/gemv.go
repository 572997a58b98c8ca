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

// gemvRows is the block row of the GEMV kernels for rows rows of x: 1, 2,
// 4 or 8 (then several block rows).
func gemvRows(rows int) int {
	switch {
	case rows <= 1:
		return 1
	case rows == 2:
		return 2
	case rows <= 4:
		return 4
	}
	return 8
}

// The kernels by block row (gemvRows), plain and normalising.
var (
	gemvNames     = map[int]string{1: "gemv_bf16_r1", 2: "gemv_bf16_r2", 4: "gemv_bf16_r4", 8: "gemv_bf16_r8"}
	gemvNormNames = map[int]string{1: "gemv_norm_bf16_r1", 2: "gemv_norm_bf16_r2", 4: "gemv_norm_bf16_r4", 8: "gemv_norm_bf16_r8"}
)

// gemvNormShared bounds the shared memory of a GEMV that normalises its
// rows (R·k floats): what a block gets without asking, less room for the
// kernel's own reduction buffer (a phase 1 of more than 4 frames at the
// camera head's width normalises apart).
const gemvNormShared = 47 << 10

// gemvNorm is the LayerNorm a GEMV applies to x first (NormLinear): its
// affine weight and bias (0 when absent) and eps.
type gemvNorm struct {
	w, b cu.DevicePtr
	eps  float32
}

// normGEMV is NormLinear on a head matrix kept in bf16. With
// Config.CameraHeadFuseNorm each block of the GEMV normalises its rows of x
// itself; otherwise, or when they do not fit its shared memory, the
// LayerNorm runs as its own kernel first.
func (g *gpu) normGEMV(x, nw, nb backend.Tensor, eps float32, w, b backend.Tensor, act backend.Activation) backend.Tensor {
	xt, wt, bt := g.tensor(x), g.gemmTensor(w), g.tensor(b)
	nwt, nbt := g.tensor(nw), g.tensor(nb)
	rows, k, m, shape := linearShape("NormLinear", xt, wt, bt)
	checkNormAffine(xt, nwt, nbt, k)
	if !g.cfg.CameraHeadFuseNorm || gemvRows(rows)*k*4 > gemvNormShared || !aligned(16, ptrOf(nwt), ptrOf(nbt)) {
		h := g.LayerNorm(x, nw, nb, eps)
		y := g.Linear(h, w, b, act)
		g.Free(h)
		return y
	}
	return g.output(shape, "NormLinear", func(out *Tensor) error {
		return g.gemvBF16(out.ptr(), xt, wt, bt, nil, rows, k, m, act == backend.ActGELU, &gemvNorm{ptrOf(nwt), ptrOf(nbt), eps})
	})
}

// gemvBF16 writes x·wᵀ + b, plus rt when set, then the exact GELU when gelu,
// to out (fp32 [rows, m]) for a head matrix w kept in bf16; with norm, x is
// first normalised. Owner thread.
func (g *gpu) gemvBF16(out cu.DevicePtr, xt, wt, bt, rt *Tensor, rows, k, m int, gelu bool, norm *gemvNorm) error {
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
	r := gemvRows(rows)
	chunks := (rows + r - 1) / r
	if chunks > 65535 {
		return fmt.Errorf("bf16 GEMV on %d rows: more than %d block rows", rows, 65535)
	}
	act := 0
	if gelu {
		act = 1
	}
	grid, block := [3]int{(m + gemvWarps - 1) / gemvWarps, chunks, 1}, [3]int{gemvWarps * 32, 1, 1}
	args := []any{out, xp, wt.buf.bf.ptr, ptrOf(bt), ptrOf(rt), rows, k, m, act}
	if norm == nil {
		return g.launch("gemv", gemvNames[r], grid, block, 0, args...)
	}
	shared := r * k * 4
	if shared > gemvNormShared {
		return fmt.Errorf("bf16 GEMV normalising %d rows of %d: %d bytes of shared memory", r, k, shared)
	}
	return g.launch("gemv", gemvNormNames[r], grid, block, shared, append(args, norm.w, norm.b, norm.eps)...)
}
