package cpu

import (
	"fmt"
	"slices"

	"github.com/lingbotmap/lingbotmap/engine/backend"
)

// SliceRows copies rows [start, start+n) along dim 0.
func (b *Backend) SliceRows(x backend.Tensor, start, n int) backend.Tensor {
	xt := ct(x)
	if len(xt.shape) == 0 || start < 0 || n < 0 || start+n > xt.shape[0] {
		panic(fmt.Sprintf("cpu: SliceRows [%d,+%d) of %v", start, n, xt.shape))
	}
	inner := backend.Numel(xt.shape[1:])
	shape := append([]int{n}, xt.shape[1:]...)
	out := b.alloc(shape...)
	copy(out.data, xt.data[start*inner:(start+n)*inner])
	return out
}

// ConcatRows joins along dim 0.
func (b *Backend) ConcatRows(xs ...backend.Tensor) backend.Tensor {
	first := ct(xs[0])
	rows := 0
	for _, x := range xs {
		t := ct(x)
		if len(t.shape) != len(first.shape) || backend.Numel(t.shape[1:]) != backend.Numel(first.shape[1:]) {
			panic(fmt.Sprintf("cpu: ConcatRows %v with %v", first.shape, t.shape))
		}
		rows += t.shape[0]
	}
	shape := append([]int{rows}, first.shape[1:]...)
	out := b.alloc(shape...)
	off := 0
	for _, x := range xs {
		off += copy(out.data[off:], ct(x).data)
	}
	return out
}

// AppendRows is ConcatRows(x, y) in x's storage where AppendRows made it
// with room, else in new storage of twice the rows (backend.RowAppender).
func (b *Backend) AppendRows(x, y backend.Tensor) backend.Tensor {
	xt, yt := ct(x), ct(y)
	if len(xt.shape) == 0 || len(yt.shape) != len(xt.shape) || !slices.Equal(xt.shape[1:], yt.shape[1:]) {
		panic(fmt.Sprintf("cpu: AppendRows %v with %v", xt.shape, yt.shape))
	}
	shape := append([]int{xt.shape[0] + yt.shape[0]}, xt.shape[1:]...)
	n := len(xt.data) + len(yt.data)
	var data []float32
	if xt.grows && cap(xt.data) >= n {
		data = append(xt.data, yt.data...)
	} else {
		data = make([]float32, n, 2*n)
		copy(data[copy(data, xt.data):], yt.data)
		b.pool.put(xt.data)
	}
	xt.data = nil
	return &Tensor{data: data, shape: shape, grows: true}
}

var _ backend.RowAppender = (*Backend)(nil)

// SliceCols copies columns [start, start+n) of the last dimension.
func (b *Backend) SliceCols(x backend.Tensor, start, n int) backend.Tensor {
	xt := ct(x)
	rows, c := rowsCols(xt.shape)
	if start < 0 || n < 0 || start+n > c {
		panic(fmt.Sprintf("cpu: SliceCols [%d,+%d) of %v", start, n, xt.shape))
	}
	shape := append(append([]int(nil), xt.shape[:len(xt.shape)-1]...), n)
	out := b.alloc(shape...)
	b.parallelFor(rows, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			copy(out.data[r*n:(r+1)*n], xt.data[r*c+start:r*c+start+n])
		}
	})
	return out
}

// ConcatCols joins along the last dimension.
func (b *Backend) ConcatCols(xs ...backend.Tensor) backend.Tensor {
	first := ct(xs[0])
	rows, _ := rowsCols(first.shape)
	total := 0
	widths := make([]int, len(xs))
	for i, x := range xs {
		r, c := rowsCols(ct(x).shape)
		if r != rows {
			panic(fmt.Sprintf("cpu: ConcatCols %v with %v", first.shape, ct(x).shape))
		}
		widths[i] = c
		total += c
	}
	shape := append(append([]int(nil), first.shape[:len(first.shape)-1]...), total)
	out := b.alloc(shape...)
	b.parallelFor(rows, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			off := r * total
			for i, x := range xs {
				w := widths[i]
				off += copy(out.data[off:off+w], ct(x).data[r*w:(r+1)*w])
			}
		}
	})
	return out
}

// Transpose swaps the last two dimensions.
func (b *Backend) Transpose(x backend.Tensor) backend.Tensor {
	xt := ct(x)
	nd := len(xt.shape)
	if nd < 2 {
		panic(fmt.Sprintf("cpu: Transpose of %v", xt.shape))
	}
	ra, cb := xt.shape[nd-2], xt.shape[nd-1]
	batch := backend.Numel(xt.shape[:nd-2])
	shape := append(append([]int(nil), xt.shape[:nd-2]...), cb, ra)
	out := b.alloc(shape...)
	const tile = 32
	tilesA := (ra + tile - 1) / tile
	b.parallelFor(batch*tilesA, func(lo, hi int) {
		for task := lo; task < hi; task++ {
			bi, ta := task/tilesA, task%tilesA
			src := xt.data[bi*ra*cb:]
			dst := out.data[bi*ra*cb:]
			for j0 := 0; j0 < cb; j0 += tile {
				for i := ta * tile; i < min(ra, ta*tile+tile); i++ {
					for j := j0; j < min(cb, j0+tile); j++ {
						dst[j*ra+i] = src[i*cb+j]
					}
				}
			}
		}
	})
	return out
}

// ropePairs says which dimensions of a head of d rotate together: pair m
// (m < d/2) rotates dims (lo[m], hi[m]), see backend.RoPEPairing.
func ropePairs(d int, pairing backend.RoPEPairing) (lo, hi []int) {
	half := d / 2
	lo, hi = make([]int, half), make([]int, half)
	for m := 0; m < half; m++ {
		switch pairing {
		case backend.RoPEInterleaved:
			lo[m], hi[m] = 2*m, 2*m+1
		case backend.RoPEHalves2D:
			q := d / 4
			hh, t := m/q, m%q
			lo[m], hi[m] = hh*half+t, hh*half+t+q
		default:
			panic(fmt.Sprintf("cpu: unknown RoPE pairing %d", pairing))
		}
	}
	return lo, hi
}

// RoPE rotates pairs of dimensions of x [..., N, H, D] by the angles in cos/sin [N, D/2].
func (b *Backend) RoPE(x, cos, sin backend.Tensor, pairing backend.RoPEPairing) backend.Tensor {
	xt, ct0, st := ct(x), ct(cos), ct(sin)
	nd := len(xt.shape)
	if nd < 3 {
		panic(fmt.Sprintf("cpu: RoPE of %v", xt.shape))
	}
	n, h, d := xt.shape[nd-3], xt.shape[nd-2], xt.shape[nd-1]
	half := d / 2
	if len(ct0.data) != n*half || len(st.data) != n*half || d%4 != 0 {
		panic(fmt.Sprintf("cpu: RoPE x %v with tables %v", xt.shape, ct0.shape))
	}
	lo, hi := ropePairs(d, pairing)
	out := b.alloc(xt.shape...)
	rows := len(xt.data) / (h * d) // batch × N
	b.parallelFor(rows, func(r0, r1 int) {
		for r := r0; r < r1; r++ {
			tok := r % n
			cs := ct0.data[tok*half : (tok+1)*half]
			sn := st.data[tok*half : (tok+1)*half]
			for hd := 0; hd < h; hd++ {
				base := (r*h + hd) * d
				src := xt.data[base : base+d]
				dst := out.data[base : base+d]
				for m := 0; m < half; m++ {
					a, c := src[lo[m]], src[hi[m]]
					dst[lo[m]] = a*cs[m] - c*sn[m]
					dst[hi[m]] = c*cs[m] + a*sn[m]
				}
			}
		}
	})
	return out
}
