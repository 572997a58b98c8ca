package main

import (
	"errors"
	"strings"
	"testing"

	"github.com/lingbotmap/lingbotmap/cuda"
	"github.com/lingbotmap/lingbotmap/engine"
	"github.com/lingbotmap/lingbotmap/engine/backend"
)

func TestCUDAKnobsFromEnv(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	k, err := cudaKnobsFromEnv(env(nil))
	if err != nil || k != defaultCUDAKnobs() {
		t.Fatalf("no variables: %+v, %v; want the defaults %+v", k, err, defaultCUDAKnobs())
	}
	k, err = cudaKnobsFromEnv(env(map[string]string{
		"LINGBOTMAP_CUDA_CACHE": "/k", "LINGBOTMAP_CUDA_EXACT_ATTENTION": "1", "LINGBOTMAP_CUDA_PROFILE": "1",
		"LINGBOTMAP_CUDA_GEMM_TUNING": "0", "LINGBOTMAP_CUDA_PDL": "0", "LINGBOTMAP_CUDA_PAGED_KERNEL": "fa2",
		"LINGBOTMAP_CUDA_PAGED_SPLITS": "4",
	}))
	want := cudaKnobs{KernelCache: "/k", ExactAttention: true, Profile: true, PagedKernel: "fa2", PagedSplits: 4}
	if err != nil || k != want {
		t.Fatalf("every variable: %+v, %v; want %+v", k, err, want)
	}
	if _, err := cudaKnobsFromEnv(env(map[string]string{"LINGBOTMAP_CUDA_PAGED_SPLITS": "x"})); err == nil ||
		!strings.Contains(err.Error(), "LINGBOTMAP_CUDA_PAGED_SPLITS") {
		t.Fatalf("a bad split count: error %v, want one naming the variable", err)
	}
}

// TestCUDAConfig: the defaults map onto cuda.DefaultConfig, and every knob
// onto its field.
func TestCUDAConfig(t *testing.T) {
	cfg := engine.DefaultConfig()
	cfg.Device = "cuda"
	got := cudaConfig(cfg, defaultCUDAKnobs(), nil)
	if got != cuda.DefaultConfig() {
		t.Fatalf("defaults: %+v, want cuda.DefaultConfig() %+v", got, cuda.DefaultConfig())
	}
	cfg.Precision = "fp32"
	got = cudaConfig(cfg, cudaKnobs{KernelCache: "-", ExactAttention: true, Profile: true, PagedKernel: "fa2", PagedSplits: 3}, nil)
	want := cuda.Config{Precision: cuda.FP32, CacheDir: "-", ExactAttention: true, Profile: true, FixedGEMMAlgo: true,
		SerialLaunch: true, PagedKernel: "fa2", PagedSplits: 3}
	if got != want {
		t.Fatalf("every knob: %+v, want %+v", got, want)
	}
	if err := got.Validate(); err != nil {
		t.Fatal(err)
	}
}

// TestBackendFactory: the program's backends by device name; the CPU
// backend has none of the optional capabilities, and an unknown device is
// an error naming it.
func TestBackendFactory(t *testing.T) {
	newBackend := backendFactory(defaultCUDAKnobs(), nil)
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
	_, err = backendFactory(cudaKnobs{PagedKernel: "tma"}, nil)(cfg)
	if !errors.Is(err, cuda.ErrNotBuilt) && (err == nil || !strings.Contains(err.Error(), "cudadev")) {
		t.Fatalf("a lab kernel: error %v, want cuda.ErrNotBuilt (no cuda tag) or one naming the cudadev tag", err)
	}
}
