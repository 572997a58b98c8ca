//go:build cuda

package cuda

import (
	"fmt"
	"time"
)

// startupModules are the kernel modules a stream of this configuration
// runs (its precision, attention settings and target), for prepareKernels.
// The model's head dims are 64 (trunk) and 128 (camera head).
// TestKernelsPreparedAtStart runs golden streams on fresh backends and
// fails if any other module is loaded later.
func (g *gpu) startupModules() []string {
	mods := []string{"elementwise", "layernorm", "movement", "qkv", "rope", "conv", "conv_igemm", "unproject",
		"attention_decode", "attention+combine"}
	if g.cfg.Precision == FP8 {
		mods = append(mods, "kvfp8")
	}
	if g.headBF16 {
		mods = append(mods, "gemv")
	}
	fast := g.cfg.Precision.bf16Trunk() && !g.cfg.ExactAttention
	if fast {
		mods = append(mods, "attention_fa2")
		if g.kernels.hopper() {
			mods = append(mods, g.attn.hopperModule())
		}
	} else {
		mods = append(mods, "attention+attn_dense_f32_d64")
		if g.cfg.Precision == FP32 {
			mods = append(mods, "attention+attn_paged_f32_d64")
		} else {
			mods = append(mods, "attention+attn_paged_bf_d64")
		}
	}
	// The camera head's attention over more than decodeQueries frames (a
	// phase 1 of more scale frames).
	if g.cfg.Window.ScaleFrames > decodeQueries {
		mods = append(mods, "attention+attn_dense_f32_d128")
	}
	return mods
}

// prepareKernels compiles (NVRTC, in parallel, or from the disk cache) and
// loads every module in startupModules, so that the first frames of a
// stream, a camera's included, do not wait for a compiler.
func (g *gpu) prepareKernels() error {
	start := time.Now()
	mods := g.startupModules()
	ptx, err := g.kernels.compileAll(mods)
	if err != nil {
		return err
	}
	err = g.own.do(func() error {
		for i, m := range mods {
			if _, ok := g.kernels.modules[m]; ok {
				continue
			}
			if _, err := g.kernels.load(m, ptx[i]); err != nil {
				return err
			}
		}
		g.kernels.prepared = true
		return nil
	})
	if err != nil {
		return fmt.Errorf("cuda: preparing kernels: %w", err)
	}
	g.log.Info("cuda kernels ready", "modules", len(mods), "arch", g.target.arch, "took", time.Since(start).Round(time.Millisecond))
	return nil
}
