//go:build cuda

// Package cuda is the GPU backend: backend.Backend on NVIDIA GPUs through the
// driver API (gorgonia.org/cu), kernels compiled at first use with NVRTC,
// GEMMs through cuBLASLt and a paged attention kernel that reads the KV page
// table directly. Build with -tags cuda on a machine with the CUDA toolkit.
package cuda

import (
	"fmt"
	"log/slog"
	"math"
	"sync"
	"unsafe"

	"gorgonia.org/cu"
)

// gpu implements Backend. Its fields other than err are touched only on the
// owner thread.
type gpu struct {
	cfg  Config
	log  *slog.Logger
	own  *owner
	info deviceInfo

	pool    pool
	kernels *kernelCache
	lt      *cublasLt
	// simplePaged selects the unpipelined tensor-core paged kernel (tests
	// and benchmarks compare it with the default pipelined one).
	simplePaged bool

	mu  sync.Mutex
	err error
}

var _ Backend = (*gpu)(nil)

// New opens the GPU, creates the context on its own thread and sets up
// cuBLASLt. Kernels are compiled when first used.
func New(cfg Config) (Backend, error) {
	if cfg.Precision != BF16 && cfg.Precision != FP32 {
		return nil, fmt.Errorf("cuda: unknown precision %d (want BF16 or FP32)", cfg.Precision)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	own, info, err := startOwner(cfg.Device)
	if err != nil {
		return nil, err
	}
	g := &gpu{cfg: cfg, log: log, own: own, info: info}
	g.kernels = newKernelCache(cfg.CacheDir, info, log)
	if err := own.do(func() error {
		lt, err := newCublasLt(&g.pool)
		g.lt = lt
		return err
	}); err != nil {
		own.stop()
		return nil, fmt.Errorf("cuda: %w", err)
	}
	log.Info("cuda backend ready", "device", info.name, "sm", fmt.Sprintf("%d.%d", info.major, info.minor),
		"multiprocessors", info.sms, "memory", human(info.totalMem), "driver", info.driver, "precision", cfg.Precision)
	return g, nil
}

// Name is "cuda".
func (g *gpu) Name() string { return "cuda" }

// Err is the first device error, if any.
func (g *gpu) Err() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.err
}

func (g *gpu) fail(err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.err == nil {
		g.err = err
		g.log.Error("cuda backend failed; later operations are skipped", "err", err)
	}
}

// Close waits for pending work, frees all memory and destroys the context.
func (g *gpu) Close() error {
	err := g.own.do(func() error {
		serr := cu.Synchronize()
		g.lt.destroy()
		g.pool.trim()
		return serr
	})
	g.own.stop()
	if err != nil && err != errClosed {
		return fmt.Errorf("cuda: closing: %w", err)
	}
	return nil
}

// Sync waits for all submitted work and reports the first device error.
func (g *gpu) Sync() error {
	g.run("synchronize", func() error { return cu.Synchronize() })
	return g.Err()
}

// run executes fn on the owner thread unless an earlier error is sticky.
func (g *gpu) run(op string, fn func() error) {
	if g.Err() != nil {
		return
	}
	if err := g.own.do(fn); err != nil {
		g.fail(fmt.Errorf("cuda: %s: %w", op, err))
	}
}

// launch runs a kernel. Every argument is passed in an 8-byte slot (the
// binding copies 8 bytes per parameter): pointers and int64 as they are,
// int as int64 (the kernel reads the low 4 bytes of an int parameter),
// float32 in the low 4 bytes.
func (g *gpu) launch(module, name string, grid, block [3]int, shared int, args ...any) error {
	fn, err := g.kernels.function(module, name)
	if err != nil {
		return err
	}
	slots := make([]uint64, len(args))
	params := make([]unsafe.Pointer, len(args))
	for i, a := range args {
		switch v := a.(type) {
		case cu.DevicePtr:
			slots[i] = uint64(v)
		case int:
			slots[i] = uint64(int64(v))
		case int64:
			slots[i] = uint64(v)
		case int32:
			slots[i] = uint64(uint32(v))
		case float32:
			slots[i] = uint64(math.Float32bits(v))
		default:
			return fmt.Errorf("kernel %s: argument %d has unsupported type %T", name, i, a)
		}
		params[i] = unsafe.Pointer(&slots[i])
	}
	if err := fn.Launch(grid[0], grid[1], grid[2], block[0], block[1], block[2], shared, cu.NoStream, params); err != nil {
		return fmt.Errorf("launching %s (grid %v, block %v): %w", name, grid, block, err)
	}
	return nil
}

// launch1D runs a grid-stride kernel over n items with 256-thread blocks.
func (g *gpu) launch1D(module, name string, n int64, args ...any) error {
	if n <= 0 {
		return nil
	}
	blocks := (n + 255) / 256
	if lim := int64(g.info.sms) * 32; blocks > lim {
		blocks = lim
	}
	return g.launch(module, name, [3]int{int(blocks), 1, 1}, [3]int{256, 1, 1}, 0, args...)
}
