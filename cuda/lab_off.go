//go:build cuda && !cudadev

package cuda

import "io/fs"

// Without the cudadev tag the lab's kernels are not in the binary.

func labKernels() fs.FS { return nil }

func (g *gpu) labAttention(out, qt, kt, vt *Tensor, scale float32) (bool, error) { return false, nil }

func (g *gpu) labPagedKernel(st *kvStore, layer int, fast bool) (attnKernel, any, any, bool, error) {
	return attnKernel{}, nil, nil, false, nil
}

func (g *gpu) labF8Kernel() (attnKernel, bool) { return attnKernel{}, false }
