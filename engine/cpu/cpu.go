// Package cpu is the float32 reference backend: every operation of
// backend.Backend in plain Go, parallel over the cores. It is the oracle the
// CUDA backend is tested against, and it runs the whole pipeline in CI.
//
// Shapes follow backend's conventions: row-major, tokens [.., N, C], attention
// [B, N, H, D], images NCHW. GEMMs go through our packed AVX-512/AVX2 kernels
// (gemm.go), with gonum's Sgemm where the CPU has neither.
package cpu

import (
	"fmt"
	"runtime"
	"sync"

	"github.com/lingbotmap/lingbotmap/engine/backend"
)

// Config sets up the backend.
type Config struct {
	// Threads bounds the goroutines of one operation; 0 means runtime.NumCPU().
	Threads int
	// FP8KV rounds the KV cache to e4m3 as the GPU's FP8 cache does
	// (precision fp8: a power-of-two scale per layer, head and K or V from
	// the layer's first write), keeping it in float32: the reference for
	// the GPU's FP8 cache, with the rest of the model in fp32.
	FP8KV bool
}

// Backend is the CPU implementation of backend.Backend.
type Backend struct {
	threads int
	fp8KV   bool
	pool    bufferPool
}

var _ backend.Backend = (*Backend)(nil)

var (
	_ backend.NormLinearer = (*Backend)(nil)
	_ backend.NormQKVer    = (*Backend)(nil)
)

// New makes a CPU backend.
func New(cfg Config) *Backend {
	t := cfg.Threads
	if t <= 0 {
		t = runtime.NumCPU()
	}
	return &Backend{threads: t, fp8KV: cfg.FP8KV}
}

// Name is "cpu".
func (b *Backend) Name() string { return "cpu" }

// Tensor is a CPU tensor: a float32 slice and its shape.
type Tensor struct {
	data  []float32
	shape []int
	// grows: data's capacity past its length is this tensor's own
	// (AppendRows made it), so AppendRows may fill it
	grows bool
}

// Shape returns the dimensions.
func (t *Tensor) Shape() []int { return t.shape }

// Data exposes the values (for tests and host-side code in this process).
func (t *Tensor) Data() []float32 { return t.data }

func (t *Tensor) String() string { return fmt.Sprintf("cpu.Tensor%v", t.shape) }

// bufferPool recycles freed buffers by exact length: a stream's frames repeat
// the same shapes, so after the first frame nothing new is allocated.
type bufferPool struct {
	mu   sync.Mutex
	free map[int][][]float32
}

func (p *bufferPool) get(n int) []float32 {
	p.mu.Lock()
	if l := p.free[n]; len(l) > 0 {
		buf := l[len(l)-1]
		p.free[n] = l[:len(l)-1]
		p.mu.Unlock()
		return buf
	}
	p.mu.Unlock()
	return make([]float32, n)
}

func (p *bufferPool) put(buf []float32) {
	if cap(buf) == 0 {
		return
	}
	p.mu.Lock()
	if p.free == nil {
		p.free = map[int][][]float32{}
	}
	p.free[len(buf)] = append(p.free[len(buf)], buf)
	p.mu.Unlock()
}

// alloc returns an uninitialised tensor (callers overwrite every element).
func (b *Backend) alloc(shape ...int) *Tensor {
	n := backend.Numel(shape)
	return &Tensor{data: b.pool.get(n), shape: append([]int(nil), shape...)}
}

func (b *Backend) zeros(shape ...int) *Tensor {
	t := b.alloc(shape...)
	clear(t.data)
	return t
}

func ct(t backend.Tensor) *Tensor {
	if t == nil {
		return nil
	}
	c, ok := t.(*Tensor)
	if !ok {
		panic(fmt.Sprintf("cpu: tensor %T is not a CPU tensor", t))
	}
	return c
}

// FromHost copies data into a new tensor.
func (b *Backend) FromHost(data []float32, shape ...int) backend.Tensor {
	if backend.Numel(shape) != len(data) {
		panic(fmt.Sprintf("cpu: FromHost: %d values for shape %v", len(data), shape))
	}
	t := b.alloc(shape...)
	copy(t.data, data)
	return t
}

// Weight stores a parameter in float32.
func (b *Backend) Weight(_ string, data []float32, _ backend.Precision, shape ...int) backend.Tensor {
	return b.FromHost(data, shape...)
}

// ToHost copies a tensor out.
func (b *Backend) ToHost(t backend.Tensor) []float32 {
	return append([]float32(nil), ct(t).data...)
}

// Zeros is a zero tensor.
func (b *Backend) Zeros(shape ...int) backend.Tensor { return b.zeros(shape...) }

// Reshape is a view with another shape.
func (b *Backend) Reshape(t backend.Tensor, shape ...int) backend.Tensor {
	c := ct(t)
	if backend.Numel(shape) != len(c.data) {
		panic(fmt.Sprintf("cpu: Reshape %v to %v", c.shape, shape))
	}
	return &Tensor{data: c.data, shape: append([]int(nil), shape...)}
}

// Free recycles t's buffer.
func (b *Backend) Free(t backend.Tensor) {
	if t == nil {
		return
	}
	c := ct(t)
	b.pool.put(c.data)
	c.data = nil
}

// parallelFor runs fn over [0, n) split into at most b.threads contiguous ranges.
func (b *Backend) parallelFor(n int, fn func(lo, hi int)) {
	workers := min(b.threads, n)
	if workers <= 1 {
		if n > 0 {
			fn(0, n)
		}
		return
	}
	var wg sync.WaitGroup
	chunk := (n + workers - 1) / workers
	for lo := 0; lo < n; lo += chunk {
		hi := min(lo+chunk, n)
		wg.Add(1)
		go func() {
			defer wg.Done()
			fn(lo, hi)
		}()
	}
	wg.Wait()
}

// rowsCols views a shape as [rows, last].
func rowsCols(shape []int) (int, int) {
	if len(shape) == 0 {
		return 1, 1
	}
	c := shape[len(shape)-1]
	return backend.Numel(shape) / max(c, 1), c
}
