package cuda

import (
	"log/slog"
	"os"

	"github.com/lingbotmap/lingbotmap/engine/backend"
)

// Precision chooses how the backend stores trunk weights and the KV cache.
type Precision int

const (
	// BF16 follows the reference's production path: trunk weights and the KV
	// cache in bf16, GEMMs in bf16 with fp32 accumulation, residual stream,
	// LayerNorm statistics and heads in fp32.
	BF16 Precision = iota
	// FP32 keeps everything in float32 with TF32 off, for exact golden checks.
	FP32
)

func (p Precision) String() string {
	if p == FP32 {
		return "fp32"
	}
	return "bf16"
}

// Config sets up the CUDA backend. Start from DefaultConfig.
type Config struct {
	// Device is the CUDA device ordinal.
	Device int
	// Precision of trunk weights, trunk GEMMs and the KV cache.
	Precision Precision
	// CacheDir keeps compiled kernels between runs; empty means
	// os.UserCacheDir()/lingbotmap/cuda, and "-" turns the disk cache off.
	CacheDir string
	// ExactAttention runs attention with the fp32 kernels even in BF16 mode
	// (slower; for checking the bf16 tensor-core kernels). DefaultConfig sets
	// it when LINGBOTMAP_CUDA_EXACT_ATTENTION=1.
	ExactAttention bool
	// CacheLimit is how many bytes of freed device memory the allocator keeps
	// for reuse; past it, the buffers of the sizes asked for least recently
	// go back to the driver. 0 (the default) keeps everything: a 2 GiB limit
	// made the full model's frames free and re-allocate ~50 buffers each
	// (every cuMemFree stalls the GPU), since one frame's working set (the
	// DPT head's im2col buffers) exceeds it. Call Trim after phase 1 instead.
	CacheLimit int64
	// EagerKV allocates every KV cache page when the store is made, rather
	// than giving a page memory when it is first written (which needs the
	// driver's virtual memory management; without it pages are eager anyway).
	EagerKV bool
	// Profile times every operation on the device with CUDA events (no
	// synchronisation, so the stream runs as it does unprofiled) and logs the
	// time per operation kind and the device's idle time at Close. Each Trim
	// (the engine's, after a phase 1) starts it afresh, so compilation and
	// phase 1 are left out.
	// DefaultConfig sets it when LINGBOTMAP_CUDA_PROFILE=1.
	Profile bool
	// FixedGEMMAlgo keeps cuBLASLt's first heuristic choice for every GEMM
	// shape instead of timing its candidates on the shape's first call.
	// DefaultConfig sets it when LINGBOTMAP_CUDA_GEMM_TUNING=0.
	FixedGEMMAlgo bool
	// SerialLaunch starts each kernel only after the previous one has
	// finished. By default, on Hopper and later GPUs, kernels are launched
	// with programmatic dependent launch: a kernel's blocks are placed while
	// the one before drains and wait on the device for its results, which
	// shortens the gaps between kernels (0.6–0.7 ms a frame on an H200).
	// DefaultConfig sets it when LINGBOTMAP_CUDA_PDL=0.
	SerialLaunch bool
	// Logger receives compile and memory events; nil means slog.Default().
	Logger *slog.Logger
}

// DefaultConfig is device 0 in bf16. LINGBOTMAP_CUDA_EXACT_ATTENTION=1 sets
// ExactAttention, LINGBOTMAP_CUDA_PROFILE=1 Profile, LINGBOTMAP_CUDA_GEMM_TUNING=0
// FixedGEMMAlgo, LINGBOTMAP_CUDA_PDL=0 SerialLaunch and LINGBOTMAP_CUDA_CACHE
// CacheDir.
func DefaultConfig() Config {
	return Config{Device: 0, Precision: BF16,
		CacheDir:       os.Getenv("LINGBOTMAP_CUDA_CACHE"),
		ExactAttention: os.Getenv("LINGBOTMAP_CUDA_EXACT_ATTENTION") == "1",
		Profile:        os.Getenv("LINGBOTMAP_CUDA_PROFILE") == "1",
		FixedGEMMAlgo:  os.Getenv("LINGBOTMAP_CUDA_GEMM_TUNING") == "0",
		SerialLaunch:   os.Getenv("LINGBOTMAP_CUDA_PDL") == "0"}
}

// Backend is a backend.Backend on a GPU. Device failures (out of memory, a
// failed launch) are sticky: the first one is kept and returned by Err, and
// later operations do nothing. Close releases the context and all memory.
type Backend interface {
	backend.Backend
	Err() error
	Close() error
	// Trim gives every cached free buffer back to the driver (after phase 1,
	// whose eight-frame buffers steady state never asks for again).
	Trim()
}
