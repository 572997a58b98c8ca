package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strconv"

	"github.com/lingbotmap/lingbotmap/cuda"
	"github.com/lingbotmap/lingbotmap/engine"
	"github.com/lingbotmap/lingbotmap/engine/backend"
	"github.com/lingbotmap/lingbotmap/engine/cpu"
)

// newEngineStream starts the engine on the backend cfg names: the stream
// factory of run, node, bench and verify.
func newEngineStream(ctx context.Context, cfg engine.Config, log *slog.Logger) (engine.Stream, error) {
	knobs, err := cudaKnobsFromEnv(os.Getenv)
	if err != nil {
		return nil, err
	}
	return engine.New(ctx, cfg, backendFactory(knobs, log), log)
}

// cudaKnobs are the CUDA backend's settings, field for field the
// configuration's `cuda` section (engine.CUDAConfig, which the configuration
// schema adds; this type gives way to it).
type cudaKnobs struct {
	KernelCache    string
	ExactAttention bool
	Profile        bool
	GEMMTuning     bool
	PDL            bool
	PagedKernel    string
	PagedSplits    int
}

// defaultCUDAKnobs are the schema's defaults.
func defaultCUDAKnobs() cudaKnobs {
	return cudaKnobs{GEMMTuning: true, PDL: true, PagedKernel: "auto"}
}

// cudaKnobsFromEnv reads the LINGBOTMAP_CUDA_* variables the backend read
// itself before it took plain settings; getenv is os.Getenv outside tests.
func cudaKnobsFromEnv(getenv func(string) string) (cudaKnobs, error) {
	k := defaultCUDAKnobs()
	k.KernelCache = getenv("LINGBOTMAP_CUDA_CACHE")
	k.ExactAttention = getenv("LINGBOTMAP_CUDA_EXACT_ATTENTION") == "1"
	k.Profile = getenv("LINGBOTMAP_CUDA_PROFILE") == "1"
	k.GEMMTuning = getenv("LINGBOTMAP_CUDA_GEMM_TUNING") != "0"
	k.PDL = getenv("LINGBOTMAP_CUDA_PDL") != "0"
	if v := getenv("LINGBOTMAP_CUDA_PAGED_KERNEL"); v != "" {
		k.PagedKernel = v
	}
	if v := getenv("LINGBOTMAP_CUDA_PAGED_SPLITS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return k, fmt.Errorf("LINGBOTMAP_CUDA_PAGED_SPLITS=%q: want a count ≥ 0", v)
		}
		k.PagedSplits = n
	}
	return k, nil
}

// cudaConfig maps the engine's device settings and the CUDA knobs onto the
// backend's configuration.
func cudaConfig(cfg engine.Config, k cudaKnobs, log *slog.Logger) cuda.Config {
	c := cuda.DefaultConfig()
	if cfg.Precision == "fp32" {
		c.Precision = cuda.FP32
	}
	c.CacheDir = k.KernelCache
	c.ExactAttention = k.ExactAttention
	c.Profile = k.Profile
	c.FixedGEMMAlgo = !k.GEMMTuning
	c.SerialLaunch = !k.PDL
	c.PagedKernel = k.PagedKernel
	c.PagedSplits = k.PagedSplits
	c.Logger = log
	return c
}

// backendFactory starts the backend an engine configuration names: the
// program chooses its backends here, so that the engine imports none. A
// binary built without the cuda tag answers "cuda" with cuda.ErrNotBuilt.
func backendFactory(k cudaKnobs, log *slog.Logger) engine.BackendFactory {
	return func(cfg engine.Config) (backend.Backend, error) {
		switch cfg.Device {
		case "cpu":
			return cpu.New(cpu.Config{Threads: cfg.Threads}), nil
		case "cuda":
			be, err := cuda.New(cudaConfig(cfg, k, log))
			if err != nil {
				return nil, fmt.Errorf("device cuda: %w", err)
			}
			return be, nil
		}
		return nil, fmt.Errorf("unknown device %q (want cpu or cuda)", cfg.Device)
	}
}
