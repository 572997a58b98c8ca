//go:build cuda

package cuda

import (
	"fmt"
	"slices"

	"gorgonia.org/cu"

	"github.com/lingbotmap/lingbotmap/engine/backend"
)

// Geometry of the attention kernels: queries per block and keys per tile.
const (
	fmaBQ = 128 // kernels/attention.cu: one query per thread, fp32
	fmaTK = 32
	mmaTK = 64  // kernels/attention_fa2.cu: mma.sync key tiles
	faBQ  = 128 // attn_fa2_*_bf: 4 warps × 32 queries
)

// The exact fp32 attention of at most decodeQueries queries a batch (the
// camera head's one query per frame over its cache) runs one block of
// decodeThreads per query and head (kernels/attention_decode.cu): the
// query-per-thread kernel would leave a block's other threads idle and walk
// a cache that grows with the stream serially.
const (
	decodeQueries = 8
	decodeThreads = 256
)

// attnKernel is one attention launch configuration. perSM > 0 is how many
// blocks of it fit on a multiprocessor; such a kernel is split over the keys
// only as far as one full wave of blocks (its blocks are long-lived and
// equal, so more waves would only add a tail and a bigger merge), unless
// fillWaves says to fill whole waves.
type attnKernel struct {
	module, name string
	bq, tk       int
	perSM        int
	smem         int // dynamic shared memory bytes
	threads      int // a block; 0 means 128
	// bfOut: the kernel's last parameter is an optional bf16 copy of the
	// output, written when the key range is not split.
	bfOut bool
	// fillWaves: split the keys so that the blocks fill whole waves of
	// perSM blocks an SM (see splits).
	fillWaves bool
	// splits, when positive, is the split count to use (at most what the
	// keys allow).
	splits int
	// fold: a Hopper kernel compiled with ATTN_FOLD_COMBINE, whose last
	// parameters are the split counters and the merged output.
	fold bool
}

// foldCounters is how many (query tile, head) blocks of one launch the
// split counters of ATTN_FOLD_COMBINE cover (a frame's global attention has
// 96; more fall back to attn_combine).
const foldCounters = 4096

// faStage is one cp.async stage of attn_fa*_paged_bf: a K and a V tile of
// 64 keys × 72 (padded) bf16.
const faStage = 2 * mmaTK * 72 * 2

// Paged kernel variants (gpu.pagedVariant, from Config.PagedKernel); the
// lab's (cudadev builds) are in lab_kernels.go.
const (
	pagedFA  = ""    // default: attn_tma3_paged_bf (or attn_wg_paged_bf for small pages) on Hopper, attn_fa2_paged_bf elsewhere
	pagedFA2 = "fa2" // attn_fa2_paged_bf: mma.sync, cp.async pipelined, 32 queries a warp, on every GPU
)

// wgStages and tmaStages are WSTAGES and WSTAGES_TMA in
// kernels/attention_hopper.cu: the Hopper kernels' K+V stages.
const (
	wgStages  = 5
	tmaStages = 4
)

// wgKernel is the Hopper paged kernel: 2 warpgroups × 64 queries, 128-key
// tiles in wgStages cp.async stages of K and V (16 KB each), plus 1 KB to
// align the swizzled tiles.
var wgKernel = attnKernel{module: "attention_hopper", name: "attn_wg_paged_bf", bq: 128, tk: 128, perSM: 1, smem: wgStages*2*128*64*2 + 1024, threads: 256, bfOut: true}

// tma3Kernel is the Hopper paged kernel for pages of at least a tile: three
// warpgroups (192 queries a block), tiles copied by the TMA (one tile never
// straddles two pages) in tmaStages stages, Q in shared memory (8 KB a
// warpgroup after a 1 KB slot for the barriers), plus 1 KB of alignment
// slack. Its few blocks need key splits: fillWaves picks them. The default
// on Hopper (cuda/NOTES.md: the Hopper paged kernel), in the shape that
// hopperKernel gives it: with attn_warp_spec (2 by default) that many
// consumer warpgroups and a producer.
var tma3Kernel = attnKernel{module: "attention_hopper", name: "attn_tma3_paged_bf", bq: 192, tk: 128, perSM: 1, smem: tmaStages*2*128*64*2 + 1024 + 3*8192 + 1024, threads: 384, bfOut: true, fillWaves: true}

// f8Kernel reads the FP8 cache (FP8 mode, Hopper): tma3's schedule on e4m3
// tiles, 16 KB a K+V stage, then the barriers' 1 KB, Q as two e4m3 tiles
// (8 KB a warpgroup) and its row scales (256 bytes a warpgroup), plus 1 KB of
// alignment slack (kernels/attention_hopper.cu, F8).
var f8Kernel = attnKernel{module: "attention_hopper", name: "attn_f8_paged", bq: 192, tk: 128, perSM: 1, smem: tmaStages*2*128*64 + 1024 + 3*8192 + 3*256 + 1024, threads: 384, bfOut: true, fillWaves: true}

// fa2F8Kernel reads the FP8 cache on any GPU: fa2's schedule on e4m3 tiles
// widened to fp16, two stages of a K and a Vᵀ tile of 64 rows × 80 bytes.
var fa2F8Kernel = attnKernel{module: "attention_fa2", name: "attn_fa2_paged_f8", bq: faBQ, tk: mmaTK, perSM: 2, smem: 2 * 2 * mmaTK * 80, bfOut: true}

// hopperKernel is one of the Hopper kernels above compiled with the
// backend's softmax levers (gpu.attn): its module, the shared memory of
// ATTN_FREE_RUN 2's fifth stage, and with the row sums on the tensor cores
// that of their ones (kernels/attention_hopper.cu, RS): a 1 KB atom after
// each stage's Vᵀ tile in FP8, else one 1 KB block.
func (g *gpu) hopperKernel(k attnKernel) attnKernel {
	k.module = g.attn.hopperModule()
	k.fold = g.attn.FoldCombine
	stages := tmaStages
	if k.name == tma3Kernel.name || k.name == f8Kernel.name {
		// The stages (a K and a V tile, bf16 or e4m3), the barriers' 1 KB,
		// Q (8 KB a warpgroup), FP8's row scales of Q (256 bytes a
		// warpgroup) and the alignment's 1 KB.
		f8 := k.name == f8Kernel.name
		stages = g.attn.tmaStages(f8)
		wgs := g.attn.tmaWarpgroups()
		tile := k.tk * 64 * 2
		if f8 {
			tile = k.tk * 64
		}
		k.smem = stages*2*tile + 1024 + wgs*8192 + 1024
		if f8 {
			k.smem += wgs * 256
		}
		k.bq, k.threads = 64*wgs, 128*wgs
		if g.attn.KeyHalves {
			k.threads *= 2 // two consumers a query tile
		}
		if g.attn.WarpSpec != 0 {
			k.threads += 128 // the producer
		}
	}
	switch {
	case g.attn.RowSumMMA && k.name == f8Kernel.name:
		k.smem += stages * 1024
	case g.attn.RowSumMMA:
		k.smem += 1024
	}
	return k
}

// aheadStages is WSTAGES_AHEAD in kernels/attention_hopper.cu: the TMA
// kernels' K+V stages with the scores ahead; wsStagesF8 and wsStagesBF are
// WSTAGES_WS_F8 and WSTAGES_WS_BF, theirs with a producer warpgroup.
const (
	aheadStages = 6
	wsStagesF8  = 8
	wsStagesBF  = 6
)

// tmaStages is the number of K+V stages of the TMA kernels
// (attn_tma3_paged_bf, attn_f8_paged when f8) with these settings.
func (a AttnSettings) tmaStages(f8 bool) int {
	switch {
	case a.WarpSpec != 0 && f8:
		return wsStagesF8
	case a.WarpSpec != 0:
		return wsStagesBF
	case a.ScoresAhead:
		return aheadStages
	case a.FreeRun == 2:
		return tmaStages + 1
	}
	return tmaStages
}

// tmaWarpgroups is the number of 64-query warpgroups in a block of the TMA
// kernels (ATTN_TMA_NWG; a producer comes on top with WarpSpec).
func (a AttnSettings) tmaWarpgroups() int {
	if a.WarpSpec != 0 {
		return a.WarpSpec
	}
	if a.ScoresAhead {
		return 2
	}
	return 3
}

// fa2Kernel is the mma.sync pipelined kernel, paged or dense.
func fa2Kernel(name string) attnKernel {
	return attnKernel{module: "attention_fa2", name: name, bq: faBQ, tk: mmaTK, perSM: 2, smem: 2 * faStage, bfOut: true}
}

// splits chooses how many blocks share one (query tile, head) so that the
// GPU has enough blocks even for one frame's queries over 72 000 keys, while
// each split keeps at least a few tiles of keys.
func (g *gpu) splits(k attnKernel, blocks, nk int) int {
	want := (8*g.info.sms + blocks - 1) / max(blocks, 1)
	if k.perSM > 0 {
		want = k.perSM * g.info.sms / max(blocks, 1)
	}
	most := max(1, nk/(k.tk*8))
	if k.splits > 0 {
		return min(k.splits, most)
	}
	if k.fillWaves && k.perSM > 0 {
		// The fewest splits whose waves are at least 95 % full (each split
		// adds partial results for the merge), else the fullest.
		wave := k.perSM * g.info.sms
		best, bestFill := 1, 0.0
		for ns := 1; ns <= min(most, 16); ns++ {
			n := blocks * ns
			fill := float64(n) / float64((n+wave-1)/wave*wave)
			if fill >= 0.95 {
				return ns
			}
			if fill > bestFill {
				best, bestFill = ns, fill
			}
		}
		return best
	}
	return max(1, min(want, most, 64))
}

// attend launches one attention kernel and, when the key range is split,
// the merge of the partial results (owner thread). In BF16 mode a kernel
// that can (bfOut) also writes out's bf16 copy for the GEMM that reads the
// attention next (the block's proj), sparing that GEMM a cast.
func (g *gpu) attend(k attnKernel, out *Tensor, batch, nq, h, d, nk int, args func(o, pm, pl cu.DevicePtr) []any) error {
	qTiles := (nq + k.bq - 1) / k.bq
	ns := g.splits(k, qTiles*batch*h, nk)
	// fold: the kernel merges the splits itself (ATTN_FOLD_COMBINE), when
	// its blocks fit the counters.
	fold := k.fold && ns > 1 && qTiles*batch*h <= foldCounters
	if k.bfOut {
		var obf cu.DevicePtr
		if (ns == 1 || fold) && g.cfg.Precision.bf16Trunk() {
			var err error
			if obf, err = g.attachBF16(out); err != nil {
				return err
			}
		}
		inner := args
		args = func(o, pm, pl cu.DevicePtr) []any { return append(inner(o, pm, pl), obf) }
	}
	if k.fold {
		var counters, fin cu.DevicePtr
		if fold {
			if g.foldCounts == nil {
				c, err := g.pool.get(foldCounters * 4)
				if err != nil {
					return err
				}
				if err := g.batch.zero(c.ptr, foldCounters); err != nil {
					g.pool.put(c)
					return err
				}
				g.foldCounts = c
			}
			counters, fin = g.foldCounts.ptr, out.ptr()
		}
		inner := args
		args = func(o, pm, pl cu.DevicePtr) []any { return append(inner(o, pm, pl), counters, fin) }
	}
	grid := [3]int{qTiles, batch * h, ns}
	block := [3]int{128, 1, 1}
	if k.threads > 0 {
		block[0] = k.threads
	}
	if k.smem > 48<<10 {
		if err := g.allowSharedMemory(k.module, k.name, k.smem); err != nil {
			return err
		}
	}
	if ns == 1 {
		return g.launch(k.module, k.name, grid, block, k.smem, args(out.ptr(), 0, 0)...)
	}
	rowsh := int64(batch) * int64(nq) * int64(h)
	part, err := g.scratch(int64(ns) * rowsh * int64(d+2) * 4)
	if err != nil {
		return err
	}
	defer g.pool.put(part)
	po := part.ptr
	pm := po + cu.DevicePtr(int64(ns)*rowsh*int64(d)*4)
	pl := pm + cu.DevicePtr(int64(ns)*rowsh*4)
	if err := g.launch(k.module, k.name, grid, block, k.smem, args(po, pm, pl)...); err != nil {
		return err
	}
	if fold {
		return nil
	}
	if d == 64 && g.cfg.WarpCombine && aligned(8, out.ptr()) {
		// A warp a row; in BF16 mode it also writes the bf16 copy that an
		// unsplit kernel would have (bfOut), sparing the proj GEMM a cast.
		var obf cu.DevicePtr
		if k.bfOut && g.cfg.Precision.bf16Trunk() {
			if obf, err = g.attachBF16(out); err != nil {
				return err
			}
		}
		return g.launch1D("attention+combine", "attn_combine_d64", rowsh*32, out.ptr(), po, pm, pl, rowsh, ns, obf)
	}
	return g.launch1D("attention+combine", "attn_combine", rowsh*int64(d), out.ptr(), po, pm, pl, rowsh, d, ns)
}

// fmaKernel is the exact fp32 kernel variant for a head dim and KV kind.
func fmaKernel(name string) attnKernel {
	return attnKernel{module: "attention+" + name, name: name, bq: fmaBQ, tk: fmaTK}
}

// Attention is dense softmax(q·kᵀ·scale)·v per batch and head. In BF16 mode
// head dim 64 runs on the tensor cores in bf16 (as the reference's autocast
// SDPA); other head dims and FP32 mode use the exact fp32 kernel.
func (g *gpu) Attention(q, k, v backend.Tensor, scale float32) backend.Tensor {
	// k and v may exist only in bf16 (SplitQKV with backend.KVAttention):
	// the bf16 kernels read that, the others get the fp32 values back.
	qt, kt, vt := g.tensor(q), g.gemmTensor(k), g.gemmTensor(v)
	if len(qt.shape) != 4 || len(kt.shape) != 4 || !slices.Equal(kt.shape, vt.shape) ||
		kt.shape[0] != qt.shape[0] || kt.shape[2] != qt.shape[2] || kt.shape[3] != qt.shape[3] {
		panic(fmt.Sprintf("cuda: Attention wants q [B,Nq,H,D], k and v [B,Nk,H,D]: q %v k %v v %v", qt.shape, kt.shape, vt.shape))
	}
	b, nq, h, d := qt.shape[0], qt.shape[1], qt.shape[2], qt.shape[3]
	nk := kt.shape[1]
	if d != 32 && d != 64 && d != 128 {
		panic(fmt.Sprintf("cuda: Attention supports head dims 32, 64 and 128, not %d", d))
	}
	return g.output(qt.shape, "Attention", func(out *Tensor) error {
		if qt.numel() == 0 {
			return nil
		}
		fast := g.cfg.Precision.bf16Trunk() && d == 64 && !g.cfg.ExactAttention
		if !fast || (g.pagedVariant != pagedFA && g.pagedVariant != pagedFA2) {
			// Every kernel but the production bf16 ones (a lab variant's
			// too) reads fp32 k and v.
			if err := g.restoreF32(kt); err != nil {
				return err
			}
			if err := g.restoreF32(vt); err != nil {
				return err
			}
		}
		if fast {
			// Trunk attention (DINO, frame and global blocks; the camera
			// head's heads are 128 wide and stay fp32 like the reference).
			if done, err := g.labAttention(out, qt, kt, vt, scale); done {
				return err
			}
			return g.denseBF(out, qt, kt, vt, scale)
		}
		if nq <= decodeQueries {
			// One block per (batch, query, head), keys spread over its warps.
			return g.launch("attention_decode", fmt.Sprintf("attn_decode_f32_d%d", d), [3]int{b * nq * h, 1, 1}, [3]int{decodeThreads, 1, 1}, 0,
				qt.ptr(), kt.ptr(), vt.ptr(), nq, nk, h, scale, out.ptr())
		}
		k := fmaKernel(fmt.Sprintf("attn_dense_f32_d%d", d))
		return g.attend(k, out, b, nq, h, d, nk, func(o, pm, pl cu.DevicePtr) []any {
			return []any{qt.ptr(), kt.ptr(), vt.ptr(), nq, nk, h, scale, o, pm, pl}
		})
	})
}

// denseBF runs a pipelined tensor-core kernel on bf16 copies of k and v:
// rounding them once costs a few microseconds, where the fp32-input kernel
// rounded every tile in registers and could not copy it with cp.async. On
// Hopper one batch (a frame's DINO or frame-block attention in a stream) goes
// to the warpgroup paged kernel, its keys one page of nk rows (with
// Config.DenseTMA and at least a tile of keys, the TMA paged kernel, through
// tensor maps of k and v as that page); several (phase 1) to the mma.sync
// kernel, which has a batch dimension.
func (g *gpu) denseBF(out, qt, kt, vt *Tensor, scale float32) error {
	b, nq, h, d := qt.shape[0], qt.shape[1], qt.shape[2], qt.shape[3]
	nk := kt.shape[1]
	var kb, vb cu.DevicePtr
	if kt.buf.bf != nil && vt.buf.bf != nil {
		kb, vb = kt.buf.bf.ptr, vt.buf.bf.ptr // written by SplitQKV
	} else {
		n := kt.numel()
		kv, err := g.scratch(2 * int64(n) * 2)
		if err != nil {
			return err
		}
		defer g.pool.put(kv)
		kb, vb = kv.ptr, kv.ptr+cu.DevicePtr(int64(n)*2)
		if err := g.toBF16(kb, kt.ptr(), int64(n)); err != nil {
			return err
		}
		if err := g.toBF16(vb, vt.ptr(), int64(n)); err != nil {
			return err
		}
	}
	if b == 1 && g.kernels.hopper() && g.pagedVariant != pagedFA2 {
		if g.onePage == nil {
			pt, err := g.pool.get(4)
			if err != nil {
				return err
			}
			if err := g.batch.zero(pt.ptr, 1); err != nil {
				g.pool.put(pt)
				return err
			}
			g.onePage = pt
		}
		k, kArg, vArg := g.hopperKernel(wgKernel), any(kb), any(vb)
		if g.denseTMA && d == 64 && nk >= tma3Kernel.tk {
			if g.denseMaps == nil {
				m, err := newTensorMaps(2)
				if err != nil {
					return err
				}
				g.denseMaps = m
			}
			// A launch copies the maps (queued or not), so the next call
			// may encode its own into the same memory.
			for i, base := range []cu.DevicePtr{kb, vb} {
				if err := g.denseMaps.encodeBF16Pages(i, base, h*d, nk, 1, d, tma3Kernel.tk); err != nil {
					return err
				}
			}
			k, kArg, vArg = g.hopperKernel(tma3Kernel), g.denseMaps.at(0), g.denseMaps.at(1)
		}
		return g.attend(k, out, 1, nq, h, d, nk, func(o, pm, pl cu.DevicePtr) []any {
			return []any{qt.ptr(), kArg, vArg, g.onePage.ptr, nk, nq, nk, h, scale, o, pm, pl}
		})
	}
	k := fa2Kernel("attn_fa2_dense_bf")
	return g.attend(k, out, b, nq, h, d, nk, func(o, pm, pl cu.DevicePtr) []any {
		return []any{qt.ptr(), kb, vb, nq, nk, h, scale, o, pm, pl}
	})
}

// PagedAttention attends q [Nq, H, D] to `pages` of one layer of the KV
// store in one launch: the kernel reads the page table itself, so pages need
// not be contiguous and the page size need not be a power of two.
func (g *gpu) PagedAttention(q backend.Tensor, s backend.KVStore, layer int, pages []int32, lastPageLen int, scale float32) backend.Tensor {
	st := g.kv(s)
	qt := g.tensor(q)
	h, d, ps := st.spec.Heads, st.spec.HeadDim, st.spec.PageSize
	if qt.numel()%(h*d) != 0 || qt.shape[len(qt.shape)-1] != d && qt.shape[len(qt.shape)-1] != h*d {
		panic(fmt.Sprintf("cuda: PagedAttention q %v for %d heads × %d", qt.shape, h, d))
	}
	if layer < 0 || layer >= st.spec.Layers {
		panic(fmt.Sprintf("cuda: PagedAttention layer %d of %d", layer, st.spec.Layers))
	}
	if len(pages) > 0 && (lastPageLen < 0 || lastPageLen > ps) {
		panic(fmt.Sprintf("cuda: PagedAttention last page holds %d rows, page size is %d", lastPageLen, ps))
	}
	for _, p := range pages {
		if p < 0 || int(p) >= st.spec.Pages {
			panic(fmt.Sprintf("cuda: PagedAttention page %d out of %d", p, st.spec.Pages))
		}
	}
	nq := qt.numel() / (h * d)
	nk := 0
	if len(pages) > 0 {
		nk = (len(pages)-1)*ps + lastPageLen
	}
	// Its arguments (the number of keys) change every frame: submitted
	// directly, outside the graph segments.
	return g.output(qt.shape, "PagedAttention", func(out *Tensor) error {
		return g.batch.direct(func() error {
			if nq == 0 {
				return nil
			}
			if nk == 0 {
				// Nothing cached yet: the reference returns zeros.
				return g.batch.zero(out.ptr(), int64(qt.numel()))
			}
			table, err := st.table(pages)
			if err != nil {
				return err
			}
			k, kArg, vArg, err := g.pagedKernel(st, layer)
			if err != nil {
				return err
			}
			return g.attend(k, out, 1, nq, h, d, nk, func(o, pm, pl cu.DevicePtr) []any {
				if st.fp8 {
					return []any{qt.ptr(), kArg, vArg, table, ps, nq, nk, h, scale, o, pm, pl, st.layerScales(layer)}
				}
				return []any{qt.ptr(), kArg, vArg, table, ps, nq, nk, h, scale, o, pm, pl}
			})
		})
	})
}

// pagedKernel chooses the paged attention kernel for a store and returns it
// with its K and V arguments: the layer's arrays, or their tensor maps for
// the TMA kernel (owner thread).
func (g *gpu) pagedKernel(st *kvStore, layer int) (k attnKernel, kArg, vArg any, err error) {
	kArg, vArg = st.k[layer], st.v[layer]
	d := st.spec.HeadDim
	if st.fp8 {
		// NewKVStore made sure of head dim 64.
		if !g.kernels.hopper() || g.pagedVariant == pagedFA2 {
			return fa2F8Kernel, kArg, vArg, nil
		}
		maps, err := st.tensorMaps()
		if err != nil {
			return k, nil, nil, err
		}
		k = g.hopperKernel(f8Kernel)
		if lk, ok := g.labF8Kernel(); ok {
			k = lk
		}
		k.splits = g.pagedSplits
		return k, maps.at(2 * layer), maps.at(2*layer + 1), nil
	}
	fast := st.bf && d == 64 && !g.cfg.ExactAttention
	if k, kl, vl, ok, err := g.labPagedKernel(st, layer, fast); ok || err != nil {
		return k, kl, vl, err
	}
	hopper := fast && g.kernels.hopper() && g.pagedVariant != pagedFA2
	switch {
	case hopper && st.spec.PageSize >= tma3Kernel.tk:
		maps, err := st.tensorMaps()
		if err != nil {
			return k, nil, nil, err
		}
		k = g.hopperKernel(tma3Kernel)
		k.splits = g.pagedSplits
		return k, maps.at(2 * layer), maps.at(2*layer + 1), nil
	case hopper:
		return g.hopperKernel(wgKernel), kArg, vArg, nil
	case fast:
		return fa2Kernel("attn_fa2_paged_bf"), kArg, vArg, nil
	case st.bf:
		return fmaKernel(fmt.Sprintf("attn_paged_bf_d%d", d)), kArg, vArg, nil
	}
	return fmaKernel(fmt.Sprintf("attn_paged_f32_d%d", d)), kArg, vArg, nil
}

// allowSharedMemory raises a kernel's dynamic shared memory limit once
// (owner thread).
func (g *gpu) allowSharedMemory(module, name string, bytes int) error {
	key := module + "." + name
	if g.smemAllowed[key] >= bytes {
		return nil
	}
	if lim := g.target.sharedLimit(g.info.maxSharedOptin); bytes > lim {
		return fmt.Errorf("kernel %s needs %d bytes of shared memory, %s allows %d a block", name, bytes, g.target.cap, lim)
	}
	fn, err := g.kernels.function(module, name)
	if err != nil {
		return err
	}
	if err := fn.allowSharedMemory(bytes); err != nil {
		return fmt.Errorf("allowing %s %d bytes of shared memory: %w", name, bytes, err)
	}
	g.smemAllowed[key] = bytes
	return nil
}
