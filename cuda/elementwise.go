//go:build cuda

package cuda

import (
	"fmt"

	"gorgonia.org/cu"

	"github.com/lingbotmap/lingbotmap/engine/backend"
)

// Unary applies an elementwise function (numbered as backend.UnaryOp in the kernel).
func (g *gpu) Unary(op backend.UnaryOp, x backend.Tensor) backend.Tensor {
	xt := g.tensor(x)
	if op < backend.OpGELU || op > backend.OpInvLog {
		panic(fmt.Sprintf("cuda: unknown unary op %d", op))
	}
	n := int64(xt.numel())
	return g.output(xt.shape, "Unary", func(out *Tensor) error {
		return g.launch1D("elementwise", "unary_f32", n, out.ptr(), xt.ptr(), n, int(op))
	})
}

func (g *gpu) binary(name string, op int, a, b backend.Tensor) backend.Tensor {
	at, bt := g.tensor(a), g.tensor(b)
	suffixCheck(name, at.shape, bt.shape)
	n := int64(at.numel())
	return g.output(at.shape, name, func(out *Tensor) error {
		return g.launch1D("elementwise", "binary_f32", n, out.ptr(), at.ptr(), bt.ptr(), n, int64(bt.numel()), op)
	})
}

// suffixCheck panics unless b's shape is a non-empty suffix of a's.
func suffixCheck(name string, a, b []int) {
	if len(b) > len(a) || backend.Numel(b) == 0 {
		panic(fmt.Sprintf("cuda: %s %v with %v", name, a, b))
	}
	off := len(a) - len(b)
	for i, d := range b {
		if a[off+i] != d {
			panic(fmt.Sprintf("cuda: %s %v with %v: not a suffix", name, a, b))
		}
	}
}

// Add is a+b with b broadcast over a's leading dimensions.
func (g *gpu) Add(a, b backend.Tensor) backend.Tensor { return g.binary("Add", 0, a, b) }

// Mul is a⊙b with the same broadcasting as Add.
func (g *gpu) Mul(a, b backend.Tensor) backend.Tensor { return g.binary("Mul", 1, a, b) }

// ScaleShift is x·s + c.
func (g *gpu) ScaleShift(x backend.Tensor, s, c float32) backend.Tensor {
	xt := g.tensor(x)
	n := int64(xt.numel())
	return g.output(xt.shape, "ScaleShift", func(out *Tensor) error {
		return g.launch1D("elementwise", "scale_shift_f32", n, out.ptr(), xt.ptr(), n, s, c)
	})
}

func ptrOf(t *Tensor) cu.DevicePtr {
	if t == nil {
		return 0
	}
	return t.ptr()
}

func shapeOf(t *Tensor) []int {
	if t == nil {
		return nil
	}
	return t.shape
}
