package preprocess

import (
	"fmt"
	"math"
	"runtime"
	"sync"
)

// This file reproduces Pillow's Image.resize(size, BICUBIC) for 8-bit RGB
// images (libImaging/Resample.c): a separable filter whose support grows with
// the downscale factor, Keys' cubic with a = −0.5, coefficients normalised to
// sum 1 and then quantised to 22-bit fixed point, a horizontal pass into an
// 8-bit intermediate image (rounded and clipped), then a vertical pass. Every
// step, including the float64 arithmetic of the coefficients, follows Pillow's
// order so that the output bytes are the same.

const (
	precisionBits  = 32 - 8 - 2 // Pillow's PRECISION_BITS for 8-bit images
	bicubicSupport = 2.0
)

// bicubic is Keys' cubic convolution kernel with a = −0.5. The explicit
// float64 conversions keep the compiler from fusing multiply-adds, which
// Pillow's C build does not do either.
func bicubic(x float64) float64 {
	const a = -0.5
	if x < 0 {
		x = -x
	}
	if x < 1 {
		return float64(float64(float64((a+2)*x)-(a+3))*x)*x + 1
	}
	if x < 2 {
		return float64(float64(float64(float64(x-5)*x)+8)*x-4) * a
	}
	return 0
}

// filterTaps are the fixed-point weights of one pass: output i reads input
// samples start[i] … start[i]+count[i]−1 with weights k[i·ksize …].
type filterTaps struct {
	inSize, outSize int
	ksize           int
	start, count    []int
	k               []int32
}

// newFilterTaps computes Pillow's precompute_coeffs + normalize_coeffs_8bpc
// for resizing inSize samples to outSize over the whole input.
func newFilterTaps(inSize, outSize int) filterTaps {
	scale := float64(inSize) / float64(outSize)
	filterscale := max(scale, 1)
	support := bicubicSupport * filterscale
	ksize := int(math.Ceil(support))*2 + 1
	t := filterTaps{
		inSize: inSize, outSize: outSize, ksize: ksize,
		start: make([]int, outSize), count: make([]int, outSize),
		k: make([]int32, outSize*ksize),
	}
	w := make([]float64, ksize)
	ss := 1 / filterscale
	for xx := range outSize {
		center := (float64(xx) + 0.5) * scale
		// C's (int) cast truncates toward zero, as Go's conversion does.
		xmin := max(int(center-support+0.5), 0)
		xmax := min(int(center+support+0.5), inSize) - xmin
		ww := 0.0
		for x := range xmax {
			w[x] = bicubic(float64(float64(x+xmin)-center+0.5) * ss)
			ww += w[x]
		}
		for x := range xmax {
			v := w[x]
			if ww != 0 {
				v /= ww
			}
			if v < 0 {
				t.k[xx*ksize+x] = int32(-0.5 + float64(v*(1<<precisionBits)))
			} else {
				t.k[xx*ksize+x] = int32(0.5 + float64(v*(1<<precisionBits)))
			}
		}
		t.start[xx], t.count[xx] = xmin, xmax
	}
	return t
}

func clip8(v int32) uint8 {
	v >>= precisionBits
	if v < 0 {
		return 0
	}
	if v > 255 {
		return 255
	}
	return uint8(v)
}

// Resizer resizes RGB images with Pillow's BICUBIC filter. It keeps the filter
// taps and the buffers of the last size it saw, so a stream of same-sized
// frames is resized without recomputing or reallocating them. Rows are split
// over Workers goroutines. A Resizer is not safe for concurrent use.
type Resizer struct {
	// Workers is the number of goroutines per pass (0: GOMAXPROCS).
	Workers int

	h, v filterTaps
	tmp  []uint8
	acc  []int32 // one row of accumulators per worker
}

// Resize writes src resized to w×h into dst's storage (grown if too small) and
// returns it.
func (r *Resizer) Resize(src RGB, w, h int, dst []uint8) (RGB, error) {
	if err := src.check(); err != nil {
		return RGB{}, err
	}
	if w < 1 || h < 1 {
		return RGB{}, fmt.Errorf("preprocess: cannot resize to %d×%d pixels", w, h)
	}
	if int64(w)*int64(h) > MaxPixels {
		return RGB{}, fmt.Errorf("preprocess: output size %d×%d exceeds %d pixels", w, h, MaxPixels)
	}
	out := RGB{W: w, H: h, Pix: grow(dst, 3*w*h)}
	needH, needV := w != src.W, h != src.H
	if !needH && !needV {
		copy(out.Pix, src.Pix)
		return out, nil
	}
	if needH && (r.h.inSize != src.W || r.h.outSize != w) {
		r.h = newFilterTaps(src.W, w)
	}
	if needV && (r.v.inSize != src.H || r.v.outSize != h) {
		r.v = newFilterTaps(src.H, h)
	}
	workers := r.Workers
	if workers < 1 {
		workers = runtime.GOMAXPROCS(0)
	}
	// Only the input rows the vertical pass reads go through the horizontal pass.
	hdst, first, last := out.Pix, 0, src.H
	if needV && needH {
		first, last = r.v.start[0], r.v.start[h-1]+r.v.count[h-1]
		r.tmp = grow(r.tmp, 3*w*(last-first))
		hdst = r.tmp
	}
	vsrc := src.Pix
	if needH {
		vsrc = hdst
		r.horizontalRows(workers, hdst, src, w, first, last)
	}
	if needV {
		r.verticalRows(workers, out.Pix, vsrc, w, h, first)
	}
	return out, nil
}

func (r *Resizer) horizontalRows(workers int, dst []uint8, src RGB, w, y0, y1 int) {
	if workers = min(workers, (y1-y0)/minRowsPerWorker); workers <= 1 {
		r.horizontal(dst, src, w, y0, y0, y1)
		return
	}
	parallelRows(workers, y1-y0, func(_, a, b int) { r.horizontal(dst, src, w, y0, y0+a, y0+b) })
}

func (r *Resizer) verticalRows(workers int, dst, src []uint8, w, h, y0 int) {
	stride := 3 * w
	workers = max(min(workers, h/minRowsPerWorker), 1)
	if cap(r.acc) < workers*stride {
		r.acc = make([]int32, workers*stride)
	}
	if workers == 1 {
		r.vertical(dst, src, r.acc[:stride], w, y0, 0, h)
		return
	}
	parallelRows(workers, h, func(i, a, b int) { r.vertical(dst, src, r.acc[i*stride:(i+1)*stride], w, y0, a, b) })
}

// minRowsPerWorker keeps small images on one goroutine.
const minRowsPerWorker = 16

// parallelRows calls fn(worker, a, b) on its own goroutine for each of
// `workers` contiguous row ranges covering [0, n), and waits.
func parallelRows(workers, n int, fn func(worker, a, b int)) {
	var wg sync.WaitGroup
	for i := range workers {
		a, b := i*n/workers, (i+1)*n/workers
		wg.Add(1)
		go func() {
			defer wg.Done()
			fn(i, a, b)
		}()
	}
	wg.Wait()
}

// horizontal resizes input rows [ya, yb) of src to width w into dst, whose
// row 0 is input row y0.
func (r *Resizer) horizontal(dst []uint8, src RGB, w, y0, ya, yb int) {
	t := &r.h
	const half = 1 << (precisionBits - 1)
	for y := ya; y < yb; y++ {
		row := src.Pix[3*y*src.W : 3*(y+1)*src.W]
		o := dst[3*(y-y0)*w : 3*(y-y0+1)*w]
		for xx := range w {
			k := t.k[xx*t.ksize : xx*t.ksize+t.count[xx]]
			in := row[3*t.start[xx] : 3*(t.start[xx]+len(k))]
			s0, s1, s2 := int32(half), int32(half), int32(half)
			for len(k) > 0 && len(in) >= 3 {
				kx := k[0]
				s0 += int32(in[0]) * kx
				s1 += int32(in[1]) * kx
				s2 += int32(in[2]) * kx
				k, in = k[1:], in[3:]
			}
			o[3*xx], o[3*xx+1], o[3*xx+2] = clip8(s0), clip8(s1), clip8(s2)
		}
	}
}

// vertical computes output rows [ya, yb) from src (width w, its row 0 being
// input row y0), using acc (3·w accumulators).
func (r *Resizer) vertical(dst, src []uint8, acc []int32, w, y0, ya, yb int) {
	t := &r.v
	const half = 1 << (precisionBits - 1)
	stride := 3 * w
	for yy := ya; yy < yb; yy++ {
		k := t.k[yy*t.ksize : yy*t.ksize+t.count[yy]]
		for i := range acc {
			acc[i] = half
		}
		base := t.start[yy] - y0
		for y, ky := range k {
			row := src[(base+y)*stride : (base+y+1)*stride]
			acc := acc[:len(row)]
			for i, p := range row {
				acc[i] += int32(p) * ky
			}
		}
		o := dst[yy*stride : (yy+1)*stride]
		for i, a := range acc {
			o[i] = clip8(a)
		}
	}
}

func grow(b []uint8, n int) []uint8 {
	if cap(b) < n {
		return make([]uint8, n)
	}
	return b[:n]
}
