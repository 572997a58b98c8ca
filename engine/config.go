package engine

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/lingbotmap/lingbotmap/engine/model"
)

// Config sets up a Stream. Zero values are not valid; start from DefaultConfig.
// Its mapstructure tags are the settings' keys (see package config for the
// flag, environment and ROS parameter names that follow from them), and
// config/lingbotmap.yaml documents each with its default.
type Config struct {
	// Weights is a .safetensors or .pt checkpoint. Empty means a random-weight
	// model of ModelSize (no meaningful map; for tests and demos).
	Weights string `mapstructure:"weights"`
	// ModelSize picks the random model when Weights is empty: "tiny" or "full".
	ModelSize string `mapstructure:"model_size" param:"oneof=tiny|full"`
	// Seed for the random model.
	Seed int64 `mapstructure:"seed"`
	// Device is "cpu" or "cuda".
	Device string `mapstructure:"device" param:"oneof=cpu|cuda"`
	// Threads for the CPU backend (0 = all cores).
	Threads int `mapstructure:"threads" param:"min=0"`
	// Precision of the CUDA backend: "bf16" (the reference's production
	// path), "fp32" (exact, slower) or "fp8" (bf16 with the KV cache in FP8
	// e4m3: half its memory). The CPU backend computes in fp32; with fp8
	// it rounds its KV cache to e4m3 as the GPU does.
	Precision string `mapstructure:"precision" param:"oneof=bf16|fp32|fp8"`
	// SelectedLayers are the aggregator layers the heads read; empty means
	// the released model's choice for its depth ([4 11 17 23] for 24 layers).
	SelectedLayers []int `mapstructure:"selected_layers"`

	// ImageWidth is the model input width (518 for the released model); images
	// are resized to it keeping the aspect ratio, height rounded to the patch size.
	ImageWidth int `mapstructure:"image_width" param:"min=14"`

	// ScaleFrames are run together at the start of the stream (or window).
	ScaleFrames int `mapstructure:"scale_frames" param:"min=1"`
	// SlidingWindow is the number of live keyframes kept in the KV cache.
	SlidingWindow int `mapstructure:"sliding_window" param:"min=1"`
	// MaxFrames caps committed frames per cache reset (the 3D RoPE table size).
	MaxFrames int `mapstructure:"max_frames"`
	// CacheHeadroom is the number of spare KV pages beyond scale frames +
	// sliding window. The reference keeps 16; 2 is enough (one frame appended
	// before the eviction, one deferred in flow mode) and saves a page of
	// every global block per unit (about 98 MB at 518×378 in bf16).
	CacheHeadroom int `mapstructure:"cache_headroom" param:"min=2"`
	// CameraIterations of the camera head's refinement.
	CameraIterations int `mapstructure:"camera_iterations" param:"min=1"`

	// KeyframeInterval: every Nth streaming frame is a keyframe (1 = all).
	KeyframeInterval int `mapstructure:"keyframe_interval" param:"min=1"`
	// FlowThreshold > 0 chooses keyframes by mean reprojection flow in pixels
	// instead of the interval.
	FlowThreshold float64 `mapstructure:"flow_threshold" param:"min=0"`
	// MaxNonKeyframeGap forces a keyframe after this many frames (flow mode).
	MaxNonKeyframeGap int `mapstructure:"max_non_keyframe_gap" param:"min=1"`

	// Windowed restarts the cache every WindowSize slots (scale frames +
	// keyframes) and stitches windows with a similarity transform.
	Windowed    bool `mapstructure:"windowed"`
	WindowSize  int  `mapstructure:"window_size"`
	OverlapSize int  `mapstructure:"overlap_size" param:"min=0"`
	// WindowMode is how windows are joined: "reference" stitches them as the
	// reference does (a window's last overlap results wait for the next
	// window, which replaces them; window 0 waits for a second window), for
	// verify and offline runs; "live" emits every frame as soon as the window
	// that first processes it has it, and warms the next window up in the
	// background so that a window change does not stall the stream (with
	// fixed-interval windows whose overlap_size is at least scale_frames + 1;
	// otherwise, and with flow windows, windows change serially). A live
	// window re-runs only its scale frames from the overlap.
	WindowMode string `mapstructure:"window_mode" param:"oneof=reference|live"`

	// OverlapFrames queues a streaming frame's model work before the host
	// makes the results of the frame before it, so that a GPU runs the
	// next frame while the host copies, converts and hands on the last
	// one's outputs. Push then returns the previous frame's results and
	// holds its own frame's until the next Push, Flush or Drain (Drainer).
	// It applies to the streaming schedule (windowed false) with interval
	// keyframes; a frame whose points the backend makes on the device is
	// held one Push more, while its points come back, where the backend
	// queues them (backend.AsyncUnprojector), and otherwise not held.
	// Other frames wait for the ones held first. The results are the same.
	OverlapFrames bool `mapstructure:"overlap_frames"`
	// EncodeBesideHeads, with OverlapFrames, also holds a frame's heads
	// back until the next frame comes (or the held frame is drained), and
	// queues the next frame's DINO encoder beside them with the camera head
	// (model.Pass.HeadsBeside): on a backend with a second stream
	// (backend.Brancher) the encoder's blocks fill what the heads' kernels
	// leave of the GPU. The same values in the same order; a frame held
	// ahead has its heads still to run when the host waits for the frame
	// before it.
	EncodeBesideHeads bool `mapstructure:"encode_beside_heads"`

	// CUDA tunes the CUDA backend; the CPU backend ignores it.
	CUDA CUDAConfig `mapstructure:"cuda"`

	// Trace, when set, is called after every model call and keyframe decision
	// (for verify and diagnostics). It is not a configuration value.
	Trace func(TraceEvent) `mapstructure:"-" json:"-"`
	// Decide, when set, sees every flow keyframe decision (its index in the
	// stream, the measured flow and the engine's choice) and returns the
	// choice to apply. verify uses it to follow the reference through
	// decisions that a lower precision cannot reproduce. Not a configuration value.
	Decide func(decision int, flow float64, keyframe bool) bool `mapstructure:"-" json:"-"`
	// Localize stops the cache from growing: once a window has run its
	// phase 1 (a resumed state), every frame runs as a non-keyframe against
	// the keyframes the cache holds, windows never change and live windows
	// never warm the next one up. Reference windows hold results back until
	// the next window, so they are refused with it. The node sets it for
	// localization mode; not a configuration value.
	Localize bool `mapstructure:"-" json:"-"`
}

// The values of Config.WindowMode.
const (
	WindowReference = "reference"
	WindowLive      = "live"
)

// TraceEvent describes one step of the schedule.
type TraceEvent struct {
	// Event is "call" (a model forward), "commit" or "rollback" (flow
	// decisions) or "reset" (a new window).
	Event string
	// Frames in the call, and whether a non-keyframe skipped the cache.
	Frames     int
	SkipAppend bool
	// Flow is the measured flow for "commit"/"rollback".
	Flow float64
	// Background marks a call of the next window's warm-up (live windows),
	// run between the current window's frames.
	Background bool
	// Stats right after the event.
	Stats CacheStats
}

// CUDAConfig holds the CUDA backend's knobs. The engine does not import the
// backend: the program maps these onto cuda.Config where it composes the
// backend.
type CUDAConfig struct {
	// KernelCache is the folder of compiled kernels; empty takes the user's
	// cache folder, "-" turns the disk cache off.
	KernelCache string `mapstructure:"kernel_cache"`
	// ExactAttention runs attention with the fp32 kernels in bf16 mode too
	// (slower; for checking the tensor-core kernels).
	ExactAttention bool `mapstructure:"exact_attention"`
	// Profile times every operation on the device and logs the times at the end.
	Profile bool `mapstructure:"profile"`
	// GEMMTuning times cuBLASLt's candidate algorithms on each GEMM shape's
	// first call; off keeps its first heuristic choice.
	GEMMTuning bool `mapstructure:"gemm_tuning"`
	// PDL launches kernels with programmatic dependent launch on Hopper and
	// later GPUs; off starts each kernel after the previous one has finished.
	PDL bool `mapstructure:"pdl"`
	// Graphs replays the stretches of kernels that every frame repeats as
	// CUDA graphs; off launches each kernel as it comes.
	Graphs bool `mapstructure:"graphs"`
	// PagedKernel picks the paged-attention kernel: "auto" (the fastest for
	// the GPU and page size) or one of PagedKernels for comparisons.
	PagedKernel string `mapstructure:"paged_kernel"`
	// PagedSplits, when positive, replaces the automatic key split count of
	// the TMA paged kernels.
	PagedSplits int `mapstructure:"paged_splits"`
	// AttnExpPoly computes part of the Hopper attention kernels'
	// exponentials as an FMA polynomial: 0 none, 1 a quarter, 2 half.
	AttnExpPoly int `mapstructure:"attn_exp_poly"`
	// AttnLazyRescale skips the Hopper attention kernels' rescale of a
	// warp's rows unless a row maximum grew by more than a threshold.
	AttnLazyRescale bool `mapstructure:"attn_lazy_rescale"`
	// AttnFoldCombine has the Hopper attention kernels merge their key
	// splits in their last block instead of a separate kernel.
	AttnFoldCombine bool `mapstructure:"attn_fold_combine"`
	// AttnFreeRun drops the three-warpgroup attention kernels' block-wide
	// barrier a key tile for per-stage release barriers: 0 off, 1 with four
	// stages, 2 with five.
	AttnFreeRun int `mapstructure:"attn_free_run"`
	// AttnScoresAhead runs the Hopper TMA attention kernels with two
	// warpgroups that issue the next tile's scores before this tile's
	// softmax (measured slower; off).
	AttnScoresAhead bool `mapstructure:"attn_scores_ahead"`
	// AttnWarpSpec runs the Hopper TMA attention kernels with a producer
	// warpgroup and that many consumer warpgroups (2, the default, or 3; 0
	// off: three warpgroups that each copy and compute).
	AttnWarpSpec int `mapstructure:"attn_warp_spec"`
	// AttnPingPong has attn_warp_spec 2's two consumer warpgroups take turns
	// at issuing their MMAs (measured slower; off).
	AttnPingPong bool `mapstructure:"attn_pingpong"`
	// AttnKeyHalves gives each of attn_warp_spec 2's 64-query tiles two
	// consumer warpgroups, one for each half of every 128-key tile, merged
	// at the end (four consumers, each with half the score registers;
	// measured slower; off).
	AttnKeyHalves bool `mapstructure:"attn_key_halves"`
	// AttnPInt rounds the Hopper attention kernels' probabilities with
	// integer arithmetic instead of the conversion instructions (to
	// nearest, ties away instead of to even): 0 off, 1 bf16's P, 2 bf16's
	// and FP8's (measured slower; off).
	AttnPInt int `mapstructure:"attn_p_int"`
	// Arch is the target the kernels are compiled for: "auto" (the GPU's
	// own) or one of CUDAArches below the GPU's capability; below sm_90 the
	// Hopper-only kernels are off and the portable ones run.
	Arch string `mapstructure:"arch"`
	// FuseNorm has a LayerNorm that feeds only a bf16 GEMM write only the
	// bf16 values the GEMM reads (same result).
	FuseNorm bool `mapstructure:"fuse_norm"`
	// LeanQKV has the q/k/v split write only the forms of k and v that
	// their readers read (same result).
	LeanQKV bool `mapstructure:"lean_qkv"`
	// WarpCombine merges split attention results a warp a row and writes
	// the proj GEMM's bf16 operand there (same result).
	WarpCombine bool `mapstructure:"warp_combine"`
	// LayerNormV4 runs the trunk's LayerNorms with two warps a row and
	// 16-byte loads (the statistics summed in another order).
	LayerNormV4 bool `mapstructure:"layernorm_v4"`
	// FC1BF16 has the MLP's hidden GEMM write bf16 and its GELU run on
	// those values, as the reference's autocast rounds them.
	FC1BF16 bool `mapstructure:"fc1_bf16"`
	// CameraHeadBF16 keeps the camera head's matrices in bf16 (precision
	// bf16 and fp8; fp32 ignores it) and multiplies them with fp32
	// activations and accumulation. The reference keeps the head in fp32.
	CameraHeadBF16 bool `mapstructure:"camera_head_bf16"`
	// AsyncPageTable queues the paged attention's page table in stream
	// order instead of a copy that waits for the device (same table).
	AsyncPageTable bool `mapstructure:"async_page_table"`
	// QKVBF16 has a block's qkv GEMM write bf16 and the q/k/v split read
	// those values, as the reference's autocast rounds them.
	QKVBF16 bool `mapstructure:"qkv_bf16"`
	// CameraHeadFuseNorm, with CameraHeadBF16, runs the camera head's
	// LayerNorms inside the GEMVs they feed rather than as kernels of
	// their own.
	CameraHeadFuseNorm bool `mapstructure:"camera_head_fuse_norm"`
	// SideStream runs the camera head on a second stream beside the dense
	// heads (same kernels, same values).
	SideStream bool `mapstructure:"side_stream"`
	// DenseTMA runs the encoder's and frame blocks' attention on Hopper on
	// the TMA attention kernel with a producer warpgroup instead of the
	// cp.async one (same arithmetic).
	DenseTMA bool `mapstructure:"dense_tma"`
	// AppendInPlace grows the camera head's caches in their own buffers
	// (backend.RowAppender) instead of a new buffer a frame; the same
	// values, without the frees that stalled the host.
	AppendInPlace bool `mapstructure:"append_in_place"`
	// ConvWide runs the heads' large 3×3 convolutions on Hopper with
	// blocks of 256 output pixels instead of 128 (the same values).
	ConvWide bool `mapstructure:"conv_wide"`
}

// CUDAArches are the values of CUDAConfig.Arch, as the CUDA backend names
// its compile targets (cuda.Arches; a test keeps the two equal).
var CUDAArches = []string{"auto", "sm_80", "sm_86", "sm_87", "sm_89", "sm_90"}

// PagedKernels are the values of CUDAConfig.PagedKernel besides "auto", as
// the CUDA backend names its paged-attention kernels: "fa2" (the portable
// kernel) in every build; the others are the lab's (cuda/dev), which only a
// binary built with the cudadev tag runs.
var PagedKernels = []string{"fa2", "mma", "exact", "wg", "tma", "poly4", "poly2"}

// DefaultConfig is the reference demo's configuration; the model's own
// defaults (model.DefaultOptions) are its source for the model settings.
func DefaultConfig() Config {
	m := model.DefaultOptions()
	return Config{
		ModelSize:         "tiny",
		Seed:              1,
		Device:            "cpu",
		Precision:         "bf16",
		ImageWidth:        518,
		ScaleFrames:       m.ScaleFrames,
		SlidingWindow:     m.SlidingWindow,
		MaxFrames:         m.MaxFrames,
		CacheHeadroom:     m.CacheHeadroom,
		CameraIterations:  m.CameraIterations,
		KeyframeInterval:  1,
		MaxNonKeyframeGap: 30,
		WindowSize:        64,
		OverlapSize:       16,
		WindowMode:        WindowReference,
		EncodeBesideHeads: true,
		CUDA: CUDAConfig{
			GEMMTuning:         true,
			PDL:                true,
			Graphs:             true,
			PagedKernel:        "auto",
			Arch:               "auto",
			FuseNorm:           true,
			LeanQKV:            true,
			WarpCombine:        true,
			LayerNormV4:        true,
			FC1BF16:            true,
			CameraHeadBF16:     true,
			QKVBF16:            true,
			CameraHeadFuseNorm: true,
			AsyncPageTable:     true,
			SideStream:         true,
			DenseTMA:           true,
			AppendInPlace:      true,
			AttnWarpSpec:       2,
		},
	}
}

// ComputePrecision is the arithmetic the configured backend actually uses:
// Precision on the GPU; on the CPU, which has no bf16 path, fp32, or fp8
// (fp32 with the KV cache rounded to e4m3 as the GPU's FP8 cache).
func (c Config) ComputePrecision() string {
	if c.Device == "cpu" && c.Precision != "fp8" {
		return "fp32"
	}
	return c.Precision
}

// Validate names the first setting that is out of range.
func (c Config) Validate() error {
	var errs []error
	bad := func(key string, format string, args ...any) {
		errs = append(errs, fmt.Errorf("'%s' %s", key, fmt.Sprintf(format, args...)))
	}
	if c.Device != "cpu" && c.Device != "cuda" {
		bad("device", "must be cpu or cuda, not %q", c.Device)
	}
	if c.Weights == "" && c.ModelSize != "tiny" && c.ModelSize != "full" {
		bad("model_size", "must be tiny or full, not %q", c.ModelSize)
	}
	if c.Precision != "bf16" && c.Precision != "fp32" && c.Precision != "fp8" {
		bad("precision", "must be bf16, fp32 or fp8, not %q", c.Precision)
	}
	if c.Threads < 0 {
		bad("threads", "must be ≥ 0, not %d", c.Threads)
	}
	for i, l := range c.SelectedLayers {
		if l < 0 || (i > 0 && l <= c.SelectedLayers[i-1]) {
			bad("selected_layers", "must be distinct aggregator layers ≥ 0 in ascending order, not %v", c.SelectedLayers)
			break
		}
	}
	if c.ImageWidth < 14 || c.ImageWidth%14 != 0 {
		bad("image_width", "must be a positive multiple of 14, not %d", c.ImageWidth)
	}
	if c.ScaleFrames < 1 {
		bad("scale_frames", "must be ≥ 1, not %d", c.ScaleFrames)
	}
	if c.SlidingWindow < 1 {
		bad("sliding_window", "must be ≥ 1, not %d", c.SlidingWindow)
	}
	if c.MaxFrames <= c.ScaleFrames {
		bad("max_frames", "must exceed scale_frames (%d), not %d", c.ScaleFrames, c.MaxFrames)
	}
	if c.CacheHeadroom < 2 {
		bad("cache_headroom", "must be ≥ 2, not %d", c.CacheHeadroom)
	}
	if c.CameraIterations < 1 {
		bad("camera_iterations", "must be ≥ 1, not %d", c.CameraIterations)
	}
	if c.KeyframeInterval < 1 {
		bad("keyframe_interval", "must be ≥ 1, not %d", c.KeyframeInterval)
	}
	if !(c.FlowThreshold >= 0) || math.IsInf(c.FlowThreshold, 0) {
		bad("flow_threshold", "must be a finite number ≥ 0, not %g", c.FlowThreshold)
	}
	if c.MaxNonKeyframeGap < 1 {
		bad("max_non_keyframe_gap", "must be ≥ 1, not %d", c.MaxNonKeyframeGap)
	}
	if c.WindowMode != WindowReference && c.WindowMode != WindowLive {
		bad("window_mode", "must be %s or %s, not %q", WindowReference, WindowLive, c.WindowMode)
	}
	if c.Localize && c.Windowed && c.WindowMode == WindowReference {
		bad("window_mode", "localization needs %s windows or none: %s windows hold results back until the next window, which localization never starts", WindowLive, WindowReference)
	}
	if c.Windowed {
		if c.WindowSize <= c.ScaleFrames {
			bad("window_size", "must exceed scale_frames (%d), not %d", c.ScaleFrames, c.WindowSize)
		}
		if c.OverlapSize < 0 {
			bad("overlap_size", "must be ≥ 0, not %d", c.OverlapSize)
		}
		// a fixed-interval window spans scale + (window − scale)·interval frames;
		// consecutive windows must advance
		if frames := c.ScaleFrames + max(c.WindowSize-c.ScaleFrames, 0)*max(c.KeyframeInterval, 1); c.FlowThreshold == 0 && c.OverlapSize >= frames {
			bad("overlap_size", "must be smaller than a window's %d frames, not %d", frames, c.OverlapSize)
		}
	}
	if c.CUDA.PagedKernel != "auto" && !slices.Contains(PagedKernels, c.CUDA.PagedKernel) {
		bad("cuda.paged_kernel", "must be auto or one of %s, not %q", strings.Join(PagedKernels, ", "), c.CUDA.PagedKernel)
	}
	if c.CUDA.PagedSplits < 0 {
		bad("cuda.paged_splits", "must be ≥ 0 (0 = automatic), not %d", c.CUDA.PagedSplits)
	}
	if c.CUDA.AttnExpPoly < 0 || c.CUDA.AttnExpPoly > 2 {
		bad("cuda.attn_exp_poly", "must be 0 (off), 1 (a quarter of the exponentials) or 2 (half), not %d", c.CUDA.AttnExpPoly)
	}
	if c.CUDA.AttnFreeRun < 0 || c.CUDA.AttnFreeRun > 2 {
		bad("cuda.attn_free_run", "must be 0 (off), 1 (release barriers) or 2 (release barriers and a fifth stage), not %d", c.CUDA.AttnFreeRun)
	}
	if w := c.CUDA.AttnWarpSpec; w != 0 && w != 2 && w != 3 {
		bad("cuda.attn_warp_spec", "must be 0 (off), 2 or 3 (consumer warpgroups), not %d", w)
	}
	if c.CUDA.AttnWarpSpec != 0 && (c.CUDA.AttnScoresAhead || c.CUDA.AttnFreeRun != 0 || c.CUDA.AttnFoldCombine) {
		bad("cuda.attn_warp_spec", "is built without attn_scores_ahead, attn_free_run and attn_fold_combine: set it to 0 to use them")
	}
	if c.CUDA.AttnPingPong && c.CUDA.AttnWarpSpec != 2 {
		bad("cuda.attn_pingpong", "takes turns between the two consumer warpgroups of attn_warp_spec 2, not %d", c.CUDA.AttnWarpSpec)
	}
	if p := c.CUDA.AttnPInt; p < 0 || p > 2 {
		bad("cuda.attn_p_int", "must be 0 (off), 1 (bf16's probabilities) or 2 (bf16's and FP8's), not %d", p)
	}
	if c.CUDA.AttnKeyHalves && (c.CUDA.AttnWarpSpec != 2 || c.CUDA.AttnPingPong) {
		bad("cuda.attn_key_halves", "splits the key tiles of attn_warp_spec 2's consumers (not %d), without attn_pingpong", c.CUDA.AttnWarpSpec)
	}
	if c.CUDA.AttnKeyHalves && c.CUDA.AttnLazyRescale {
		bad("cuda.attn_key_halves", "is built without attn_lazy_rescale")
	}
	if !slices.Contains(CUDAArches, c.CUDA.Arch) {
		bad("cuda.arch", "must be one of %s, not %q", strings.Join(CUDAArches, ", "), c.CUDA.Arch)
	}
	return errors.Join(errs...)
}
