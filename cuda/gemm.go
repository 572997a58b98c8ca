//go:build cuda

package cuda

import (
	"fmt"

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
// fp32 or bf16 operands with fp32 output. cuBLASLt is column-major, so it is
// asked for Cᵀ = op(B)ᵀ·op(A)ᵀ, whose bias runs along its rows. Owner thread only.
func (g *gpu) rowGemm(prec gemmPrec, transA, transB bool, m, n, k int, a cu.DevicePtr, lda int, b cu.DevicePtr, ldb int, c cu.DevicePtr, ldc int, bias cu.DevicePtr) error {
	if m == 0 || n == 0 {
		return nil
	}
	if k == 0 {
		return fmt.Errorf("GEMM with an empty inner dimension (%dx%dx0)", m, n)
	}
	bf := prec == gemmBF16
	key := gemmKey{bf: bf, tf32: prec == gemmTF32, transA: transB, transB: transA, m: n, n: m, k: k, lda: ldb, ldb: lda, ldc: ldc, bias: bias != 0}
	ok, err := g.lt.matmul(key, b, a, c, bias)
	if err != nil {
		return err
	}
	if ok {
		return nil
	}
	if bias != 0 {
		// No algorithm with the bias epilogue: plain GEMM, then the bias.
		key.bias = false
		if ok, err = g.lt.matmul(key, b, a, c, 0); err != nil {
			return err
		}
		if ok {
			return g.launch1D("elementwise", "bias_act_f32", int64(m)*int64(n), c, bias, int64(m), n, 0)
		}
	}
	return fmt.Errorf("cuBLASLt has no algorithm for a %dx%dx%d GEMM (bf16 %v)", m, n, k, bf)
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
	case conv && g.cfg.Precision == BF16:
		return gemmTF32
	}
	return gemmF32
}

// weightOperand is w in the precision its GEMM runs in.
func (g *gpu) weightOperand(w *Tensor) (cu.DevicePtr, bool, error) {
	if w.buf.trunk && g.cfg.Precision == BF16 {
		p, err := g.bf16(w)
		return p, true, err
	}
	return w.ptr(), false, nil
}

// Linear is x·wᵀ + b with an optional exact-GELU epilogue. Trunk weights run
// in bf16 with fp32 accumulation in BF16 mode; the bias rides in cuBLASLt's
// epilogue. GELU is a separate pass because cuBLASLt's GELU epilogue is the
// tanh approximation and the model uses the exact erf form.
func (g *gpu) Linear(x, w, b backend.Tensor, act backend.Activation) backend.Tensor {
	xt, wt, bt := g.tensor(x), g.weightTensor(w), g.tensor(b)
	rows, k := rowsCols(xt.shape)
	if len(wt.shape) != 2 || wt.shape[1] != k {
		panic(fmt.Sprintf("cuda: Linear x %v with w %v", xt.shape, wt.shape))
	}
	m := wt.shape[0]
	if bt != nil && bt.numel() != m {
		panic(fmt.Sprintf("cuda: Linear bias %v for %d outputs", bt.shape, m))
	}
	shape := append(append([]int(nil), xt.shape[:len(xt.shape)-1]...), m)
	return g.output(shape, "Linear", func(out *Tensor) error {
		wp, bf, err := g.weightOperand(wt)
		if err != nil {
			return err
		}
		xp, tmp, err := g.operand(xt.ptr(), int64(rows)*int64(k), bf)
		if err != nil {
			return err
		}
		defer g.pool.put(tmp)
		var bias cu.DevicePtr
		if bt != nil {
			bias = bt.ptr()
		}
		if err := g.rowGemm(g.gemmPrec(bf, false), false, true, rows, m, k, xp, k, wp, k, out.ptr(), m, bias); err != nil {
			return err
		}
		if act == backend.ActGELU {
			return g.launch1D("elementwise", "bias_act_f32", int64(rows)*int64(m), out.ptr(), cu.DevicePtr(0), int64(rows), m, 1)
		}
		return nil
	})
}

// rowsCols views a shape as [rows, last].
func rowsCols(shape []int) (int, int) {
	if len(shape) == 0 {
		return 1, 1
	}
	c := shape[len(shape)-1]
	return backend.Numel(shape) / max(c, 1), c
}
