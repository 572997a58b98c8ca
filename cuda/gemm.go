//go:build cuda

package cuda

import (
	"fmt"
	"slices"

	"gorgonia.org/cu"

	"github.com/lingbotmap/lingbotmap/engine/backend"
)

// gemmPrec is how a GEMM multiplies: fp32 operands exactly, fp32 operands
// on the TF32 tensor cores, or bf16 operands; it always accumulates and
// writes fp32.
type gemmPrec int

const (
	gemmF32 gemmPrec = iota
	gemmTF32
	gemmBF16
)

// rowGemm computes C[m,n] = op(A)[m,k]·op(B)[k,n] (+ bias[n]) on row-major
// fp32 or bf16 operands with fp32 output. Owner thread only.
func (g *gpu) rowGemm(prec gemmPrec, transA, transB bool, m, n, k int, a cu.DevicePtr, lda int, b cu.DevicePtr, ldb int, c cu.DevicePtr, ldc int, bias cu.DevicePtr) error {
	return g.rowGemmAdd(prec, transA, transB, m, n, k, a, lda, b, ldb, c, ldc, bias, 0)
}

// rowGemmAdd is rowGemm plus, when add is not 0, a row-major [m, n] matrix
// add with C's leading dimension, which must not be C itself. cuBLASLt is
// column-major, so it is asked for Cᵀ = op(B)ᵀ·op(A)ᵀ (+ addᵀ), whose bias
// runs along its rows. Owner thread only.
func (g *gpu) rowGemmAdd(prec gemmPrec, transA, transB bool, m, n, k int, a cu.DevicePtr, lda int, b cu.DevicePtr, ldb int, c cu.DevicePtr, ldc int, bias, add cu.DevicePtr) error {
	if m == 0 || n == 0 {
		return nil
	}
	if k == 0 {
		return fmt.Errorf("GEMM with an empty inner dimension (%dx%dx0)", m, n)
	}
	bf := prec == gemmBF16
	key := gemmKey{bf: bf, tf32: prec == gemmTF32, transA: transB, transB: transA, m: n, n: m, k: k, lda: ldb, ldb: lda, ldc: ldc, bias: bias != 0}
	ok, err := g.lt.matmul(key, b, a, add, c, bias)
	if err != nil || ok {
		return err
	}
	if bias != 0 {
		// No algorithm with the bias epilogue: GEMM without it, then the bias.
		key.bias = false
		if ok, err = g.lt.matmul(key, b, a, add, c, 0); err != nil {
			return err
		}
		if ok {
			return g.launch1D("elementwise", "bias_act_f32", int64(m)*int64(n), c, bias, int64(m), n, 0)
		}
	}
	if add != 0 {
		// No accumulating algorithm: the plain GEMM (with its own fallback),
		// then add row by row.
		if err := g.rowGemmAdd(prec, transA, transB, m, n, k, a, lda, b, ldb, c, ldc, bias, 0); err != nil {
			return err
		}
		return g.addRows(c, ldc, add, m, n)
	}
	return fmt.Errorf("cuBLASLt has no algorithm for a %dx%dx%d GEMM (bf16 %v)", m, n, k, bf)
}

// addRows is c[i, j] += add[i, j] on [m, n] matrices with leading dimension
// ldc, the accumulating GEMM's fallback (only contiguous ones are needed).
func (g *gpu) addRows(c cu.DevicePtr, ldc int, add cu.DevicePtr, m, n int) error {
	if ldc != n {
		return fmt.Errorf("accumulating GEMM fallback on a %dx%d matrix with leading dimension %d", m, n, ldc)
	}
	total := int64(m) * int64(n)
	return g.launch1D("elementwise", "binary_f32", total, c, c, add, total, total, 0)
}

// operand returns the GEMM form of x: itself in fp32, or a bf16 copy in
// scratch that the caller releases.
func (g *gpu) operand(x cu.DevicePtr, n int64, bf bool) (cu.DevicePtr, *buffer, error) {
	if !bf {
		return x, nil, nil
	}
	s, err := g.scratch(n * 2)
	if err != nil {
		return 0, nil, err
	}
	if err := g.toBF16(s.ptr, x, n); err != nil {
		g.pool.put(s)
		return 0, nil, err
	}
	return s.ptr, s, nil
}

// gemmPrec picks a GEMM's arithmetic: bf16 for trunk weights in BF16 mode;
// otherwise fp32, on the TF32 tensor cores only for convolutions in BF16
// mode, as the reference's cuDNN convolutions run by PyTorch's default
// (its matmuls keep TF32 off).
func (g *gpu) gemmPrec(bf, conv bool) gemmPrec {
	switch {
	case bf:
		return gemmBF16
	case conv && g.cfg.Precision.bf16Trunk():
		return gemmTF32
	}
	return gemmF32
}

// bf16Weight says w's GEMMs run in bf16.
func (g *gpu) bf16Weight(w *Tensor) bool { return w.buf.trunk && g.cfg.Precision.bf16Trunk() }

// weightOperand is w in the precision its GEMM runs in.
func (g *gpu) weightOperand(w *Tensor) (cu.DevicePtr, bool, error) {
	if g.bf16Weight(w) {
		p, err := g.bf16(w)
		return p, true, err
	}
	return w.ptr(), false, nil
}

// Linear is x·wᵀ + b with an optional exact-GELU epilogue. Trunk weights run
// in bf16 with fp32 accumulation in BF16 mode; the bias rides in cuBLASLt's
// epilogue. GELU is a separate pass because cuBLASLt's GELU epilogue is the
// tanh approximation and the model uses the exact erf form.
//
// In BF16 mode a trunk Linear with GELU is the MLP's hidden layer, which only
// the next (bf16) GEMM reads: it is kept as bf16 only, rounded once after
// the GELU, where the fp32 form cost a write, a GELU pass over it and a cast
// before the next GEMM (the reference's autocast keeps it in bf16 as well).
func (g *gpu) Linear(x, w, b backend.Tensor, act backend.Activation) backend.Tensor {
	xt, wt, bt := g.gemmTensor(x), g.gemmTensor(w), g.tensor(b)
	rows, k, m, shape := linearShape("Linear", xt, wt, bt)
	if wt.buf.headBF {
		return g.output(shape, "Linear", func(out *Tensor) error {
			return g.gemvBF16(out.ptr(), xt, wt, bt, nil, rows, k, m, act == backend.ActGELU, nil)
		})
	}
	if act == backend.ActGELU && g.bf16Weight(wt) {
		return g.outputBF16(shape, "Linear", func(bf *buffer) error {
			n := int64(rows) * int64(m)
			if g.cfg.FC1BF16 && (bt == nil || bt.buf.trunk) {
				// cuda.fc1_bf16: the GEMM rounds x·wᵀ + b to bf16 and the
				// GELU runs on those values in place, each result rounded
				// again, as the reference's autocast computes it.
				ok, err := g.linearBF16Out(bf.ptr, xt, wt, bt, rows, k, m)
				if err != nil || ok {
					if err != nil {
						return err
					}
					if fits4(n) && aligned(8, bf.ptr) {
						return g.launch1D("elementwise", "gelu_bf16_inplace_v4", n/4, bf.ptr, int(n/4))
					}
					return g.launch1D("elementwise", "gelu_bf16_inplace", n, bf.ptr, n)
				}
			}
			acc, err := g.scratch(n * 4)
			if err != nil {
				return err
			}
			defer g.pool.put(acc)
			if err := g.linearInto(acc.ptr, xt, wt, bt, rows, k, m); err != nil {
				return err
			}
			if fits4(n) && aligned(16, acc.ptr) && aligned(8, bf.ptr) {
				return g.launch1D("elementwise", "gelu_bf16_v4", n/4, bf.ptr, acc.ptr, int(n/4))
			}
			return g.launch1D("elementwise", "gelu_bf16_k", n, bf.ptr, acc.ptr, n)
		})
	}
	return g.output(shape, "Linear", func(out *Tensor) error {
		if err := g.linearInto(out.ptr(), xt, wt, bt, rows, k, m); err != nil {
			return err
		}
		if act == backend.ActGELU {
			return g.launch1D("elementwise", "bias_act_f32", int64(rows)*int64(m), out.ptr(), cu.DevicePtr(0), int64(rows), m, 1)
		}
		return nil
	})
}

// linearInto writes x·wᵀ + b, fp32 [rows, m], to c (owner thread).
func (g *gpu) linearInto(c cu.DevicePtr, xt, wt, bt *Tensor, rows, k, m int) error {
	xp, wp, prec, tmp, err := g.linearOperands(xt, wt, rows, k)
	if err != nil {
		return err
	}
	defer g.pool.put(tmp)
	return g.rowGemm(prec, false, true, rows, m, k, xp, k, wp, k, c, m, ptrOf(bt))
}

// linearBF16Out writes x·wᵀ + b rounded to bf16 to c [rows, m] with the
// bias in cuBLASLt's epilogue (in bf16: a trunk bias holds bf16 values);
// false when cuBLASLt has no such algorithm (owner thread).
func (g *gpu) linearBF16Out(c cu.DevicePtr, xt, wt, bt *Tensor, rows, k, m int) (bool, error) {
	xp, wp, prec, tmp, err := g.linearOperands(xt, wt, rows, k)
	if err != nil {
		return false, err
	}
	defer g.pool.put(tmp)
	if prec != gemmBF16 {
		return false, nil
	}
	var bias cu.DevicePtr
	if bt != nil {
		if bias, err = g.bf16(bt); err != nil {
			return false, err
		}
	}
	// cuBLASLt's column-major view, as rowGemmAdd asks: Dᵀ = w·xᵀ.
	key := gemmKey{bf: true, transA: true, m: m, n: rows, k: k, lda: k, ldb: k, ldc: m, bias: bias != 0, outBF: true}
	return g.lt.matmul(key, wp, xp, 0, c, bias)
}

// LinearAdd is r + x·wᵀ + b as one GEMM: r enters as cuBLASLt's C with beta
// = 1 (out of place, so r is untouched), the bias rides in the epilogue. The
// model folds LayerScale into w and b, so this is a whole residual branch.
func (g *gpu) LinearAdd(x, w, b, r backend.Tensor) backend.Tensor {
	xt, wt, bt, rt := g.gemmTensor(x), g.gemmTensor(w), g.tensor(b), g.tensor(r)
	rows, k, m, shape := linearShape("LinearAdd", xt, wt, bt)
	if rt == nil || !slices.Equal(rt.shape, shape) {
		panic(fmt.Sprintf("cuda: LinearAdd residual %v for an output %v", shapeOf(rt), shape))
	}
	if wt.buf.headBF {
		return g.output(shape, "LinearAdd", func(out *Tensor) error {
			return g.gemvBF16(out.ptr(), xt, wt, bt, rt, rows, k, m, false, nil)
		})
	}
	return g.output(shape, "LinearAdd", func(out *Tensor) error {
		xp, wp, prec, tmp, err := g.linearOperands(xt, wt, rows, k)
		if err != nil {
			return err
		}
		defer g.pool.put(tmp)
		return g.rowGemmAdd(prec, false, true, rows, m, k, xp, k, wp, k, out.ptr(), m, ptrOf(bt), rt.ptr())
	})
}

// linearShape checks x [..., K], w [M, K] and b [M] (or nil) of a Linear-like
// op and gives the GEMM's rows, K and M and the output shape [..., M].
func linearShape(op string, xt, wt, bt *Tensor) (rows, k, m int, shape []int) {
	rows, k = rowsCols(xt.shape)
	if len(wt.shape) != 2 || wt.shape[1] != k {
		panic(fmt.Sprintf("cuda: %s x %v with w %v", op, xt.shape, wt.shape))
	}
	m = wt.shape[0]
	if bt != nil && bt.numel() != m {
		panic(fmt.Sprintf("cuda: %s bias %v for %d outputs", op, bt.shape, m))
	}
	shape = append(append([]int(nil), xt.shape[:len(xt.shape)-1]...), m)
	return rows, k, m, shape
}

// linearOperands gives x [rows, k] and w in the precision of w's GEMM; tmp
// is x's bf16 copy (or nil), which the caller releases. A bf16 copy that x's
// producer wrote is used as it is. Owner thread only.
func (g *gpu) linearOperands(xt, wt *Tensor, rows, k int) (xp, wp cu.DevicePtr, prec gemmPrec, tmp *buffer, err error) {
	wp, bf, err := g.weightOperand(wt)
	if err != nil {
		return 0, 0, 0, nil, err
	}
	if bf && xt.buf.bf != nil {
		return xt.buf.bf.ptr, wp, gemmBF16, nil, nil
	}
	if err := g.restoreF32(xt); err != nil {
		return 0, 0, 0, nil, err
	}
	xp, tmp, err = g.operand(xt.ptr(), int64(rows)*int64(k), bf)
	if err != nil {
		return 0, 0, 0, nil, err
	}
	return xp, wp, g.gemmPrec(bf, wt.buf.conv), tmp, nil
}

// rowsCols views a shape as [rows, last].
func rowsCols(shape []int) (int, int) {
	if len(shape) == 0 {
		return 1, 1
	}
	c := shape[len(shape)-1]
	return backend.Numel(shape) / max(c, 1), c
}
