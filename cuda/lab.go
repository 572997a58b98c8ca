//go:build cudadev

package cuda

// The lab's paged attention variants (cuda/dev): kernels kept for comparison
// with the production ones, selectable through Config.PagedKernel in a
// binary built with the cudadev tag.
const (
	pagedSimple = "mma"   // attn_mma_*: the unpipelined 16-row mma.sync kernels (paged, and dense on fp32 k and v)
	pagedExact  = "exact" // the fp32 FMA kernel on the bf16 cache
	pagedWG     = "wg"    // attn_wg_paged_bf for every page size, Hopper only (fa2 elsewhere)
	pagedTMA    = "tma"   // attn_tma_paged_bf: two warpgroups with TMA copies, Hopper and pages of ≥ 128 rows (else wg)
	// The production TMA kernels (bf16 tma3, and the FP8 cache's) with every
	// fourth or second group of exponentials from a polynomial on the FMA
	// units; pages of ≥ 128 rows, else the production choice.
	pagedPoly4 = "poly4"
	pagedPoly2 = "poly2"
)

// labPagedKernels are the lab's values of Config.PagedKernel.
func labPagedKernels() []string {
	return []string{pagedSimple, pagedExact, pagedWG, pagedTMA, pagedPoly4, pagedPoly2}
}
