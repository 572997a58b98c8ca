package cuda

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"github.com/lingbotmap/lingbotmap/engine/backend"
)

// ErrNotBuilt is returned by New in binaries built without the cuda tag.
var ErrNotBuilt = errors.New("this binary was built without CUDA support; rebuild with -tags cuda")

// Precision chooses how the backend stores trunk weights and the KV cache.
type Precision int

const (
	// BF16 follows the reference's production path: trunk weights and the KV
	// cache in bf16, GEMMs in bf16 with fp32 accumulation, residual stream,
	// LayerNorm statistics and heads in fp32 (the camera head's matrices in
	// bf16 with Config.CameraHeadBF16, fp32 arithmetic either way).
	BF16 Precision = iota
	// FP32 keeps everything in float32 with TF32 off, for exact golden checks.
	FP32
	// FP8 is BF16 with the KV cache in FP8 (e4m3, a power-of-two scale per
	// layer, head and K or V): half the cache's memory. Its attention runs
	// on the FP8 tensor cores on Hopper, on fp16 ones (the e4m3 values
	// widened exactly) elsewhere.
	FP8
)

func (p Precision) String() string {
	switch p {
	case FP32:
		return "fp32"
	case FP8:
		return "fp8"
	}
	return "bf16"
}

// bf16Trunk says the trunk's weights and GEMMs are bf16 (BF16 and FP8).
func (p Precision) bf16Trunk() bool { return p == BF16 || p == FP8 }

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
	// (slower; for checking the bf16 tensor-core kernels).
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
	Profile bool
	// FixedGEMMAlgo keeps cuBLASLt's first heuristic choice for every GEMM
	// shape instead of timing its candidates on the shape's first call.
	FixedGEMMAlgo bool
	// SerialLaunch starts each kernel only after the previous one has
	// finished. By default, on Hopper and later GPUs, kernels are launched
	// with programmatic dependent launch: a kernel's blocks are placed while
	// the one before drains and wait on the device for its results, which
	// shortens the gaps between kernels (cuda/NOTES.md has the figure).
	SerialLaunch bool
	// Graphs submits the ops between two points where the host meets the
	// device (a copy, a wait, a free, the KV cache's writes and paged
	// attention) as one CUDA graph once the same stretch has come twice:
	// every frame repeats them with the same buffers. Off, every kernel is
	// launched as it comes. Profile turns it off.
	Graphs bool
	// PagedKernel chooses the paged attention kernel: "auto" (or empty) is
	// the fastest for the GPU and page size, "fa2" the portable mma.sync
	// kernel on every GPU. A binary built with the cudadev tag also takes
	// the lab's variants (LabPagedKernels).
	PagedKernel string
	// PagedSplits, when positive, replaces the key split count of the TMA
	// paged kernel (for timing whole frames at other counts).
	PagedSplits int
	// Attn turns on softmax levers of the Hopper attention kernels (issue
	// #36); the zero value, every lever off, runs the kernels as they were
	// before the levers.
	Attn AttnSettings
	// Window is the stream's configured window: with it NewKVStore checks
	// that all the caches the stream fills fit, and says what fits when they
	// do not. The zero Window checks the KV store alone.
	Window Window
	// Arch is the target the kernels are compiled for: "auto" (or empty)
	// is the GPU's own compute capability (compute_90a, the Hopper kernels,
	// on sm_90), one of Arches a lower target than the GPU: below sm_90 the
	// Hopper-only kernels are off and the portable mma.sync / cp.async
	// kernels run. A target above the GPU, or a GPU below sm_80, fails New.
	Arch string
	// FuseNorm runs a LayerNorm whose only reader is a bf16 GEMM
	// (backend.NormLinear) writing only the bf16 values that GEMM reads
	// (BF16 and FP8 modes); off, it also writes the fp32 values nothing
	// reads. The result is the same either way.
	FuseNorm bool
	// LeanQKV lets SplitQKV leave out the forms of k and v that the caller
	// says nothing reads (backend.KVUse): the fp32 ones before a bf16
	// dense attention, the bf16 ones before the KV cache's writes. The
	// result is the same either way.
	LeanQKV bool
	// WarpCombine merges the key splits of an attention with heads of 64
	// a warp a row (attn_combine_d64), which in BF16 mode also writes the
	// bf16 copy the proj GEMM reads, instead of a thread a value and a cast
	// in that GEMM. The result is the same either way.
	WarpCombine bool
	// LayerNormV4 runs LayerNorms of width 1024 (the trunk's) with two
	// warps a row and 16-byte loads (layernorm_v4_w1024) instead of one
	// warp a row and 8-byte loads: twice the warps in flight, the
	// statistics summed in another order (fp32 either way). BF16 and FP8
	// mode only: FP32 mode, the exact path, keeps one warp a row.
	LayerNormV4 bool
	// FC1BF16 has the MLP's hidden GEMM (a trunk Linear with GELU in BF16
	// mode) write bf16 with its bias, as the reference's autocast does, and
	// the GELU then run on those bf16 values in place, where otherwise the
	// GEMM writes fp32 and the GELU reads that: half the GEMM's output and
	// the GELU's input, one more rounding (the reference's).
	FC1BF16 bool
	// CameraHeadBF16 keeps the camera head's matrices (backend.Head) in
	// bf16 in BF16 and FP8 mode, rounded once at load, and runs its linears
	// with fp32 activations and accumulation on them: half the bytes a frame
	// reads there. The reference keeps the head in fp32; verify measures
	// what the rounding costs (cuda/README.md). FP32 mode ignores it.
	CameraHeadBF16 bool
	// AsyncPageTable queues a changed page table of the paged attention
	// through the upload ring, in stream order behind the attention that
	// reads the old one, instead of a synchronous copy, which waits for
	// all work queued before it: once a frame, and with the engine's
	// overlap_frames for the whole previous frame before the next one's
	// global layers are queued. The table is the same either way.
	AsyncPageTable bool
	// QKVBF16 has a block's qkv GEMM (heads of 64, BF16 mode) write bf16
	// with its bias, as the reference's autocast does, and the q/k/v split
	// read those values, where otherwise the projection stays fp32: half
	// the GEMM's output and the split's input, one more rounding (the
	// reference's).
	QKVBF16 bool
	// CameraHeadFuseNorm, with CameraHeadBF16, runs each LayerNorm of the
	// camera head that feeds one of its linears inside that linear's GEMV
	// (every block normalises the token itself) instead of as a kernel of
	// its own. The statistics are summed in another order.
	CameraHeadFuseNorm bool
	// SideStream runs what the model marks as a branch (backend.Brancher:
	// the camera head) on a second stream, beside the dense heads queued
	// after it, instead of before them on the one stream. The same
	// kernels on the same values either way.
	SideStream bool
	// DenseTMA runs a frame's dense attention (the encoder's and the frame
	// blocks', one image at a time, bf16 and head dim 64, on Hopper) on the
	// TMA kernel of the paged attention with attn_warp_spec's producer
	// warpgroup, its K and V read through tensor maps of the split's bf16
	// buffers, instead of the warpgroup kernel that copies with cp.async.
	DenseTMA bool
	// AppendInPlace has AppendRows write the new rows into the tensor's
	// buffer while it has room, and move it to a buffer with room for as
	// many rows again when it has none; off, AppendRows is ConcatRows into
	// a new buffer (and the old one freed), as every cache grew before.
	AppendInPlace bool
	// ConvWide runs the Hopper implicit GEMM of TF32 3×3 convolutions
	// with blocks of 256 output pixels (conv3_wg_tf32_w) where their waves
	// should take less time than the 128-pixel blocks' (wideConv3): the
	// same products, a slice's weights read once for twice the pixels.
	ConvWide bool
	// LazyKernels compiles each kernel module when it is first used
	// instead of in New. By default New compiles (in parallel, or reads from
	// CacheDir) and loads every module a stream of this configuration runs,
	// so that a camera's first frames do not wait minutes for NVRTC on a
	// machine whose kernel cache is empty.
	LazyKernels bool
	// Logger receives compile and memory events; nil means slog.Default().
	Logger *slog.Logger
}

// PagedKernels are the values of Config.PagedKernel that every build takes.
var PagedKernels = []string{"auto", "fa2"}

// retiredPagedKernels are the lab's variants (cuda/dev): a build without the
// cudadev tag names them in its error rather than calling them unknown.
var retiredPagedKernels = []string{"mma", "exact", "wg", "tma", "poly4", "poly2"}

// DefaultConfig is device 0 in bf16 with the default kernels.
func DefaultConfig() Config {
	return Config{Device: 0, Precision: BF16, PagedKernel: "auto", Arch: "auto", Graphs: true, FuseNorm: true, LeanQKV: true,
		WarpCombine: true, LayerNormV4: true, FC1BF16: true, CameraHeadBF16: true, QKVBF16: true, CameraHeadFuseNorm: true,
		AsyncPageTable: true, SideStream: true, DenseTMA: true, AppendInPlace: true, Attn: AttnSettings{WarpSpec: 2}}
}

// Backend is a backend.Backend on a GPU. Device failures (out of memory, a
// failed launch) are sticky: the first one is kept and returned by Err, and
// later operations do nothing. Close releases the context and all memory.
type Backend interface {
	backend.Backend
	backend.ErrorReporter
	// Trim gives every cached free buffer back to the driver (after phase 1,
	// whose eight-frame buffers steady state never asks for again).
	backend.Trimmer
	backend.MemoryReporter
	backend.Profiler
	// HostWork counts graphs recorded and device allocations and frees,
	// for bench's host events.
	backend.HostWorkReporter
	// GraphStats says how much of the work ran inside CUDA graphs.
	GraphStats() GraphStats
	// Kernels names the kernel family that runs and its NVRTC target, e.g.
	// "hopper (wgmma, TMA, PDL), compute_90a" (Config.Arch), and the
	// softmax levers that are on (Config.Attn), e.g. ", attention poly1",
	// and ", dense attention on TMA" (Config.DenseTMA).
	Kernels() string
	Close() error
}

// Validate names the first setting that is out of range.
func (c Config) Validate() error {
	if c.Precision != BF16 && c.Precision != FP32 && c.Precision != FP8 {
		return fmt.Errorf("cuda: unknown precision %d (want BF16, FP32 or FP8)", c.Precision)
	}
	if c.Precision == FP8 && c.ExactAttention {
		return fmt.Errorf("cuda: exact_attention reads a bf16 or fp32 cache; precision fp8 keeps it in fp8")
	}
	if c.Device < 0 {
		return fmt.Errorf("cuda: device %d: ordinals start at 0", c.Device)
	}
	if c.PagedSplits < 0 {
		return fmt.Errorf("cuda: paged_splits %d: want 0 (automatic) or a positive count", c.PagedSplits)
	}
	if c.Attn.ExpPoly < 0 || c.Attn.ExpPoly > 2 {
		return fmt.Errorf("cuda: attn_exp_poly %d: want 0 (off), 1 (a quarter of the exponentials as polynomials) or 2 (half)", c.Attn.ExpPoly)
	}
	if c.Attn.PInt < 0 || c.Attn.PInt > 2 {
		return fmt.Errorf("cuda: attn_p_int %d: want 0 (off), 1 (bf16's P rounded with integers) or 2 (and FP8's)", c.Attn.PInt)
	}
	if c.Attn.FreeRun < 0 || c.Attn.FreeRun > 2 {
		return fmt.Errorf("cuda: attn_free_run %d: want 0 (off), 1 (stages released on barriers) or 2 (and a fifth stage)", c.Attn.FreeRun)
	}
	if c.Attn.ScoresAhead && c.Attn.RowSumMMA {
		return fmt.Errorf("cuda: attn_scores_ahead: the row sums on the tensor cores are not built with it")
	}
	if w := c.Attn.WarpSpec; w != 0 && w != 2 && w != 3 {
		return fmt.Errorf("cuda: attn_warp_spec %d: want 0 (off), 2 or 3 (consumer warpgroups)", w)
	}
	if c.Attn.PingPong && c.Attn.WarpSpec != 2 {
		return fmt.Errorf("cuda: attn_pingpong takes turns between the two consumer warpgroups of attn_warp_spec 2, not %d", c.Attn.WarpSpec)
	}
	if a := c.Attn; a.KeyHalves && (a.WarpSpec != 2 || a.PingPong || a.LazyRescale) {
		return fmt.Errorf("cuda: attn_key_halves splits the key tiles of attn_warp_spec 2's consumer warpgroups (not %d), without attn_pingpong and attn_lazy_rescale", a.WarpSpec)
	}
	if a := c.Attn; a.WarpSpec != 0 && (a.ScoresAhead || a.FreeRun != 0 || a.FoldCombine || a.RowSumMMA) {
		return fmt.Errorf("cuda: attn_warp_spec is built without attn_scores_ahead, attn_free_run, attn_fold_combine and the row sums on the tensor cores")
	}
	if _, _, err := parseArch(c.Arch); err != nil {
		return err
	}
	if c.PagedKernel == "" || slices.Contains(PagedKernels, c.PagedKernel) || slices.Contains(labPagedKernels(), c.PagedKernel) {
		return nil
	}
	if slices.Contains(retiredPagedKernels, c.PagedKernel) {
		return fmt.Errorf("cuda: paged_kernel %q is a lab variant: build with -tags cuda,cudadev to run it (cuda/dev/README.md)", c.PagedKernel)
	}
	return fmt.Errorf("cuda: unknown paged_kernel %q (want one of %s)", c.PagedKernel, strings.Join(PagedKernels, ", "))
}

// GraphStats counts what the batches submitted.
type GraphStats struct {
	// Direct counts operations submitted one by one (segments seen for the
	// first time, too short to pay, or batching off); Replayed those run
	// inside graph launches.
	Direct, Replayed int64
	// Launches is the number of graph launches, Captures the graphs
	// recorded, Failures the captures that failed (their work then ran
	// directly).
	Launches, Captures, Failures int64
	// Graphs is the number of graphs held now.
	Graphs int
	// Branches counts the branches run on the side stream
	// (Config.SideStream); BranchesOnHost those that a copy to or from
	// the host inside them, or a form made there of an older tensor (a
	// weight's bf16 copy), ended on the host's side.
	Branches, BranchesOnHost int64
	// MapLaunches counts the queued kernel launches that take tensor maps
	// (Config.DenseTMA's attention), which a segment carries like any other.
	MapLaunches int64
}

// AttnSettings are the softmax levers of the Hopper attention kernels
// (kernels/attention_hopper.cu: attn_f8_paged, attn_tma3_paged_bf and
// attn_wg_paged_bf), compiled in as defines. The portable kernels ignore
// them.
type AttnSettings struct {
	// ExpPoly computes part of the exponentials as a polynomial on the FMA
	// pipe instead of the special-function unit: 0 none, 1 a quarter of
	// the score columns, 2 half (ATTN_EXP_POLY).
	ExpPoly int
	// LazyRescale keeps a warp's running row maxima, and skips the rescale
	// of its output and row sums, unless a row's maximum grew by more than
	// a threshold (ATTN_LAZY_RESCALE).
	LazyRescale bool
	// RowSumMMA has the tensor cores add up the rows of P: the FP8 kernel's
	// P·V multiplies eight more rows of ones, the bf16 kernels' a second
	// MMA of eight columns against ones (ATTN_ROWSUM_MMA). A lab variant,
	// not a setting: on an H100 the bf16 kernel with it never finished
	// (TestPagedAttentionGrowingScores, pages of 100) nor did fp8 verify
	// with it among the levers (cuda/README.md); the NVRTC test still
	// compiles it and wgcheck can time it.
	RowSumMMA bool
	// FoldCombine has the last block of each split (query tile, head)
	// merge the splits' partial results, instead of a separate attn_combine
	// launch (ATTN_FOLD_COMBINE).
	FoldCombine bool
	// FreeRun drops the three-warpgroup TMA kernels' block-wide barrier a
	// key tile: each warp releases a stage on a barrier of its own once its
	// P·V of the stage's tile is done, and the copy waits there. 1: four
	// stages, 2: five, so that the copy waits on the tile three back
	// instead of two (ATTN_FREE_RUN).
	FreeRun int
	// ScoresAhead runs the TMA kernels with two warpgroups of 64 queries,
	// each issuing Q·Kᵀ of the tile after next before the softmax of the
	// next tile, on stages released per barrier (ATTN_SCORES_AHEAD).
	ScoresAhead bool
	// WarpSpec runs the TMA kernels with that many consumer warpgroups (2,
	// the default, or 3) and a producer warpgroup that issues the copies
	// and hands its registers to them; each consumer runs on its own, with
	// no block-wide barrier (ATTN_WARP_SPEC). 0: three warpgroups that each
	// copy and compute, meeting at a barrier every key tile.
	WarpSpec int
	// PingPong, with WarpSpec 2, has the two consumers take turns at
	// issuing their MMAs on named barriers (ATTN_PINGPONG).
	PingPong bool
	// KeyHalves, with WarpSpec 2, gives each 64-query tile two consumer
	// warpgroups, one for each half of every key tile, which merge their
	// results at the end: four consumers, each with half the score
	// registers (ATTN_KEY_HALVES).
	KeyHalves bool
	// PInt rounds P with integer arithmetic instead of the conversion
	// instructions (ATTN_P_INT): 1 the bf16 kernels' P to bf16 (two adds
	// and a byte permute a pair), 2 also the FP8 kernel's to e4m3 (a
	// multiply, an add and a shift a value). Measured slower: the longer
	// integer chains cost more than the conversions (cuda/README.md).
	PInt int
}

// lever is a softmax lever that is on: its NVRTC define (without -D) and
// its short name.
type lever struct{ define, name string }

// on lists the levers the settings turn on, in a fixed order.
func (a AttnSettings) on() []lever {
	var l []lever
	if a.ExpPoly != 0 {
		l = append(l, lever{fmt.Sprintf("ATTN_EXP_POLY=%d", a.ExpPoly), fmt.Sprintf("poly%d", a.ExpPoly)})
	}
	for _, b := range []struct {
		on bool
		lever
	}{
		{a.LazyRescale, lever{"ATTN_LAZY_RESCALE=1", "lazy"}},
		{a.RowSumMMA, lever{"ATTN_ROWSUM_MMA=1", "rowsum"}},
		{a.FoldCombine, lever{"ATTN_FOLD_COMBINE=1", "fold"}},
		{a.ScoresAhead, lever{"ATTN_SCORES_AHEAD=1", "ahead"}},
		{a.PingPong, lever{"ATTN_PINGPONG=1", "pingpong"}},
		{a.KeyHalves, lever{"ATTN_KEY_HALVES=1", "halves"}},
	} {
		if b.on {
			l = append(l, b.lever)
		}
	}
	if a.FreeRun != 0 {
		l = append(l, lever{fmt.Sprintf("ATTN_FREE_RUN=%d", a.FreeRun), fmt.Sprintf("free%d", a.FreeRun)})
	}
	if a.PInt != 0 {
		l = append(l, lever{fmt.Sprintf("ATTN_P_INT=%d", a.PInt), fmt.Sprintf("pint%d", a.PInt)})
	}
	if a.WarpSpec != 0 {
		l = append(l, lever{fmt.Sprintf("ATTN_WARP_SPEC=%d", a.WarpSpec), fmt.Sprintf("ws%d", a.WarpSpec)})
	}
	return l
}

// defines are the module's NVRTC defines (without -D) for the settings.
func (a AttnSettings) defines() []string {
	var d []string
	for _, l := range a.on() {
		d = append(d, l.define)
	}
	return d
}

// String names the settings in tests and benchmarks: "default", or the
// levers joined by "+", e.g. "poly1+lazy".
func (a AttnSettings) String() string {
	var n []string
	for _, l := range a.on() {
		n = append(n, l.name)
	}
	if len(n) == 0 {
		return "default"
	}
	return strings.Join(n, "+")
}

// hopperModule is the loader's name of kernels/attention_hopper.cu compiled
// with the settings: "attention_hopper", or "attention_hopper@D1,D2" with
// the defines after the @ (kernelCache.options), so that each variant has
// its own module, functions and disk-cache entry.
func (a AttnSettings) hopperModule() string {
	if d := a.defines(); len(d) > 0 {
		return "attention_hopper@" + strings.Join(d, ",")
	}
	return "attention_hopper"
}
