//go:build cuda

package cuda

import (
	"fmt"
	"math"
	"os"
	"regexp"
	"testing"

	"github.com/lingbotmap/lingbotmap/engine/backend"
)

// eachAttnVariant runs fn with the backend's Hopper attention kernels
// compiled with each of attnVariants' softmax levers, then restores its
// configured settings. Without the Hopper kernels (another GPU, or
// LINGBOTMAP_CUDA_ARCH below sm_90) the levers do not exist and fn does not
// run. LBM_ATTN_VARIANTS, a regular expression, keeps only the variants
// whose names (AttnSettings.String) it matches, to spare a GPU call's time.
func eachAttnVariant(g *gpu, fn func(AttnSettings)) {
	if !g.kernels.hopper() {
		return
	}
	var keep *regexp.Regexp
	if re := os.Getenv("LBM_ATTN_VARIANTS"); re != "" {
		keep = regexp.MustCompile(re)
	}
	defer func() { g.attn = g.cfg.Attn }()
	for _, a := range attnVariants {
		if keep != nil && !keep.MatchString(a.String()) {
			continue
		}
		g.attn = a
		fn(a)
	}
}

// TestPagedAttentionGrowingScores: the keys of each page have a first
// component that grows page by page (0, 2, 4, … in bf16 and e4m3 exactly)
// and every query's first component is 8, so the rows' maxima climb by
// about 2.9 in base-2 units a page in the order the table gives, while the
// rest of the scores keep their spread: the online softmax rescales many
// times, and the lazy rescale (ATTN_LAZY_RESCALE) both skips and takes the
// rescale. Pages of 256 rows run the TMA kernels (two tiles a page), of 100
// the cp.async one; the default kernels and every lever against the CPU.
func TestPagedAttentionGrowingScores(t *testing.T) {
	const d, h, frames, specials, nq = 64, 2, 9, 40, 300
	ps := []int{256, 100}
	for _, p := range append(pairs(t, 33), fp8Pair(t, 33)) {
		for _, pageSize := range ps {
			spec := backend.KVSpec{Layers: 1, Pages: frames + 2, PageSize: pageSize, Heads: h, HeadDim: d}
			ld := h * d
			gs, err := p.gpu.NewKVStore(spec)
			if err != nil {
				t.Fatal(err)
			}
			cs, err := fx.cpu.NewKVStore(spec)
			if err != nil {
				t.Fatal(err)
			}
			var table []int32
			write := func(page int32, rows int, first float32) {
				k, v := p.randn(rows*ld, 1), p.randn(rows*ld, 1)
				for i := 0; i < len(k); i += d {
					k[i] = first
				}
				ck, gk := p.in(k, rows, ld)
				cv, gv := p.in(v, rows, ld)
				fx.cpu.WriteKV(cs, 0, int(page), 0, ck, cv, 0, rows)
				p.gpu.WriteKV(gs, 0, int(page), 0, gk, gv, 0, rows)
				table = append(table, page)
			}
			for f := 0; f < frames; f++ {
				write(int32((f*3+1)%(frames+1)), pageSize, float32(2*f)) // scrambled pages, growing in table order
			}
			write(frames+1, specials, 2*frames)
			q := p.randn(nq*ld, 1)
			for i := 0; i < len(q); i += d {
				q[i] = 8
			}
			cq, gq := p.in(q, nq, h, d)
			scale := float32(1 / math.Sqrt(d))
			ref, tol := cs, p.tol
			if p.gpu == fx.fp8 {
				// Against the values the FP8 store holds (see
				// TestPagedAttentionFP8): what is left is P's rounding.
				ref, err = fx.cpu.NewKVStore(spec)
				if err != nil {
					t.Fatal(err)
				}
				n := len(table) * pageSize * ld
				sk, sv := make([]float32, n), make([]float32, n)
				if err := gs.(backend.KVSnapshotter).ExportKV(0, table, sk, sv); err != nil {
					t.Fatal(err)
				}
				if err := ref.(backend.KVSnapshotter).ImportKV(0, table, sk, sv); err != nil {
					t.Fatal(err)
				}
				tol = 6e-2
			}
			want := func() backend.Tensor { return fx.cpu.PagedAttention(cq, ref, 0, table, specials, scale) }
			what := fmt.Sprintf("PagedAttention, scores growing page by page, pages of %d", pageSize)
			p.check(what, p.gpu.PagedAttention(gq, gs, 0, table, specials, scale), want(), tol)
			if p.gpu != fx.fp32 { // the fp32 kernels have no levers
				eachAttnVariant(p.gpu.(*gpu), func(a AttnSettings) {
					p.check(fmt.Sprintf("%s attn %v", what, a), p.gpu.PagedAttention(gq, gs, 0, table, specials, scale), want(), tol)
				})
			}
			if err := gs.(interface{ Close() error }).Close(); err != nil {
				t.Fatal(err)
			}
		}
	}
}
