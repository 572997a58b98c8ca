package main

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/lingbotmap/lingbotmap/cuda"
	"github.com/lingbotmap/lingbotmap/engine"
	"github.com/lingbotmap/lingbotmap/engine/backend"
)

// TestCUDAConfig: the defaults map onto cuda.DefaultConfig with the
// engine's window, and every knob onto its field.
func TestCUDAConfig(t *testing.T) {
	cfg := engine.DefaultConfig()
	cfg.Device = "cuda"
	got := cudaConfig(cfg, nil)
	def := cuda.DefaultConfig()
	def.Window = cuda.Window{ScaleFrames: 8, SlidingWindow: 64, Headroom: 16, MaxFrames: 1024, SpecialPerFrame: 6, CameraIterations: 4, ImageWidth: 518}
	if got != def {
		t.Fatalf("defaults: %+v, want cuda.DefaultConfig() with the default window %+v", got, def)
	}
	cfg.Precision = "fp32"
	cfg.CUDA = engine.CUDAConfig{KernelCache: "-", ExactAttention: true, Profile: true, PagedKernel: "fa2", PagedSplits: 3, Arch: "sm_80", FC1BF16: true, CameraHeadBF16: true, QKVBF16: true, LayerNormV4: true,
		AttnExpPoly: 2, AttnLazyRescale: true, AttnFoldCombine: true, AttnFreeRun: 2, AttnScoresAhead: true}
	cfg.ScaleFrames, cfg.SlidingWindow, cfg.CacheHeadroom, cfg.MaxFrames, cfg.CameraIterations, cfg.ImageWidth = 4, 16, 2, 200, 2, 280
	got = cudaConfig(cfg, nil)
	want := cuda.Config{Precision: cuda.FP32, CacheDir: "-", ExactAttention: true, Profile: true, FixedGEMMAlgo: true,
		SerialLaunch: true, PagedKernel: "fa2", PagedSplits: 3, Arch: "sm_80", FC1BF16: true, CameraHeadBF16: true, QKVBF16: true, LayerNormV4: true,
		Attn:   cuda.AttnSettings{ExpPoly: 2, LazyRescale: true, FoldCombine: true, FreeRun: 2, ScoresAhead: true},
		Window: cuda.Window{ScaleFrames: 4, SlidingWindow: 16, Headroom: 2, MaxFrames: 200, SpecialPerFrame: 6, CameraIterations: 2, ImageWidth: 280}}
	if got != want {
		t.Fatalf("every knob: %+v, want %+v", got, want)
	}
	if err := got.Validate(); err != nil {
		t.Fatal(err)
	}
	// The producer warpgroup's lever goes without the levers it excludes.
	cfg.CUDA = engine.CUDAConfig{AttnWarpSpec: 3}
	if a := cudaConfig(cfg, nil).Attn; a != (cuda.AttnSettings{WarpSpec: 3}) {
		t.Fatalf("attn_warp_spec 3: %+v", a)
	}
	cfg.CUDA = engine.CUDAConfig{AttnWarpSpec: 2, AttnPingPong: true}
	if a := cudaConfig(cfg, nil).Attn; a != (cuda.AttnSettings{WarpSpec: 2, PingPong: true}) {
		t.Fatalf("attn_pingpong: %+v", a)
	}
	cfg.CUDA = engine.CUDAConfig{AttnWarpSpec: 2, AttnKeyHalves: true}
	if a := cudaConfig(cfg, nil).Attn; a != (cuda.AttnSettings{WarpSpec: 2, KeyHalves: true}) {
		t.Fatalf("attn_key_halves: %+v", a)
	}
	cfg.CUDA = engine.CUDAConfig{AttnWarpSpec: 2, AttnPInt: 2, DenseTMA: true, AppendInPlace: true, ConvWide: true}
	if c := cudaConfig(cfg, nil); c.Attn != (cuda.AttnSettings{WarpSpec: 2, PInt: 2}) || !c.DenseTMA || !c.AppendInPlace || !c.ConvWide {
		t.Fatalf("attn_p_int, dense_tma, append_in_place, conv_wide: %+v, dense_tma %v, append_in_place %v, conv_wide %v",
			c.Attn, c.DenseTMA, c.AppendInPlace, c.ConvWide)
	}
}

// TestCUDAArches: the configuration takes exactly the compile targets the
// backend knows.
func TestCUDAArches(t *testing.T) {
	if !slices.Equal(engine.CUDAArches, cuda.Arches) {
		t.Fatalf("engine.CUDAArches %v, cuda.Arches %v", engine.CUDAArches, cuda.Arches)
	}
}

// TestBackendFactory: the program's backends by device name; the CPU
// backend has none of the optional capabilities, and an unknown device is
// an error naming it.
func TestBackendFactory(t *testing.T) {
	newBackend := backendFactory(nil)
	cfg := engine.DefaultConfig()
	cfg.Device, cfg.Threads = "cpu", 1
	be, err := newBackend(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if be.Name() != "cpu" || backend.Capabilities(be, nil) != nil {
		t.Fatalf("cpu: backend %q with capabilities %v", be.Name(), backend.Capabilities(be, nil))
	}
	cfg.Device = "tpu"
	if _, err := newBackend(cfg); err == nil || !strings.Contains(err.Error(), `"tpu"`) {
		t.Fatalf("unknown device: error %v", err)
	}
	cfg.Device = "cuda"
	cfg.CUDA.PagedKernel = "tma"
	_, err = newBackend(cfg)
	if !errors.Is(err, cuda.ErrNotBuilt) && (err == nil || !strings.Contains(err.Error(), "cudadev")) {
		t.Fatalf("a lab kernel: error %v, want cuda.ErrNotBuilt (no cuda tag) or one naming the cudadev tag", err)
	}
}
