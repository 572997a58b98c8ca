package cpu

import (
	"fmt"
	"math"
	"slices"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/gonum"

	"github.com/lingbotmap/lingbotmap/engine/backend"
)

// sgemm: c[m,n] = alpha·op(a)·op(b) + beta·c, row-major. It runs the blocked
// AVX-512 or AVX2 GEMM of gemm.go where the CPU has one, gonum's Sgemm
// otherwise.
func sgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, bm []float32, ldb int, beta float32, c []float32, ldc int) {
	if sgemmFast(transA, transB, m, n, k, alpha, a, lda, bm, ldb, beta, c, ldc) {
		return
	}
	ta, tb := blas.NoTrans, blas.NoTrans
	if transA {
		ta = blas.Trans
	}
	if transB {
		tb = blas.Trans
	}
	gonum.Implementation{}.Sgemm(ta, tb, m, n, k, alpha, a, lda, bm, ldb, beta, c, ldc)
}

// Linear is x·wᵀ + b with an optional GELU.
func (b *Backend) Linear(x, w, bias backend.Tensor, act backend.Activation) backend.Tensor {
	xt, wt := ct(x), ct(w)
	rows, k := rowsCols(xt.shape)
	if len(wt.shape) != 2 || wt.shape[1] != k {
		panic(fmt.Sprintf("cpu: Linear x %v with w %v", xt.shape, wt.shape))
	}
	m := wt.shape[0]
	shape := append(append([]int(nil), xt.shape[:len(xt.shape)-1]...), m)
	out := b.alloc(shape...)
	if bias != nil {
		bt := ct(bias)
		b.parallelFor(rows, func(lo, hi int) {
			for r := lo; r < hi; r++ {
				copy(out.data[r*m:(r+1)*m], bt.data)
			}
		})
		sgemm(false, true, rows, m, k, 1, xt.data, k, wt.data, k, 1, out.data, m)
	} else {
		sgemm(false, true, rows, m, k, 1, xt.data, k, wt.data, k, 0, out.data, m)
	}
	if act == backend.ActGELU {
		b.parallelFor(len(out.data), func(lo, hi int) { geluInPlace(out.data[lo:hi]) })
	}
	return out
}

// LinearAdd is r + x·wᵀ + b: out starts as r + b, and the GEMM accumulates
// into it (beta = 1), so r costs one pass that the bias needed anyway.
func (b *Backend) LinearAdd(x, w, bias, r backend.Tensor) backend.Tensor {
	xt, wt, rt := ct(x), ct(w), ct(r)
	rows, k := rowsCols(xt.shape)
	if len(wt.shape) != 2 || wt.shape[1] != k {
		panic(fmt.Sprintf("cpu: LinearAdd x %v with w %v", xt.shape, wt.shape))
	}
	m := wt.shape[0]
	shape := append(append([]int(nil), xt.shape[:len(xt.shape)-1]...), m)
	if !slices.Equal(rt.shape, shape) {
		panic(fmt.Sprintf("cpu: LinearAdd residual %v for an output %v", rt.shape, shape))
	}
	var bd []float32
	if bias != nil {
		if bd = ct(bias).data; len(bd) != m {
			panic(fmt.Sprintf("cpu: LinearAdd bias %v for %d outputs", ct(bias).shape, m))
		}
	}
	out := b.alloc(shape...)
	b.parallelFor(rows, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			o, res := out.data[i*m:(i+1)*m], rt.data[i*m:(i+1)*m]
			if bd == nil {
				copy(o, res)
				continue
			}
			for j := range o {
				o[j] = res[j] + bd[j]
			}
		}
	})
	sgemm(false, true, rows, m, k, 1, xt.data, k, wt.data, k, 1, out.data, m)
	return out
}

// LayerNorm over the last dimension, statistics in float64.
func (b *Backend) LayerNorm(x, w, bias backend.Tensor, eps float32) backend.Tensor {
	xt := ct(x)
	rows, c := rowsCols(xt.shape)
	var wd, bd []float32
	if w != nil {
		wd = ct(w).data
	}
	if bias != nil {
		bd = ct(bias).data
	}
	out := b.alloc(xt.shape...)
	b.parallelFor(rows, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			layerNormRow(out.data[r*c:(r+1)*c], xt.data[r*c:(r+1)*c], wd, bd, eps)
		}
	})
	return out
}

// NormLinear is Linear(LayerNorm(x, nw, nb, eps), w, bias, act), the two
// operations as they are (backend.NormLinearer): the reference for backends
// that fuse them.
func (b *Backend) NormLinear(x, nw, nb backend.Tensor, eps float32, w, bias backend.Tensor, act backend.Activation) backend.Tensor {
	h := b.LayerNorm(x, nw, nb, eps)
	y := b.Linear(h, w, bias, act)
	b.Free(h)
	return y
}

// NormQKV is SplitQKV(NormLinear(x, …), p) as those operations are
// (backend.NormQKVer): the reference for backends that fuse them.
func (b *Backend) NormQKV(x, nw, nb backend.Tensor, eps float32, w, bias backend.Tensor, p backend.QKVParams) (q, k, v backend.Tensor) {
	qkv := b.NormLinear(x, nw, nb, eps, w, bias, backend.ActNone)
	q, k, v = b.SplitQKV(qkv, p)
	b.Free(qkv)
	return q, k, v
}

// Unary applies an elementwise function.
func (b *Backend) Unary(op backend.UnaryOp, x backend.Tensor) backend.Tensor {
	xt := ct(x)
	out := b.alloc(xt.shape...)
	if op == backend.OpGELU {
		// vectorised kernel (gelu.go) on a copy
		copy(out.data, xt.data)
		b.parallelFor(len(out.data), func(lo, hi int) { geluInPlace(out.data[lo:hi]) })
		return out
	}
	var f func(float32) float32
	switch op {
	case backend.OpSiLU:
		f = func(v float32) float32 { return float32(float64(v) / (1 + math.Exp(-float64(v)))) }
	case backend.OpReLU:
		f = func(v float32) float32 { return max(v, 0) }
	case backend.OpExp:
		f = func(v float32) float32 { return float32(math.Exp(float64(v))) }
	case backend.OpExpP1:
		f = func(v float32) float32 { return 1 + float32(math.Exp(float64(v))) }
	case backend.OpInvLog:
		f = func(v float32) float32 {
			y := float32(math.Expm1(math.Abs(float64(v))))
			if v < 0 {
				return -y
			}
			if v == 0 {
				return 0
			}
			return y
		}
	default:
		panic(fmt.Sprintf("cpu: unknown unary op %d", op))
	}
	b.parallelFor(len(xt.data), func(lo, hi int) {
		for i := lo; i < hi; i++ {
			out.data[i] = f(xt.data[i])
		}
	})
	return out
}

// broadcastCheck returns the length of b's repeating block.
func broadcastCheck(name string, a, bt *Tensor) int {
	n := len(bt.data)
	if n == 0 || len(a.data)%n != 0 || len(bt.shape) > len(a.shape) {
		panic(fmt.Sprintf("cpu: %s %v with %v", name, a.shape, bt.shape))
	}
	off := len(a.shape) - len(bt.shape)
	for i, d := range bt.shape {
		if a.shape[off+i] != d {
			panic(fmt.Sprintf("cpu: %s %v with %v: not a suffix", name, a.shape, bt.shape))
		}
	}
	return n
}

func (b *Backend) binary(name string, x, y backend.Tensor, f func(a, b float32) float32) backend.Tensor {
	at, bt := ct(x), ct(y)
	n := broadcastCheck(name, at, bt)
	out := b.alloc(at.shape...)
	b.parallelFor(len(at.data), func(lo, hi int) {
		for i := lo; i < hi; i++ {
			out.data[i] = f(at.data[i], bt.data[i%n])
		}
	})
	return out
}

// Add is a+b with suffix broadcasting.
func (b *Backend) Add(x, y backend.Tensor) backend.Tensor {
	return b.binary("Add", x, y, func(p, q float32) float32 { return p + q })
}

// Mul is a⊙b with suffix broadcasting.
func (b *Backend) Mul(x, y backend.Tensor) backend.Tensor {
	return b.binary("Mul", x, y, func(p, q float32) float32 { return p * q })
}

// ScaleShift is x·s + c.
func (b *Backend) ScaleShift(x backend.Tensor, s, c float32) backend.Tensor {
	xt := ct(x)
	out := b.alloc(xt.shape...)
	b.parallelFor(len(xt.data), func(lo, hi int) {
		for i := lo; i < hi; i++ {
			out.data[i] = xt.data[i]*s + c
		}
	})
	return out
}

// layerNormRow is one row of LayerNorm (statistics in float64); w, b may be nil.
func layerNormRow(y, x, w, b []float32, eps float32) {
	var mean float64
	for _, v := range x {
		mean += float64(v)
	}
	mean /= float64(len(x))
	var vr float64
	for _, v := range x {
		dv := float64(v) - mean
		vr += dv * dv
	}
	vr /= float64(len(x))
	inv := 1 / math.Sqrt(vr+float64(eps))
	for i, v := range x {
		o := float32((float64(v) - mean) * inv)
		if w != nil {
			o *= w[i]
		}
		if b != nil {
			o += b[i]
		}
		y[i] = o
	}
}
