//go:build cuda

package cuda

import (
	"fmt"
	"slices"

	"gorgonia.org/cu"

	"github.com/lingbotmap/lingbotmap/engine/backend"
)

// SliceRows copies rows [start, start+n) along dim 0.
func (g *gpu) SliceRows(x backend.Tensor, start, n int) backend.Tensor {
	xt := g.tensor(x)
	if len(xt.shape) == 0 || start < 0 || n < 0 || start+n > xt.shape[0] {
		panic(fmt.Sprintf("cuda: SliceRows [%d,+%d) of %v", start, n, xt.shape))
	}
	shape := append([]int{n}, xt.shape[1:]...)
	row := int64(backend.Numel(xt.shape[1:])) * 4
	return g.output(shape, "SliceRows", func(out *Tensor) error {
		if n == 0 || row == 0 {
			return nil
		}
		return g.batch.copyDtoD(out.ptr(), xt.ptr()+cu.DevicePtr(int64(start)*row), int64(n)*row)
	})
}

// ConcatRows joins tensors along dim 0.
func (g *gpu) ConcatRows(xs ...backend.Tensor) backend.Tensor {
	if len(xs) == 0 {
		panic("cuda: ConcatRows of nothing")
	}
	ts := make([]*Tensor, len(xs))
	rows := 0
	for i, x := range xs {
		ts[i] = g.tensor(x)
		if len(ts[i].shape) == 0 || !slices.Equal(ts[i].shape[1:], ts[0].shape[1:]) {
			panic(fmt.Sprintf("cuda: ConcatRows %v with %v", ts[0].shape, ts[i].shape))
		}
		rows += ts[i].shape[0]
	}
	shape := append([]int{rows}, ts[0].shape[1:]...)
	return g.output(shape, "ConcatRows", func(out *Tensor) error {
		off := out.ptr()
		for _, t := range ts {
			bytes := int64(t.numel()) * 4
			if bytes == 0 {
				continue
			}
			if err := g.batch.copyDtoD(off, t.ptr(), bytes); err != nil {
				return err
			}
			off += cu.DevicePtr(bytes)
		}
		return nil
	})
}

// AppendRows is ConcatRows(x, y) written into x's buffer when the buffer
// has room past x's rows, else into a new buffer with room for as many rows
// again (backend.RowAppender), with Config.AppendInPlace; without, a new
// buffer of x's and y's rows. A buffer that also holds a bf16 copy or tap
// order (buffer.bf, taps) is never written in place: those copies would go
// stale.
func (g *gpu) AppendRows(x, y backend.Tensor) backend.Tensor {
	xt, yt := g.tensor(x), g.tensor(y)
	if len(xt.shape) == 0 || len(yt.shape) != len(xt.shape) || !slices.Equal(xt.shape[1:], yt.shape[1:]) {
		panic(fmt.Sprintf("cuda: AppendRows %v with %v", xt.shape, yt.shape))
	}
	shape := append([]int{xt.shape[0] + yt.shape[0]}, xt.shape[1:]...)
	if !g.cfg.AppendInPlace {
		return backend.ConcatAppend(g, x, y)
	}
	have, add := int64(xt.numel())*4, int64(yt.numel())*4
	var out *Tensor
	g.run("AppendRows", func() error {
		b := xt.buf
		if b.ptr != 0 && !b.bfOnly && b.bf == nil && b.taps == nil && b.size >= have+add {
			if add > 0 {
				if err := g.batch.copyDtoD(b.ptr+cu.DevicePtr(have), yt.ptr(), add); err != nil {
					return err
				}
			}
			out = &Tensor{buf: b, shape: shape}
			return nil
		}
		nb, err := g.pool.getAs(2*(have+add), b.cat)
		if err != nil {
			return err
		}
		for _, c := range []struct {
			dst   cu.DevicePtr
			src   *Tensor
			bytes int64
		}{{nb.ptr, xt, have}, {nb.ptr + cu.DevicePtr(have), yt, add}} {
			if c.bytes == 0 {
				continue
			}
			if err := g.batch.copyDtoD(c.dst, c.src.ptr(), c.bytes); err != nil {
				g.pool.put(nb)
				return err
			}
		}
		g.pool.put(b.bf)
		g.pool.put(b.taps)
		g.pool.put(b)
		out = &Tensor{buf: nb, shape: shape}
		return nil
	})
	if out == nil {
		return placeholder(shape)
	}
	return out
}

// SliceCols copies columns [start, start+n) of the last dimension.
func (g *gpu) SliceCols(x backend.Tensor, start, n int) backend.Tensor {
	xt := g.tensor(x)
	rows, c := rowsCols(xt.shape)
	if len(xt.shape) == 0 || start < 0 || n < 0 || start+n > c {
		panic(fmt.Sprintf("cuda: SliceCols [%d,+%d) of %v", start, n, xt.shape))
	}
	shape := append(append([]int(nil), xt.shape[:len(xt.shape)-1]...), n)
	return g.output(shape, "SliceCols", func(out *Tensor) error {
		return g.copy2D(out.ptr(), n, xt.ptr()+cu.DevicePtr(start*4), c, rows, n)
	})
}

// ConcatCols joins tensors along the last dimension.
func (g *gpu) ConcatCols(xs ...backend.Tensor) backend.Tensor {
	if len(xs) == 0 {
		panic("cuda: ConcatCols of nothing")
	}
	ts := make([]*Tensor, len(xs))
	total := 0
	for i, x := range xs {
		ts[i] = g.tensor(x)
		s0, si := ts[0].shape, ts[i].shape
		if len(si) == 0 || len(si) != len(s0) || !slices.Equal(si[:len(si)-1], s0[:len(s0)-1]) {
			panic(fmt.Sprintf("cuda: ConcatCols %v with %v", s0, si))
		}
		total += si[len(si)-1]
	}
	rows, _ := rowsCols(ts[0].shape)
	shape := append(append([]int(nil), ts[0].shape[:len(ts[0].shape)-1]...), total)
	return g.output(shape, "ConcatCols", func(out *Tensor) error {
		col := 0
		for _, t := range ts {
			_, c := rowsCols(t.shape)
			if err := g.copy2D(out.ptr()+cu.DevicePtr(col*4), total, t.ptr(), c, rows, c); err != nil {
				return err
			}
			col += c
		}
		return nil
	})
}

// Transpose swaps the last two dimensions.
func (g *gpu) Transpose(x backend.Tensor) backend.Tensor {
	xt := g.tensor(x)
	r := len(xt.shape)
	if r < 2 {
		panic(fmt.Sprintf("cuda: Transpose of %v", xt.shape))
	}
	a, b := xt.shape[r-2], xt.shape[r-1]
	batch := backend.Numel(xt.shape[:r-2])
	shape := append(append([]int(nil), xt.shape[:r-2]...), b, a)
	return g.output(shape, "Transpose", func(out *Tensor) error {
		if batch == 0 || a == 0 || b == 0 {
			return nil
		}
		return g.transpose(out.ptr(), xt.ptr(), batch, a, b)
	})
}

// transpose is [batch, a, b] -> [batch, b, a] (owner thread).
func (g *gpu) transpose(dst, src cu.DevicePtr, batch, a, b int) error {
	for z0 := 0; z0 < batch; z0 += 65535 {
		nz := min(65535, batch-z0)
		off := cu.DevicePtr(int64(z0) * int64(a) * int64(b) * 4)
		grid := [3]int{(b + 31) / 32, (a + 31) / 32, nz}
		if err := g.launch("movement", "transpose_f32", grid, [3]int{32, 8, 1}, 0, dst+off, src+off, a, b); err != nil {
			return err
		}
	}
	return nil
}
