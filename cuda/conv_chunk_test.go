//go:build cuda

package cuda

import (
	"fmt"
	"testing"

	"github.com/lingbotmap/lingbotmap/engine/backend"
)

// scratchOf runs op and returns the most pool memory it held at once beyond
// its output (which it leaves allocated): the convolution's scratch. The
// pool's peak is lowered to the current use first so that it records this
// call alone.
func scratchOf(t *testing.T, g *gpu, op func() backend.Tensor) (backend.Tensor, int64) {
	t.Helper()
	var before, peak int64
	_ = g.own.do(func() error { before = g.pool.inUse; g.pool.peak = g.pool.inUse; return nil })
	out := op()
	_ = g.own.do(func() error { peak = g.pool.peak; return nil })
	if err := g.Err(); err != nil {
		t.Fatalf("device error: %v", err)
	}
	return out, peak - before - out.(*Tensor).buf.size
}

// roundingSlack allows for the allocator's size classes: scratch is measured
// as allocated, the bound applies to the bytes asked for (classes are at most
// 12.5 % or 512 B larger than the request).
func roundingSlack(bytes int64, buffers int) int64 { return bytes/8 + int64(buffers)*512 }

// Conv2D in many chunks (a tiny scratch bound, partial last chunks) must
// match the CPU and keep its scratch within the bound, or within one
// minimum chunk of convChunkCols columns where that is larger.
func TestConv2DChunked(t *testing.T) {
	cases := []struct{ n, c, h, w, o, k, stride, pad int }{
		{2, 5, 37, 29, 7, 3, 1, 1},   // 1073 pixels
		{2, 6, 33, 27, 4, 3, 2, 0},   // 16×13 = 208
		{2, 8, 31, 23, 5, 3, 2, 1},   // 16×12 = 192
		{2, 4, 41, 35, 6, 1, 2, 0},   // 1×1 stride 2: im2col, 21×18 = 378
		{2, 5, 17, 19, 4, 1, 1, 1},   // 1×1 padded: im2col, 19×21 = 399
		{2, 9, 23, 21, 3, 1, 1, 0},   // 1×1 stride 1: direct in fp32, chunked in bf16 past the bound
		{2, 3, 30, 44, 8, 3, 1, 0},   // 28×42 = 1176
		{2, 16, 19, 25, 12, 3, 1, 1}, // wide ck = 144
	}
	for _, p := range pairs(t, 20) {
		g := p.gpu.(*gpu)
		for _, c := range cases {
			cx, gx := p.in(p.randn(c.n*c.c*c.h*c.w, 1), c.n, c.c, c.h, c.w)
			ho := (c.h+2*c.pad-c.k)/c.stride + 1
			wo := (c.w+2*c.pad-c.k)/c.stride + 1
			ck, hw := int64(c.c*c.k*c.k), int64(ho*wo)
			for _, prec := range []backend.Precision{backend.Trunk, backend.Head} {
				cw, gw := p.weight(p.randn(c.o*c.c*c.k*c.k, 0.2), prec, c.o, c.c, c.k, c.k)
				cb, gb := p.weight(p.randn(c.o, 1), prec, c.o)
				tol, perElem := headConvTol(p), int64(4)
				if prec == backend.Trunk {
					tol = p.tol
					if p.gpu == fx.bf16 {
						perElem = 6 // fp32 columns and their bf16 copy
					}
				}
				// 1: the smallest chunk; then ~2.5 and ~4.5 chunks' worth,
				// which round down to 2 and 4 times convChunkCols (or the
				// whole image where it is smaller).
				for _, limit := range []int64{1, ck * perElem * convChunkCols * 5 / 2, ck * perElem * convChunkCols * 9 / 2} {
					what := fmt.Sprintf("Conv2D %+v prec %d limit %d", c, prec, limit)
					want := fx.cpu.Conv2D(cx, cw, cb, c.stride, c.pad)
					p.check(what, g.conv2D(gx, gw, gb, c.stride, c.pad, limit), want, tol)
					wantNB := fx.cpu.Conv2D(cx, cw, nil, c.stride, c.pad)
					p.check(what+" no bias", g.conv2D(gx, gw, nil, c.stride, c.pad, limit), wantNB, tol)

					// Measured on a repeat, once the bf16 weight copy exists.
					out, got := scratchOf(t, g, func() backend.Tensor { return g.conv2D(gx, gw, gb, c.stride, c.pad, limit) })
					g.Free(out)
					bound := max(limit, ck*min(convChunkCols, hw)*perElem)
					bound += roundingSlack(bound, 2)
					if got > bound {
						t.Errorf("%s (%s): scratch %d bytes, bound %d", what, p.name(), got, bound)
					}
					direct := c.k == 1 && c.stride == 1 && c.pad == 0 && perElem == 4
					if whole := ck * hw * perElem; limit == 1 && !direct && whole <= bound {
						t.Fatalf("%s: test case too small: one image's im2col (%d bytes) fits the bound %d", what, whole, bound)
					}
				}
				p.gpu.Free(gw)
				p.gpu.Free(gb)
			}
			p.gpu.Free(gx)
		}
	}
}

// ConvTranspose2D in bands of input rows must match the CPU and keep its
// product scratch within the bound, or one smallest band (8/gcd(w, 8)
// rows) where that is larger.
func TestConvTranspose2DChunked(t *testing.T) {
	cases := []struct{ n, c, h, w, o, k int }{
		{2, 6, 21, 11, 5, 2}, // bands of 8 rows: 8+8+5, then 16+5
		{2, 4, 23, 7, 3, 4},  // 8+8+7, then 16+7
		{1, 8, 13, 6, 4, 3},  // bands of 4 rows: 4+4+4+1, then 8+5
		{2, 5, 7, 12, 6, 2},  // bands of 2 rows: 2+2+2+1, then 4+3
	}
	for _, p := range pairs(t, 21) {
		g := p.gpu.(*gpu)
		for _, c := range cases {
			cx, gx := p.in(p.randn(c.n*c.c*c.h*c.w, 1), c.n, c.c, c.h, c.w)
			rowBytes := int64(c.w * c.o * c.k * c.k * 4)
			step := int64(8 / gcd(c.w, 8))
			for _, prec := range []backend.Precision{backend.Head, backend.Trunk} {
				cw, gw := p.weight(p.randn(c.c*c.o*c.k*c.k, 0.3), prec, c.c, c.o, c.k, c.k)
				cb, gb := p.weight(p.randn(c.o, 1), prec, c.o)
				tol, xCopy := headConvTol(p), int64(0)
				if prec == backend.Trunk {
					tol = p.tol
					if p.gpu == fx.bf16 {
						xCopy = int64(c.c*c.h*c.w) * 2 // the image's bf16 copy
						xCopy += roundingSlack(xCopy, 1)
					}
				}
				for _, limit := range []int64{1, rowBytes * step * 5 / 2} {
					what := fmt.Sprintf("ConvTranspose2D %+v prec %d limit %d", c, prec, limit)
					want := fx.cpu.ConvTranspose2D(cx, cw, cb, c.k)
					p.check(what, g.convTranspose2D(gx, gw, gb, c.k, limit), want, tol)
					wantNB := fx.cpu.ConvTranspose2D(cx, cw, nil, c.k)
					p.check(what+" no bias", g.convTranspose2D(gx, gw, nil, c.k, limit), wantNB, tol)

					out, got := scratchOf(t, g, func() backend.Tensor { return g.convTranspose2D(gx, gw, gb, c.k, limit) })
					g.Free(out)
					bound := max(limit, rowBytes*min(step, int64(c.h)))
					bound += roundingSlack(bound, 1) + xCopy
					if got > bound {
						t.Errorf("%s (%s): scratch %d bytes, bound %d", what, p.name(), got, bound)
					}
					if whole := rowBytes * int64(c.h); limit == 1 && whole+xCopy <= bound {
						t.Fatalf("%s: test case too small: one image's products (%d bytes) fit the bound %d", what, whole, bound)
					}
				}
				p.gpu.Free(gw)
				p.gpu.Free(gb)
			}
			p.gpu.Free(gx)
		}
	}
}

// The chunk policies themselves: multiples of the granularity, never below
// it, never above the image.
func TestConvChunkPolicy(t *testing.T) {
	for _, c := range []struct {
		ck, hw       int
		perElem, lim int64
		want         int
	}{
		{144, 1073, 4, 1, 128},                     // below one chunk: the minimum
		{144, 100, 4, 1, 100},                      // the image is smaller than the minimum
		{144, 1073, 4, 144 * 4 * 300, 256},         // 300 columns fit: rounded down to 256
		{144, 1073, 4, 144 * 4 * 1073, 1073},       // the whole image fits
		{144, 1073, 6, 144 * 4 * 1073, 640},        // bf16 copy: 715 columns fit
		{2304, 63936, 4, defaultConvScratch, 7168}, // a DPT-sized layer at the default bound
	} {
		if got := convChunk(c.ck, c.hw, c.perElem, c.lim); got != c.want {
			t.Errorf("convChunk(%d, %d, %d, %d) = %d, want %d", c.ck, c.hw, c.perElem, c.lim, got, c.want)
		}
	}
	for _, c := range []struct {
		h, w, okk int
		lim       int64
		want      int
	}{
		{13, 11, 20, 1, 8},          // one band of 8 rows (11 is odd)
		{13, 12, 20, 1, 2},          // 12 pixels a row: 2 rows make 24
		{13, 16, 20, 1, 1},          // whole rows are already multiples of 8
		{5, 11, 20, 1, 5},           // the image is smaller than one band
		{37, 27, 4096, 8 << 20, 16}, // 18 rows fit: a multiple of 8 rows
		{37, 27, 4096, 1 << 40, 37}, // everything fits
	} {
		if got := convTransposeRows(c.h, c.w, c.okk, c.lim); got != c.want {
			t.Errorf("convTransposeRows(%d, %d, %d, %d) = %d, want %d", c.h, c.w, c.okk, c.lim, got, c.want)
		}
	}
}

// TestConv3ImplicitGEMM checks the TF32 implicit-GEMM 3×3 convolutions
// against the CPU and the im2col path: the warpgroup kernel (on Hopper, for
// channel counts that are multiples of 4) and the mma.sync kernel in all
// three block shapes. Channel counts that are not multiples of the
// 32-channel slice, outputs past one block, inputs that are not multiples of
// anything, strides 1 and 2, padding 0 and 1, several images. The small
// cases force the kernels (the automatic choice sends grids that leave the
// GPU idle to im2col); the last one is big enough to take one on its own.
func TestConv3ImplicitGEMM(t *testing.T) {
	g := fx.bf16.(*gpu)
	p := pairs(t, 25)[1] // the BF16 backend: head convolutions run in TF32
	cases := []struct{ n, c, h, w, o, stride, pad int }{
		{1, 5, 13, 17, 3, 1, 1}, {2, 16, 30, 41, 32, 1, 1}, {1, 33, 19, 23, 64, 2, 1},
		{2, 8, 12, 9, 100, 1, 0}, {1, 64, 37, 27, 256, 1, 1}, {1, 3, 140, 150, 20, 1, 1},
		{1, 40, 23, 31, 130, 1, 1}, {2, 70, 17, 20, 256, 2, 1}, {1, 96, 9, 300, 48, 1, 1},
		{3, 12, 21, 25, 200, 2, 1},
		{1, 64, 108, 148, 128, 1, 1},
	}
	for i, c := range cases {
		variants := []string{convImplicit, convWide, convMMA}
		if i == len(cases)-1 {
			variants = []string{""}
			if kind, _ := g.conv3Kernel(c.c, c.o, c.h*c.w, c.n); kind == conv3None {
				t.Fatalf("case %+v: the automatic choice takes no implicit GEMM on %d multiprocessors", c, g.info.sms)
			}
		}
		cx, gx := p.in(p.randn(c.n*c.c*c.h*c.w, 1), c.n, c.c, c.h, c.w)
		cw, gw := p.weight(p.randn(c.o*c.c*9, 0.2), backend.Head, c.o, c.c, 3, 3)
		cb, gb := p.weight(p.randn(c.o, 1), backend.Head, c.o)
		want := fx.cpu.Conv2D(cx, cw, cb, c.stride, c.pad)
		wantNB := fx.cpu.Conv2D(cx, cw, nil, c.stride, c.pad)
		for _, v := range variants {
			g.convVariant = v
			what := fmt.Sprintf("implicit-GEMM Conv2D %+v variant %q", c, v)
			p.check(what, g.Conv2D(gx, gw, gb, c.stride, c.pad), want, tolTF32)
			p.check(what+" no bias", g.Conv2D(gx, gw, nil, c.stride, c.pad), wantNB, tolTF32)
		}
		g.convVariant = convIm2col
		p.check(fmt.Sprintf("Conv2D %+v by im2col", c), g.Conv2D(gx, gw, gb, c.stride, c.pad), want, tolTF32)
		g.convVariant = ""
	}
	// cuda.conv_wide: the automatic choice takes the 256-pixel blocks for a
	// refinenet's convolution at 518×378 on Hopper, with the same values.
	if !g.kernels.hopper() {
		return
	}
	setWide := func(on bool) { _ = g.own.do(func() error { g.cfg.ConvWide = on; return nil }) }
	setWide(true)
	defer setWide(DefaultConfig().ConvWide)
	const c, o, h, w = 256, 256, 108, 148
	if kind, _ := g.conv3Kernel(c, o, h*w, 1); kind != conv3WGWide {
		t.Fatalf("conv_wide: the automatic choice for %d→%d channels at %dx%d is kernel %d, not the wide one", c, o, h, w, kind)
	}
	cx, gx := p.in(p.randn(c*h*w, 1), 1, c, h, w)
	cw, gw := p.weight(p.randn(o*c*9, 0.05), backend.Head, o, c, 3, 3)
	cb, gb := p.weight(p.randn(o, 1), backend.Head, o)
	p.check("Conv2D with conv_wide", g.Conv2D(gx, gw, gb, 1, 1), fx.cpu.Conv2D(cx, cw, cb, 1, 1), tolTF32)
}

// TestWideConv3 pins when the 256-pixel blocks run (cuda.conv_wide) on 132
// multiprocessors for the DPT heads' convolutions that reach the warpgroup
// kernel at 518×378.
func TestWideConv3(t *testing.T) {
	for _, c := range []struct {
		name  string
		o, hw int
		wide  bool
	}{
		{"refinenet1 (126 blocks of 256 pixels, 250 of 128)", 256, 108 * 148, true},
		{"output_conv1 (250 and 500)", 128, 216 * 296, true},
		{"refinenet2 (32 and 64: one wave either way)", 256, 54 * 74, false},
		{"an odd fill (140 and 280 blocks: two waves and three)", 128, 140 * 256, false},
	} {
		if got := wideConv3(c.o, c.hw, 132); got != c.wide {
			t.Errorf("%s: wideConv3(%d, %d, 132) = %v, want %v", c.name, c.o, c.hw, got, c.wide)
		}
	}
}

// TestPickConv3Tile pins the implicit GEMM's shape policy on an H200's 132
// multiprocessors for the DPT head's 3×3 convolutions at 518×378.
func TestPickConv3Tile(t *testing.T) {
	for _, c := range []struct {
		name         string
		o, pixels, n int
		want         conv3Tile
		ok           bool
	}{
		{"output_conv2.0", 32, 378 * 518, 1, conv3Tile{32, 256}, true},
		{"output_conv1", 128, 216 * 296, 1, conv3Tile{128, 128}, true},
		{"refinenet1", 256, 108 * 148, 1, conv3Tile{128, 128}, true},
		{"refinenet2", 256, 54 * 74, 1, conv3Tile{64, 128}, true},
		{"refinenet3", 256, 27 * 37, 1, conv3Tile{64, 128}, false},
		{"refinenet2, 8 frames", 256, 54 * 74, 8, conv3Tile{128, 128}, true},
		{"resize_layers.3", 1024, 14 * 19, 1, conv3Tile{64, 128}, false},
	} {
		got, ok := pickConv3Tile(c.o, c.pixels, c.n, 132)
		if got != c.want || ok != c.ok {
			t.Errorf("%s: pickConv3Tile(%d, %d, %d, 132) = %v, %v; want %v, %v", c.name, c.o, c.pixels, c.n, got, ok, c.want, c.ok)
		}
	}
}

// BenchmarkConv2DBound times DPT convolutions of the full model (one 518×378
// frame, TF32 as in BF16 mode: the largest ones, refinenet2's, whose grid
// just fills an H200, and a coarse one that goes to im2col) as the backend
// chooses, by implicit GEMM, and by im2col + cuBLASLt with the default
// scratch bound and unbounded (one im2col buffer per image, as before
// chunking), and reports the scratch each took.
func BenchmarkConv2DBound(b *testing.B) {
	layers := []struct {
		name          string
		c, h, w, o, k int
	}{
		{"output_conv2.0", 128, 378, 518, 32, 3},
		{"output_conv1", 256, 216, 296, 128, 3},
		{"refinenet1_rcu", 256, 108, 148, 256, 3},
		{"refinenet2_rcu", 256, 54, 74, 256, 3},
		{"layer3_rn", 1024, 27, 37, 256, 3},
	}
	g := fx.bf16.(*gpu)
	p := pairs(b, 23)[1]
	for _, l := range layers {
		x := g.FromHost(p.randn(l.c*l.h*l.w, 1), 1, l.c, l.h, l.w)
		w := g.Weight("w", p.randn(l.o*l.c*l.k*l.k, 0.03), backend.Head, l.o, l.c, l.k, l.k)
		bias := g.Weight("b", p.randn(l.o, 0.1), backend.Head, l.o)
		for _, lim := range []struct {
			name    string
			bytes   int64
			variant string
		}{{"auto", defaultConvScratch, ""}, {"implicit", defaultConvScratch, convImplicit}, {"wide", defaultConvScratch, convWide}, {"mma", defaultConvScratch, convMMA}, {"im2col", defaultConvScratch, convIm2col}, {"im2col_unbounded", 1 << 50, convIm2col}} {
			b.Run(l.name+"/"+lim.name, func(b *testing.B) {
				g.convVariant = lim.variant
				defer func() { g.convVariant = "" }()
				var before, peak int64
				_ = g.own.do(func() error { before = g.pool.inUse; g.pool.peak = g.pool.inUse; return nil })
				out := g.conv2D(x, w, bias, 1, 1, lim.bytes)
				_ = g.own.do(func() error { peak = g.pool.peak; return nil })
				scratch := peak - before - out.(*Tensor).buf.size
				g.Free(out)
				waitGPU(b, g)
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					g.Free(g.conv2D(x, w, bias, 1, 1, lim.bytes))
				}
				waitGPU(b, g)
				flops := 2 * float64(l.o) * float64(l.c*l.k*l.k) * float64(l.h*l.w)
				b.ReportMetric(flops*float64(b.N)/b.Elapsed().Seconds()/1e12, "TFLOP/s")
				b.ReportMetric(float64(scratch)/(1<<20), "scratch-MiB")
			})
		}
		g.Free(x)
		g.Free(w)
		g.Free(bias)
	}
}
