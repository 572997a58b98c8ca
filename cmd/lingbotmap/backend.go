package main

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/lingbotmap/lingbotmap/cuda"
	"github.com/lingbotmap/lingbotmap/engine"
	"github.com/lingbotmap/lingbotmap/engine/backend"
	"github.com/lingbotmap/lingbotmap/engine/cpu"
	"github.com/lingbotmap/lingbotmap/engine/kvcache"
)

// newEngineStream starts the engine on the backend cfg names: the stream
// factory of run, node, bench and verify.
func newEngineStream(ctx context.Context, cfg engine.Config, log *slog.Logger) (engine.Stream, error) {
	return engine.New(ctx, cfg, backendFactory(log), log)
}

// cudaConfig maps the engine's device settings and the configuration's cuda
// section onto the backend's configuration.
func cudaConfig(cfg engine.Config, log *slog.Logger) cuda.Config {
	k := cfg.CUDA
	c := cuda.DefaultConfig()
	switch cfg.Precision {
	case "fp32":
		c.Precision = cuda.FP32
	case "fp8":
		c.Precision = cuda.FP8
	}
	c.CacheDir = k.KernelCache
	c.ExactAttention = k.ExactAttention
	c.Profile = k.Profile
	c.FixedGEMMAlgo = !k.GEMMTuning
	c.SerialLaunch = !k.PDL
	c.Graphs = k.Graphs
	c.PagedKernel = k.PagedKernel
	c.PagedSplits = k.PagedSplits
	c.Attn = cuda.AttnSettings{ExpPoly: k.AttnExpPoly, LazyRescale: k.AttnLazyRescale, FoldCombine: k.AttnFoldCombine, FreeRun: k.AttnFreeRun, ScoresAhead: k.AttnScoresAhead, WarpSpec: k.AttnWarpSpec, PingPong: k.AttnPingPong, KeyHalves: k.AttnKeyHalves, PInt: k.AttnPInt}
	c.Arch = k.Arch
	c.FuseNorm = k.FuseNorm
	c.LeanQKV = k.LeanQKV
	c.WarpCombine = k.WarpCombine
	c.LayerNormV4 = k.LayerNormV4
	c.FC1BF16 = k.FC1BF16
	c.CameraHeadBF16 = k.CameraHeadBF16
	c.AsyncPageTable = k.AsyncPageTable
	c.QKVBF16 = k.QKVBF16
	c.CameraHeadFuseNorm = k.CameraHeadFuseNorm
	c.SideStream = k.SideStream
	c.DenseTMA = k.DenseTMA
	c.AppendInPlace = k.AppendInPlace
	c.ConvWide = k.ConvWide
	c.Window = cuda.Window{ScaleFrames: cfg.ScaleFrames, SlidingWindow: cfg.SlidingWindow, Headroom: cfg.CacheHeadroom,
		MaxFrames: cfg.MaxFrames, SpecialPerFrame: kvcache.SpecialPerFrame, CameraIterations: cfg.CameraIterations,
		ImageWidth: cfg.ImageWidth}
	c.Logger = log
	return c
}

// backendFactory starts the backend an engine configuration names: the
// program chooses its backends here, so that the engine imports none. A
// binary built without the cuda tag answers "cuda" with cuda.ErrNotBuilt.
func backendFactory(log *slog.Logger) engine.BackendFactory {
	return func(cfg engine.Config) (backend.Backend, error) {
		switch cfg.Device {
		case "cpu":
			return cpu.New(cpu.Config{Threads: cfg.Threads, FP8KV: cfg.Precision == "fp8"}), nil
		case "cuda":
			be, err := cuda.New(cudaConfig(cfg, log))
			if err != nil {
				return nil, fmt.Errorf("device cuda: %w", err)
			}
			return be, nil
		}
		return nil, fmt.Errorf("unknown device %q (want cpu or cuda)", cfg.Device)
	}
}
