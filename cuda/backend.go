//go:build cuda

// Package cuda is the GPU backend: backend.Backend on NVIDIA GPUs through the
// driver API (gorgonia.org/cu), kernels compiled at first use with NVRTC,
// GEMMs through cuBLASLt and a paged attention kernel that reads the KV page
// table directly. Build with -tags cuda on a machine with the CUDA toolkit.
package cuda

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"

	"gorgonia.org/cu"

	"github.com/lingbotmap/lingbotmap/engine/backend"
)

// gpu implements Backend. Its fields other than err are touched only inside
// owner.do ("on the owner thread").
type gpu struct {
	cfg  Config
	log  *slog.Logger
	own  *owner
	info deviceInfo
	// target is what the kernels are compiled for (Config.Arch).
	target target

	pool     pool
	kernels  *kernelCache
	launcher *launcher
	lt       *cublasLt
	// batch collects submissions into CUDA graph segments (Config.Graphs).
	batch *batch
	// pagedVariant selects another attention kernel than the default
	// (Config.PagedKernel; see the paged* constants).
	pagedVariant string
	// pagedSplits, when positive, replaces the key split count of the TMA
	// paged kernel (Config.PagedSplits).
	pagedSplits int
	// headBF16: head matrices are kept in bf16 (Config.CameraHeadBF16 in
	// BF16 or FP8 mode; see gemv.go).
	headBF16 bool
	// attn are the softmax levers the Hopper attention kernels are
	// compiled with (Config.Attn; tests change it between launches).
	attn AttnSettings
	// convVariant selects a kernel for TF32 3×3 convolutions (tests and
	// benchmarks; see the conv* constants).
	convVariant string
	// onePage is a device page table holding page 0: dense attention runs
	// the Hopper paged kernel with its keys as one page (made on first use).
	onePage *buffer
	// denseTMA: Config.DenseTMA (tests change it between launches);
	// denseMaps are the tensor maps of its k and v, encoded for each call
	// (made on first use).
	denseTMA  bool
	denseMaps *tensorMaps
	// foldCounts are the split counters of the kernels that merge their
	// own splits (AttnSettings.FoldCombine), zero between launches (made
	// on first use).
	foldCounts  *buffer
	smemAllowed map[string]int // kernels whose shared memory limit was raised
	prof        *profile       // nil unless Config.Profile
	br          branch         // the side stream (backend.Brancher)
	stage       staging        // pinned host memory for copies (owner thread)
	up          upRing         // pinned slots for uploads that do not wait (owner thread)
	down        downRing       // pinned slots for downloads waited for later (owner thread)

	mu  sync.Mutex
	err error
}

// The capabilities the engine asks for (backend.Capabilities).
var (
	_ Backend                 = (*gpu)(nil)
	_ backend.ErrorReporter   = (*gpu)(nil)
	_ backend.Trimmer         = (*gpu)(nil)
	_ backend.MemoryReporter  = (*gpu)(nil)
	_ backend.Profiler        = (*gpu)(nil)
	_ backend.AsyncDownloader = (*gpu)(nil)
	_ backend.Brancher        = (*gpu)(nil)
	_ backend.RowAppender     = (*gpu)(nil)
	_ io.Closer               = (*gpu)(nil)
)

// New opens the GPU, creates the context on its own thread, sets up
// cuBLASLt and compiles and loads the kernels a stream of this
// configuration runs (unless Config.LazyKernels).
func New(cfg Config) (Backend, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	own, info, err := startOwner(cfg.Device)
	if err != nil {
		return nil, err
	}
	t, err := chooseTarget(cfg.Arch, info.name, capability{info.major, info.minor})
	if err != nil {
		own.stop()
		return nil, err
	}
	g := &gpu{cfg: cfg, log: log, own: own, info: info, target: t, launcher: newLauncher(), smemAllowed: map[string]int{}}
	g.pool.limit = max(cfg.CacheLimit, 0)
	if cfg.PagedKernel != "auto" {
		g.pagedVariant = cfg.PagedKernel
	}
	g.pagedSplits = cfg.PagedSplits
	g.headBF16 = cfg.CameraHeadBF16 && cfg.Precision.bf16Trunk()
	g.attn = cfg.Attn
	g.denseTMA = cfg.DenseTMA
	// Kernels wait for their predecessor (pdl_wait) only when compiled for
	// sm_90 or later; for a lower target they must be launched serially.
	g.launcher.pdl = t.cap.major >= 9 && pdlBuilt() && !cfg.SerialLaunch
	if cfg.Profile {
		g.prof = newProfile()
	}
	g.kernels = newKernelCache(cfg.CacheDir, t, info.driver, log)
	if err := own.do(func() error {
		lt, err := newCublasLt(&g.pool)
		if err != nil {
			return err
		}
		lt.autotune = !cfg.FixedGEMMAlgo
		g.lt = lt
		// Profiling times each op with events on the default stream, so
		// it submits every op as it comes.
		b, err := newBatch(g.launcher, log, cfg.Graphs && !cfg.Profile)
		if err != nil {
			return err
		}
		b.lt, lt.q, g.batch = lt, b, b
		g.pool.beforeFree = b.flush
		return nil
	}); err != nil {
		own.stop()
		g.launcher.free()
		return nil, fmt.Errorf("cuda: %w", err)
	}
	if !cfg.LazyKernels {
		if err := g.prepareKernels(); err != nil {
			g.Close()
			return nil, err
		}
	}
	log.Info("cuda backend ready", "device", info.name, "sm", fmt.Sprintf("%d.%d", info.major, info.minor),
		"multiprocessors", info.sms, "memory", human(info.totalMem), "driver", info.driver, "precision", cfg.Precision,
		"arch", t.arch, "kernels", t.family(), "pdl", g.launcher.pdl, "graphs", g.batch.enabled)
	return g, nil
}

// Kernels names the kernel family the backend runs and the NVRTC target it
// compiles them for (e.g. "portable (mma.sync, cp.async), compute_80").
func (g *gpu) Kernels() string {
	s := fmt.Sprintf("%s, %s", g.target.family(), g.target.arch)
	if g.kernels.hopper() && g.cfg.Attn != (AttnSettings{}) {
		s += ", attention " + g.cfg.Attn.String()
	}
	if g.kernels.hopper() && g.cfg.DenseTMA {
		s += ", dense attention on TMA"
	}
	return s
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
	if g.prof != nil {
		_ = g.own.do(func() error { return g.prof.report(g.log) })
	}
	if s := g.MemStats(); s.Mallocs > 0 {
		g.log.Info("cuda memory at close", "in_use", human(s.InUse), "peak", human(s.Peak), "weights_fp32", human(s.Weights),
			"weights_bf16", human(s.WeightsBF16), "kv_cache", human(s.KV), "activations", human(s.Activations),
			"cached_free", human(s.Cached), "reserved", human(s.Reserved), "peak_reserved", human(s.PeakReserved),
			"device_used", human(s.DeviceUsed), "mallocs", s.Mallocs, "released", s.Released)
	}
	err := g.own.do(func() error {
		if g.batch != nil {
			g.log.Info("cuda graphs", "enabled", g.batch.enabled, "replayed", g.batch.stats.Replayed, "direct", g.batch.stats.Direct,
				"graph_launches", g.batch.stats.Launches, "captures", g.batch.captured.Load(), "failures", g.batch.stats.Failures,
				"changing", g.batch.mostChanged())
		}
		if g.br.branches > 0 {
			g.log.Info("cuda side stream", "branches", g.br.branches, "ended_on_host", g.br.serial)
		}
		serr := errors.Join(g.batch.close(), cu.Synchronize())
		g.pool.unhold()
		g.br.close()
		g.lt.report(g.log, g.prof != nil)
		g.lt.destroy()
		g.pool.trim()
		g.stage.free()
		g.up.free()
		g.down.free()
		g.denseMaps.free()
		return serr
	})
	g.own.stop()
	g.launcher.free()
	if err != nil && err != errClosed {
		return fmt.Errorf("cuda: closing: %w", err)
	}
	return nil
}

// Trim frees the allocator's cached buffers (Backend.Trim).
func (g *gpu) Trim() {
	_ = g.own.do(func() error {
		if g.prof != nil {
			g.prof.restart()
		}
		g.pool.trim()
		return nil
	})
}

// RestartProfile drops the operation profile measured so far (when
// Config.Profile keeps one), so that the report covers what follows: bench
// calls it once the cache is full.
func (g *gpu) RestartProfile() {
	_ = g.own.do(func() error {
		if g.prof != nil {
			g.prof.restart()
		}
		return nil
	})
}

// ResetMemoryPeak makes the peaks of MemStats and MemoryUsage start again
// from what is held now.
func (g *gpu) ResetMemoryPeak() {
	_ = g.own.do(func() error {
		g.pool.peak, g.pool.peakReserved = g.pool.inUse, g.pool.reserved
		return nil
	})
}

// Sync waits for all submitted work and reports the first device error.
func (g *gpu) Sync() error {
	g.run("synchronize", func() error {
		if err := g.flush(); err != nil {
			return err
		}
		defer g.batch.restart()
		return cu.Synchronize()
	})
	return g.Err()
}

// run executes fn on the owner thread unless an earlier error is sticky.
func (g *gpu) run(op string, fn func() error) {
	if g.Err() != nil {
		return
	}
	if g.prof != nil {
		fn = g.prof.wrap(op, fn)
	}
	if err := g.own.do(fn); err != nil {
		g.fail(fmt.Errorf("cuda: %s: %w", op, err))
	}
}

// flush submits the work queued for a graph segment: before the host reads
// or writes device memory, waits for the device, or frees memory (owner
// thread).
//
// An open branch ends there on the host's side and a pending one merges
// (branch.go): what the host does next may read what the branch wrote.
func (g *gpu) flush() error {
	if err := g.batch.flush(); err != nil {
		return err
	}
	return g.settle()
}

// GraphStats reports what the CUDA graph batches submitted so far.
func (g *gpu) GraphStats() GraphStats {
	var s GraphStats
	_ = g.own.do(func() error {
		s = g.batch.statsNow()
		s.Branches, s.BranchesOnHost = g.br.branches, g.br.serial
		return nil
	})
	return s
}

// HostWork counts the graphs recorded (GraphStats' Captures) and the pool's
// cuMemAlloc and cuMemFree calls so far, read without a turn of the owner
// thread.
func (g *gpu) HostWork() backend.HostWork {
	return backend.HostWork{GraphsRecorded: g.batch.captured.Load(), DeviceAllocs: g.pool.mallocs.Load(), DeviceFrees: g.pool.frees.Load()}
}

// launch runs a kernel (owner thread); see launcher.launch for the
// argument encoding.
func (g *gpu) launch(module, name string, grid, block [3]int, shared int, args ...any) error {
	fn, err := g.kernels.function(module, name)
	if err != nil {
		return err
	}
	return g.launcher.launch(fn, name, grid, block, shared, args)
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
