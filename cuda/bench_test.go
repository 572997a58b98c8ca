//go:build cuda

package cuda

import (
	"cmp"
	"fmt"
	"strings"
	"testing"

	"github.com/lingbotmap/lingbotmap/engine/backend"
)

// waitGPU waits for the GPU (the benchmark timer must include the device work).
func waitGPU(b *testing.B, g Backend) {
	b.Helper()
	if err := g.(*gpu).Sync(); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkLinear times the model's GEMM shapes (bf16, fp32 accumulation,
// bias epilogue) and reports TFLOP/s.
func BenchmarkLinear(b *testing.B) {
	shapes := [][3]int{ // M (rows), N (outputs), K
		{1005, 3072, 1024}, {1005, 1024, 1024}, {1005, 4096, 1024}, {1005, 1024, 4096}, {8040, 4096, 1024}, {8192, 8192, 8192},
	}
	g := fx.bf16
	p := pairs(b, 20)[1]
	gg := g.(*gpu)
	defer gg.own.do(func() error { gg.lt.autotune = !gg.cfg.FixedGEMMAlgo; gg.lt.forget(); return nil })
	for _, s := range shapes {
		for _, tuned := range []bool{false, true} {
			m, n, k := s[0], s[1], s[2]
			name := fmt.Sprintf("M%d_N%d_K%d", m, n, k)
			if tuned {
				name += "_tuned"
			}
			b.Run(name, func(b *testing.B) {
				// Plan afresh: with tuning the first call below times the candidates.
				if err := gg.own.do(func() error { gg.lt.autotune = tuned; gg.lt.forget(); return nil }); err != nil {
					b.Fatal(err)
				}
				x := g.FromHost(p.randn(m*k, 1), m, k)
				w := g.Weight("w", p.randn(n*k, 0.03), backend.Trunk, n, k)
				bias := g.Weight("b", p.randn(n, 0.1), backend.Trunk, n)
				g.Free(g.Linear(x, w, bias, backend.ActNone))
				waitGPU(b, g)
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					g.Free(g.Linear(x, w, bias, backend.ActNone))
				}
				waitGPU(b, g)
				b.ReportMetric(2*float64(m)*float64(n)*float64(k)*float64(b.N)/b.Elapsed().Seconds()/1e12, "TFLOP/s")
				g.Free(x)
				g.Free(w)
				g.Free(bias)
			})
		}
	}
}

// BenchmarkPagedAttention: one frame's 1005 queries over the full visible set
// of the released model (72 pages of 999 patch rows + 432 special rows =
// 72 360 keys), 16 heads × 64, bf16 KV.
func BenchmarkPagedAttention(b *testing.B) {
	const ps, frames, specials, h, d, nq = 999, 72, 432, 16, 64, 1005
	g := fx.bf16
	p := pairs(b, 21)[1]
	st, err := g.NewKVStore(backend.KVSpec{Layers: 1, Pages: frames + 1, PageSize: ps, Heads: h, HeadDim: d})
	if err != nil {
		b.Fatal(err)
	}
	k := g.FromHost(p.randn(ps*h*d, 1), ps, h, d)
	v := g.FromHost(p.randn(ps*h*d, 1), ps, h, d)
	table := make([]int32, 0, frames+1)
	for f := 0; f <= frames; f++ {
		pg := int32((f * 7) % (frames + 1))
		g.WriteKV(st, 0, int(pg), 0, k, v, 0, ps)
		table = append(table, pg)
	}
	q := g.FromHost(p.randn(nq*h*d, 1), nq, h, d)
	keys := float64(frames*ps + specials)
	// run times one variant of the kernel on a backend and store.
	run := func(name string, g Backend, st backend.KVStore, q backend.Tensor, variant string) {
		b.Run(name, func(b *testing.B) {
			g.(*gpu).pagedVariant = variant
			defer func() { g.(*gpu).pagedVariant = pagedFA }()
			g.Free(g.PagedAttention(q, st, 0, table, specials, 0.125))
			waitGPU(b, g)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				g.Free(g.PagedAttention(q, st, 0, table, specials, 0.125))
			}
			waitGPU(b, g)
			b.ReportMetric(4*nq*keys*h*d*float64(b.N)/b.Elapsed().Seconds()/1e12, "TFLOP/s")
		})
	}
	for _, variant := range append([]string{pagedFA, pagedFA2}, labPagedKernels()...) {
		run(cmp.Or(variant, "auto"), g, st, q, variant)
	}
	// The production kernel with each softmax lever (Config.Attn), named
	// auto_attn_<levers>, fp8_auto_attn_<levers> below.
	eachAttnVariant(g.(*gpu), func(a AttnSettings) { run("auto_attn_"+a.String(), g, st, q, pagedFA) })
	// The same in an FP8 store (e4m3 K and V; the FP8 tensor cores on
	// Hopper, and in the portable kernel from sm_89).
	f8 := fx.fp8
	if f8 == nil {
		return
	}
	s8, err := f8.NewKVStore(backend.KVSpec{Layers: 1, Pages: frames + 1, PageSize: ps, Heads: h, HeadDim: d})
	if err != nil {
		b.Fatal(err)
	}
	k8, v8, q8 := f8.FromHost(f8.ToHost(k), ps, h, d), f8.FromHost(f8.ToHost(v), ps, h, d), f8.FromHost(g.ToHost(q), nq, h, d)
	for _, pg := range table {
		f8.WriteKV(s8, 0, int(pg), 0, k8, v8, 0, ps)
	}
	for _, variant := range append([]string{pagedFA, pagedFA2}, labPagedKernels()...) {
		if variant == pagedFA || variant == pagedFA2 || strings.HasPrefix(variant, "poly") {
			run("fp8_"+cmp.Or(variant, "auto"), f8, s8, q8, variant)
		}
	}
	eachAttnVariant(f8.(*gpu), func(a AttnSettings) { run("fp8_auto_attn_"+a.String(), f8, s8, q8, pagedFA) })
}

// BenchmarkFrameAttention: dense attention inside one frame (1005 × 1005,
// 16 × 64): bf16 tensor cores in BF16 mode (the default: the warpgroup
// kernel on Hopper; the mma.sync pipelined kernel; in cudadev builds the
// lab's 16-row one), the exact fp32 kernel in FP32 mode.
func BenchmarkFrameAttention(b *testing.B) {
	const n, h, d = 1005, 16, 64
	runs := []struct {
		name, variant string
		g             Backend
	}{{"BF16", pagedFA, fx.bf16}, {"BF16_fa2", pagedFA2, fx.bf16}, {"FP32", pagedFA, fx.fp32}}
	for _, v := range labPagedKernels() {
		if v != "mma" { // the lab's other variants choose paged kernels only
			continue
		}
		runs = append(runs, struct {
			name, variant string
			g             Backend
		}{"BF16_" + v, v, fx.bf16})
	}
	// frame times one frame's attention on g as it is set now.
	frame := func(b *testing.B, g Backend) {
		p := pairs(b, 22)[1]
		q := g.FromHost(p.randn(n*h*d, 1), 1, n, h, d)
		timeAttention(b, g, q, q, 0.125)
		b.ReportMetric(4*n*n*h*d*float64(b.N)/b.Elapsed().Seconds()/1e12, "TFLOP/s")
		g.Free(q)
	}
	for _, r := range runs {
		g := r.g
		b.Run(r.name, func(b *testing.B) {
			g.(*gpu).pagedVariant = r.variant
			defer func() { g.(*gpu).pagedVariant = pagedFA }()
			frame(b, g)
		})
	}
	// On Hopper: the TMA kernel (Config.DenseTMA) and P's integer rounding
	// (AttnSettings.PInt), each alone and together.
	g := fx.bf16.(*gpu)
	if !g.kernels.hopper() {
		return
	}
	for _, v := range []struct {
		name string
		tma  bool
		pint int
	}{{"BF16_tma", true, 0}, {"BF16_pint", false, 1}, {"BF16_tma_pint", true, 1}} {
		b.Run(v.name, func(b *testing.B) {
			g.denseTMA = v.tma
			g.attn.PInt = v.pint
			defer func() { g.denseTMA, g.attn = g.cfg.DenseTMA, g.cfg.Attn }()
			frame(b, g)
		})
	}
}

// BenchmarkCameraAttention: the camera head's attention, one query over
// its cache of every earlier frame (16 heads × 128, exact fp32), early in a
// stream and after 2000 keyframes.
func BenchmarkCameraAttention(b *testing.B) {
	const h, d = 16, 128
	g := fx.bf16
	for _, nk := range []int{150, 2000} {
		b.Run(fmt.Sprintf("keys%d", nk), func(b *testing.B) {
			p := pairs(b, 24)[1]
			q := g.FromHost(p.randn(h*d, 1), 1, 1, h, d)
			kv := g.FromHost(p.randn(nk*h*d, 1), 1, nk, h, d)
			timeAttention(b, g, q, kv, 0.088)
			g.Free(q)
			g.Free(kv)
		})
	}
}

// timeAttention times Attention(q, kv, kv) b.N times after one untimed call.
func timeAttention(b *testing.B, g Backend, q, kv backend.Tensor, scale float32) {
	g.Free(g.Attention(q, kv, kv, scale))
	waitGPU(b, g)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		g.Free(g.Attention(q, kv, kv, scale))
	}
	waitGPU(b, g)
}

// BenchmarkOpOverhead is the host cost of one small operation (a 4 KB
// ScaleShift and its Free): the floor under every op of a frame.
func BenchmarkOpOverhead(b *testing.B) {
	g := fx.bf16
	x := g.FromHost(make([]float32, 1024), 1024)
	g.Free(g.ScaleShift(x, 2, 1))
	waitGPU(b, g)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		g.Free(g.ScaleShift(x, 2, 1))
	}
	waitGPU(b, g)
	g.Free(x)
}

// BenchmarkBlockGraph times one trunk block of a 1005-token frame in bf16
// (LayerNorm, qkv, attention, projection and residual, LayerNorm, MLP and
// residual: 12 submissions) as a frame submits it between two flush points,
// with its ops replayed as a CUDA graph and launched one by one: what a graph
// saves on the device between the kernels of a block.
func BenchmarkBlockGraph(b *testing.B) {
	const n, c, h = 1005, 1024, 16
	g := fx.bf16
	gg := g.(*gpu)
	p := pairs(b, 23)[1]
	w := func(name string, scale float64, shape ...int) backend.Tensor {
		x := 1
		for _, s := range shape {
			x *= s
		}
		return g.Weight(name, p.randn(x, scale), backend.Trunk, shape...)
	}
	ones := func(name string) backend.Tensor {
		v := make([]float32, c)
		for i := range v {
			v[i] = 1
		}
		return g.Weight(name, v, backend.Trunk, c)
	}
	x := g.FromHost(p.randn(n*c, 1), 1, n, c)
	ln1w, ln1b, ln2w, ln2b := ones("ln1w"), w("ln1b", 0.1, c), ones("ln2w"), w("ln2b", 0.1, c)
	wqkv, bqkv := w("wqkv", 0.03, 3*c, c), w("bqkv", 0.1, 3*c)
	wo, bo := w("wo", 0.03, c, c), w("bo", 0.1, c)
	w1, b1 := w("w1", 0.03, 4*c, c), w("b1", 0.1, 4*c)
	w2, b2 := w("w2", 0.015, c, 4*c), w("b2", 0.1, c)
	block := func() {
		t := g.LayerNorm(x, ln1w, ln1b, 1e-6)
		qkv := g.Linear(t, wqkv, bqkv, backend.ActNone)
		g.Free(t)
		q, k, v := g.SplitQKV(qkv, backend.QKVParams{Heads: h, HeadDim: c / h})
		g.Free(qkv)
		a := g.Attention(q, k, v, 0.125)
		g.Free(q)
		g.Free(k)
		g.Free(v)
		x1 := g.LinearAdd(g.Reshape(a, 1, n, c), wo, bo, x)
		g.Free(a)
		t = g.LayerNorm(x1, ln2w, ln2b, 1e-6)
		f := g.Linear(t, w1, b1, backend.ActGELU)
		g.Free(t)
		g.Free(g.LinearAdd(f, w2, b2, x1))
		g.Free(f)
		g.Free(x1)
		// A frame's next flush point (here: the end of the block).
		if err := gg.own.do(gg.flush); err != nil {
			b.Fatal(err)
		}
	}
	for _, graphs := range []bool{true, false} {
		name := "graph"
		if !graphs {
			name = "direct"
		}
		b.Run(name, func(b *testing.B) {
			enabled := gg.batch.enabled
			_ = gg.own.do(func() error { gg.batch.enabled = graphs && enabled; return nil })
			defer gg.own.do(func() error { gg.batch.enabled = enabled; return nil })
			if graphs && !enabled {
				b.Skip("CUDA graphs are off in this backend")
			}
			before := gg.GraphStats()
			for range 3 {
				block()
			}
			waitGPU(b, g)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				block()
			}
			waitGPU(b, g)
			s := gg.GraphStats()
			b.ReportMetric(float64(s.Replayed-before.Replayed)/float64(b.N+3), "replayed/block")
		})
	}
	for _, t := range []backend.Tensor{x, ln1w, ln1b, ln2w, ln2b, wqkv, bqkv, wo, bo, w1, b1, w2, b2} {
		g.Free(t)
	}
}
