//go:build cuda && cudadev

package cuda

import (
	"embed"
	"io/fs"

	"gorgonia.org/cu"
)

// The lab's kernel sources (cuda/dev/kernels), compiled like the production
// ones when a lab variant is chosen.
//
//go:embed dev/kernels/*.cu
var labFS embed.FS

func labKernels() fs.FS {
	sub, err := fs.Sub(labFS, "dev/kernels")
	if err != nil {
		return nil
	}
	return sub
}

// mmaBQ is the 16-row kernels' block of 4 warps × 16 queries (their key
// tiles are mmaTK rows, as fa2's).
const mmaBQ = 64

// tmaKernel is the Hopper paged kernel with two warpgroups and TMA copies:
// tmaStages stages of K and V, each with a barrier of 8 bytes, plus 1 KB of
// alignment slack. Superseded by tma3Kernel (cuda/NOTES.md).
var tmaKernel = attnKernel{module: "attention_lab", name: "attn_tma_paged_bf", bq: 128, tk: 128, perSM: 1, smem: tmaStages*(2*128*64*2+8) + 1024, threads: 256, bfOut: true}

// labAttention runs dense bf16 attention with the lab's 16-row kernel when
// it is the chosen variant (owner thread).
func (g *gpu) labAttention(out, qt, kt, vt *Tensor, scale float32) (bool, error) {
	if g.pagedVariant != pagedSimple {
		return false, nil
	}
	b, nq, h, d := qt.shape[0], qt.shape[1], qt.shape[2], qt.shape[3]
	nk := kt.shape[1]
	k := attnKernel{module: "attention_lab", name: "attn_mma_dense", bq: mmaBQ, tk: mmaTK}
	return true, g.attend(k, out, b, nq, h, d, nk, func(o, pm, pl cu.DevicePtr) []any {
		return []any{qt.ptr(), kt.ptr(), vt.ptr(), nq, nk, h, scale, o, pm, pl}
	})
}

// labPagedKernel chooses the paged kernel of a lab variant; ok is false
// when the production choice applies (owner thread).
func (g *gpu) labPagedKernel(st *kvStore, layer int, fast bool) (k attnKernel, kArg, vArg any, ok bool, err error) {
	kArg, vArg = st.k[layer], st.v[layer]
	hopper := fast && g.kernels.hopper()
	switch {
	case fast && g.pagedVariant == pagedSimple:
		return attnKernel{module: "attention_lab", name: "attn_mma_paged_bf", bq: mmaBQ, tk: mmaTK}, kArg, vArg, true, nil
	case fast && g.pagedVariant == pagedExact:
		return fmaKernel("attn_paged_bf_d64"), kArg, vArg, true, nil
	case hopper && g.pagedVariant == pagedTMA && st.spec.PageSize >= tmaKernel.tk:
		maps, err := st.tensorMaps()
		if err != nil {
			return k, nil, nil, true, err
		}
		k = tmaKernel
		k.splits = g.pagedSplits
		return k, maps.at(2 * layer), maps.at(2*layer + 1), true, nil
	case hopper && (g.pagedVariant == pagedWG || g.pagedVariant == pagedTMA):
		return wgKernel, kArg, vArg, true, nil
	case hopper && (g.pagedVariant == pagedPoly4 || g.pagedVariant == pagedPoly2) && st.spec.PageSize >= tma3Kernel.tk:
		maps, err := st.tensorMaps()
		if err != nil {
			return k, nil, nil, true, err
		}
		k = tma3Kernel
		k.module, k.name = "attention_lab", "attn_tma3_paged_bf_"+g.pagedVariant
		k.splits = g.pagedSplits
		return k, maps.at(2 * layer), maps.at(2*layer + 1), true, nil
	}
	return k, kArg, vArg, false, nil
}

// labF8Kernel is the FP8 cache's kernel of a lab variant; ok is false when
// the production one applies.
func (g *gpu) labF8Kernel() (k attnKernel, ok bool) {
	if g.pagedVariant != pagedPoly4 && g.pagedVariant != pagedPoly2 {
		return k, false
	}
	k = f8Kernel
	k.module, k.name = "attention_lab", "attn_f8_paged_"+g.pagedVariant
	return k, true
}
