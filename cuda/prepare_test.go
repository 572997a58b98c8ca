//go:build cuda

package cuda

import (
	"context"
	"testing"

	"github.com/lingbotmap/lingbotmap/engine"
	"github.com/lingbotmap/lingbotmap/engine/backend"
	"github.com/lingbotmap/lingbotmap/engine/kvcache"
)

// TestKernelsPreparedAtStart: a fresh backend of each precision (and of
// each attention setting that picks other kernels) loads every kernel
// module that golden streams then run, in streaming (a phase 1 of 3 and of
// 9 scale frames, keyframes by flow) and windowed modes, before it returns
// from New: none is compiled while frames come.
func TestKernelsPreparedAtStart(t *testing.T) {
	settings := []struct {
		name      string
		precision string
		set       func(*Config)
	}{
		{"fp32", "fp32", func(*Config) {}},
		{"bf16", "bf16", func(*Config) {}},
		{"fp8", "fp8", func(*Config) {}},
		{"bf16 exact", "bf16", func(c *Config) { c.ExactAttention = true }},
		{"bf16 fa2", "bf16", func(c *Config) { c.PagedKernel = pagedFA2 }},
		{"fp8 fa2", "fp8", func(c *Config) { c.PagedKernel = pagedFA2 }},
		{"bf16 camera head bf16", "bf16", func(c *Config) { c.CameraHeadBF16 = true }},
		// Every softmax lever at once: the variant module is prepared.
		{"bf16 attention levers", "bf16", func(c *Config) { c.Attn = attnVariants[len(attnVariants)-1] }},
		{"fp8 attention levers", "fp8", func(c *Config) { c.Attn = attnVariants[len(attnVariants)-1] }},
	}
	modes := []struct {
		name, golden string
		set          func(*engine.Config)
	}{
		{"flow keyframes", "stream_flow", func(c *engine.Config) { c.FlowThreshold = 14 }},
		{"nine scale frames", "stream_kf1", func(c *engine.Config) { c.ScaleFrames = 9 }},
		{"windowed", "windowed_kf2", func(c *engine.Config) { c.Windowed = true; c.KeyframeInterval = 2 }},
	}
	for _, s := range settings {
		t.Run(s.name, func(t *testing.T) {
			for _, mode := range modes {
				cfg := goldenEngineConfig(t, s.precision)
				mode.set(&cfg)
				var g *gpu
				st, err := engine.New(context.Background(), cfg, keptFactory(s.set, &g), nil)
				if err != nil {
					t.Fatal(err)
				}
				n := len(pushAll(t, st, goldenFrames(t, mode.golden), true))
				late := g.lateModules()
				if err := st.Close(); err != nil {
					t.Fatal(err)
				}
				if n == 0 {
					t.Fatalf("%s: no results", mode.name)
				}
				if len(late) > 0 {
					t.Errorf("%s: kernel modules %q were compiled during the stream; startupModules must list them", mode.name, late)
				}
			}
		})
	}
}

// keptFactory starts backends as the program does (testConfig with the
// stream's window), changed by set, and keeps the last one in *g.
func keptFactory(set func(*Config), g **gpu) engine.BackendFactory {
	return func(cfg engine.Config) (backend.Backend, error) {
		c := testConfig(precisions[cfg.Precision])
		c.Window = Window{ScaleFrames: cfg.ScaleFrames, SlidingWindow: cfg.SlidingWindow, Headroom: cfg.CacheHeadroom,
			MaxFrames: cfg.MaxFrames, SpecialPerFrame: kvcache.SpecialPerFrame, CameraIterations: cfg.CameraIterations,
			ImageWidth: cfg.ImageWidth}
		set(&c)
		be, err := New(c)
		if err == nil {
			*g = be.(*gpu)
		}
		return be, err
	}
}

// lateModules are the kernel modules loaded after prepareKernels (owner
// thread).
func (g *gpu) lateModules() []string {
	var late []string
	_ = g.own.do(func() error {
		late = append(late, g.kernels.late...)
		return nil
	})
	return late
}
