//go:build cuda

package cuda

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/lingbotmap/lingbotmap/engine/backend"
)

func TestLinear(t *testing.T) {
	shapes := [][3]int{{1, 1, 1}, {7, 33, 65}, {2 * 37, 128, 384}, {1005, 1024, 3072}}
	for _, p := range pairs(t, 1) {
		for _, s := range shapes {
			rows, k, m := s[0], s[1], s[2]
			x := p.randn(rows*k, 1)
			w := p.randn(m*k, 1/math.Sqrt(float64(k)))
			b := p.randn(m, 0.5)
			cx, gx := p.in(x, rows, k)
			for _, prec := range []backend.Precision{backend.Trunk, backend.Head, backend.HeadConv} {
				cw, gw := p.weightAsStored(w, prec, m, k)
				cb, gb := p.weight(b, prec, m)
				tol := p.tol
				switch prec {
				case backend.Head:
					tol = tolFP32 // fp32 arithmetic on the head's weights as stored
				case backend.HeadConv:
					tol = headConvTol(p)
				}
				for _, act := range []backend.Activation{backend.ActNone, backend.ActGELU} {
					what := fmt.Sprintf("Linear %dx%dx%d prec %d act %d", rows, k, m, prec, act)
					p.check(what, p.gpu.Linear(gx, gw, gb, act), fx.cpu.Linear(cx, cw, cb, act), tol)
				}
				p.check("Linear without bias", p.gpu.Linear(gx, gw, nil, backend.ActNone), fx.cpu.Linear(cx, cw, nil, backend.ActNone), tol)
				if prec == backend.HeadConv {
					// a convolution's weights run in TF32 in BF16 mode only
					g := p.gpu.(*gpu)
					var tf32 bool
					_ = g.own.do(func() error {
						for key := range g.lt.plans { // cuBLASLt's column-major view: m and n swap
							tf32 = tf32 || key.tf32 && key.m == m && key.n == rows && key.k == k
						}
						return nil
					})
					if want := p.gpu == fx.bf16; tf32 != want {
						t.Errorf("Linear %dx%dx%d with a HeadConv weight: TF32 plan made %v, want %v", rows, k, m, tf32, want)
					}
				}
			}
		}
	}
}

// TestBF16Handoffs: in BF16 mode a block's LayerNorm → Linear(GELU) →
// LinearAdd chain hands bf16 copies on: LayerNorm writes one beside its fp32
// output and the hidden layer exists only as bf16. The chain matches the
// CPU's; an op other than a GEMM that reads the hidden layer gets its values
// back. In FP32 mode nothing is kept in bf16.
func TestBF16Handoffs(t *testing.T) {
	for _, p := range pairs(t, 11) {
		for _, s := range [][3]int{{37, 128, 512}, {1005, 1024, 4096}} {
			rows, e, hid := s[0], s[1], s[2]
			what := fmt.Sprintf("%s %dx%d→%d", p.name(), rows, e, hid)
			cx, gx := p.in(p.randn(rows*e, 1), rows, e)
			cnw, gnw := p.weight(p.randn(e, 1), backend.Trunk, e)
			cnb, gnb := p.weight(p.randn(e, 0.2), backend.Trunk, e)
			cw1, gw1 := p.weight(p.randn(hid*e, 1/math.Sqrt(float64(e))), backend.Trunk, hid, e)
			cb1, gb1 := p.weight(p.randn(hid, 0.5), backend.Trunk, hid)
			cw2, gw2 := p.weight(p.randn(e*hid, 1/math.Sqrt(float64(hid))), backend.Trunk, e, hid)
			cb2, gb2 := p.weight(p.randn(e, 0.5), backend.Trunk, e)

			gn := p.gpu.LayerNorm(gx, gnw, gnb, 1e-6)
			gh := p.gpu.Linear(gn, gw1, gb1, backend.ActGELU)
			bf := p.name() == "bf16"
			checkBF16Copy(p, what+": LayerNorm output", gn, bf)
			if got := gh.(*Tensor).buf.bfOnly; got != bf {
				t.Errorf("%s: hidden layer kept as bf16 only: %v", what, got)
			}
			gy := p.gpu.LinearAdd(gh, gw2, gb2, gx)
			if gh.(*Tensor).buf.bfOnly != bf {
				t.Errorf("%s: the GEMM reading the hidden layer restored its fp32 copy", what)
			}
			cn := fx.cpu.LayerNorm(cx, cnw, cnb, 1e-6)
			ch := fx.cpu.Linear(cn, cw1, cb1, backend.ActGELU)
			cy := fx.cpu.LinearAdd(ch, cw2, cb2, cx)
			p.check(what+": block MLP", gy, cy, p.tol)
			// Read by a non-GEMM op, the hidden layer comes back in fp32.
			p.check(what+": hidden layer read by Add", p.gpu.Add(gh, gb1), fx.cpu.Add(ch, cb1), p.tol)
			p.check(what+": LayerNorm output", gn, cn, p.tol) // trunk affine rounded to bf16 in BF16 mode
			p.gpu.Free(gh)
			for _, w := range []backend.Tensor{gx, gnw, gnb, gw1, gb1, gw2, gb2} {
				p.gpu.Free(w)
			}
		}
	}
}

// TestBF16AttentionHandoffs: in BF16 mode SplitQKV's bf16 copies of k and v
// feed the dense attention, and the attention kernels (dense and paged, with
// the key range unsplit) write a bf16 copy of their output for the proj GEMM.
// Each chain matches the CPU's; in FP32 mode there are no copies.
func TestBF16AttentionHandoffs(t *testing.T) {
	for _, p := range pairs(t, 12) {
		for _, s := range [][2]int{{37, 2}, {1005, 16}} {
			n, h := s[0], s[1]
			e := h * 64
			bf := p.name() == "bf16"
			what := fmt.Sprintf("%d tokens × %d heads", n, h)
			cx, gx := p.in(p.randn(n*3*e, 1), n, 3*e)
			cw, gw := p.weight(p.randn(e*e, 1/math.Sqrt(float64(e))), backend.Trunk, e, e)
			cb, gb := p.weight(p.randn(e, 0.5), backend.Trunk, e)
			cr, gr := p.in(p.randn(n*e, 1), n, e)
			prm := backend.QKVParams{Heads: h, HeadDim: 64}
			scale := float32(0.125)

			// Dense: a frame block.
			gq, gk, gv := p.gpu.SplitQKV(gx, prm)
			cq, ck, cv := fx.cpu.SplitQKV(cx, prm)
			four := []int{1, n, h, 64}
			ga := p.gpu.Attention(p.gpu.Reshape(gq, four...), p.gpu.Reshape(gk, four...), p.gpu.Reshape(gv, four...), scale)
			ca := fx.cpu.Attention(fx.cpu.Reshape(cq, four...), fx.cpu.Reshape(ck, four...), fx.cpu.Reshape(cv, four...), scale)
			checkBF16Copy(p, what+": dense attention output", ga, bf)
			p.check(what+": dense attention → proj", p.gpu.LinearAdd(p.gpu.Reshape(ga, n, e), gw, gb, gr), fx.cpu.LinearAdd(fx.cpu.Reshape(ca, n, e), cw, cb, cr), p.tol)

			// Paged: a global block over this frame and one more page.
			spec := backend.KVSpec{Layers: 1, Pages: 3, PageSize: n, Heads: h, HeadDim: 64}
			cs, gs := p.kvStores(spec)
			for _, page := range []int{2, 0} {
				p.gpu.WriteKV(gs, 0, page, 0, gk, gv, 0, n)
				fx.cpu.WriteKV(cs, 0, page, 0, ck, cv, 0, n)
			}
			table := []int32{2, 0}
			gp := p.gpu.PagedAttention(gq, gs, 0, table, n, scale)
			cp := fx.cpu.PagedAttention(cq, cs, 0, table, n, scale)
			checkBF16Copy(p, what+": paged attention output", gp, bf)
			p.check(what+": paged attention → proj", p.gpu.LinearAdd(p.gpu.Reshape(gp, n, e), gw, gb, gr), fx.cpu.LinearAdd(fx.cpu.Reshape(cp, n, e), cw, cb, cr), p.tol)
			for _, x := range []backend.Tensor{gx, gw, gb, gr, gq, gk, gv, ga, gp} {
				p.gpu.Free(x)
			}
		}
	}
}

// Linear on a [B, N, C] input keeps the leading dims.
func TestLinearBatchedShape(t *testing.T) {
	p := pairs(t, 2)[0]
	cx, gx := p.in(p.randn(3*5*16, 1), 3, 5, 16)
	cw, gw := p.weight(p.randn(8*16, 0.3), backend.Head, 8, 16)
	p.check("Linear [3,5,16]", p.gpu.Linear(gx, gw, nil, backend.ActNone), fx.cpu.Linear(cx, cw, nil, backend.ActNone), tolFP32)
}

func TestLayerNorm(t *testing.T) {
	for _, p := range pairs(t, 3) {
		for _, s := range [][2]int{{5, 64}, {1005, 1024}, {3, 2048}, {4, 7}} {
			rows, c := s[0], s[1]
			x := p.randn(rows*c, 3)
			for i := range x {
				x[i] += 1.5 // a mean far from zero tests the two-pass variance
			}
			cx, gx := p.in(x, rows, c)
			cw, gw := p.weight(p.randn(c, 1), backend.Head, c)
			cb, gb := p.weight(p.randn(c, 1), backend.Head, c)
			p.check(fmt.Sprintf("LayerNorm %dx%d", rows, c), p.gpu.LayerNorm(gx, gw, gb, 1e-5), fx.cpu.LayerNorm(cx, cw, cb, 1e-5), tolFP32)
			p.check(fmt.Sprintf("LayerNorm %dx%d no affine", rows, c), p.gpu.LayerNorm(gx, nil, nil, 1e-6), fx.cpu.LayerNorm(cx, nil, nil, 1e-6), tolFP32)
		}
	}
}

func TestUnary(t *testing.T) {
	p := pairs(t, 4)[0]
	x := p.randn(10007, 2)
	x[0], x[1] = 0, -0
	cx, gx := p.in(x, 10007)
	for op := backend.OpGELU; op <= backend.OpInvLog; op++ {
		p.check(fmt.Sprintf("Unary %d", op), p.gpu.Unary(op, gx), fx.cpu.Unary(op, cx), tolFP32)
	}
}

func TestElementwise(t *testing.T) {
	p := pairs(t, 5)[1] // BF16 mode must still be exact fp32 for activations
	a := p.randn(4*9*33, 1)
	ca, ga := p.in(a, 4, 9, 33)
	for _, bs := range [][]int{{4, 9, 33}, {9, 33}, {33}} {
		cb, gb := p.in(p.randn(backend.Numel(bs), 1), bs...)
		p.check(fmt.Sprintf("Add %v", bs), p.gpu.Add(ga, gb), fx.cpu.Add(ca, cb), tolFP32)
		p.check(fmt.Sprintf("Mul %v", bs), p.gpu.Mul(ga, gb), fx.cpu.Mul(ca, cb), tolFP32)
	}
	p.check("ScaleShift", p.gpu.ScaleShift(ga, 0.37, -2.5), fx.cpu.ScaleShift(ca, 0.37, -2.5), tolFP32)
}

// TestDependentLaunchChain runs a long chain of kernels, each reading the
// one before's output, with no synchronisation between them. On Hopper they
// are launched with programmatic dependent launch, so a kernel that read
// memory before its griddepcontrol.wait would read stale values here.
func TestDependentLaunchChain(t *testing.T) {
	p := pairs(t, 21)[0]
	g := p.gpu.(*gpu)
	if g.info.major >= 9 && !g.cfg.SerialLaunch && !g.launcher.pdl {
		t.Fatalf("sm %d.%d: programmatic dependent launch is off", g.info.major, g.info.minor)
	}
	const rows, c = 2048, 1024 // several waves of blocks per kernel
	cx, gx := p.in(p.randn(rows*c, 2), rows, c)
	for range 48 {
		cn := fx.cpu.Add(fx.cpu.ScaleShift(cx, 0.5, 1), fx.cpu.LayerNorm(cx, nil, nil, 1e-5))
		gs := p.gpu.ScaleShift(gx, 0.5, 1)
		gl := p.gpu.LayerNorm(gx, nil, nil, 1e-5)
		gn := p.gpu.Add(gs, gl)
		p.gpu.Free(gs)
		p.gpu.Free(gl)
		p.gpu.Free(gx)
		gx, cx = gn, cn
	}
	p.check("48 dependent steps", gx, cx, tolFP32)
}

func TestMovement(t *testing.T) {
	p := pairs(t, 6)[0]
	x := p.randn(7*5*33, 1)
	cx, gx := p.in(x, 7, 5, 33)
	p.check("SliceRows", p.gpu.SliceRows(gx, 2, 4), fx.cpu.SliceRows(cx, 2, 4), 0)
	p.check("SliceCols", p.gpu.SliceCols(gx, 3, 17), fx.cpu.SliceCols(cx, 3, 17), 0)
	p.check("Transpose", p.gpu.Transpose(gx), fx.cpu.Transpose(cx), 0)
	cy, gy := p.in(p.randn(3*5*33, 1), 3, 5, 33)
	p.check("ConcatRows", p.gpu.ConcatRows(gx, gy, gx), fx.cpu.ConcatRows(cx, cy, cx), 0)
	cz, gz := p.in(p.randn(7*5*6, 1), 7, 5, 6)
	p.check("ConcatCols", p.gpu.ConcatCols(gx, gz), fx.cpu.ConcatCols(cx, cz), 0)
	cr, gr := fx.cpu.Reshape(cx, 35, 33), p.gpu.Reshape(gx, 35, 33)
	p.check("Transpose big", p.gpu.Transpose(p.gpu.ConcatRows(gr, gr, gr)), fx.cpu.Transpose(fx.cpu.ConcatRows(cr, cr, cr)), 0)
	p.check("Zeros", p.gpu.Zeros(3, 4), fx.cpu.Zeros(3, 4), 0)
}

// With cuda.append_in_place, AppendRows gives ConcatRows' values frame
// after frame (a cache of 16 × 128 rows growing by one row, as the camera
// head's), fills its buffer in place while the buffer has room, so that
// growing from 1 to 200 rows takes a handful of buffers rather than one a
// row, and moves to a new buffer when x carries a bf16 copy; without it,
// it is ConcatRows into a new buffer.
func TestAppendRows(t *testing.T) {
	for _, p := range pairs(t, 27) {
		g := p.gpu.(*gpu)
		setInPlace := func(on bool) { _ = g.own.do(func() error { g.cfg.AppendInPlace = on; return nil }) }
		setInPlace(true)
		defer setInPlace(DefaultConfig().AppendInPlace)
		// same compares without freeing (pair.check frees both): the
		// tensors are appended to again.
		same := func(what string, got, want backend.Tensor) {
			t.Helper()
			if err := g.Err(); err != nil {
				t.Fatalf("%s (%s): device error: %v", what, p.name(), err)
			}
			if gs, ws := got.Shape(), want.Shape(); !slices.Equal(gs, ws) {
				t.Fatalf("%s (%s): shape %v, want %v", what, p.name(), gs, ws)
			}
			if !equalBits(p.gpu.ToHost(got), fx.cpu.ToHost(want)) {
				t.Errorf("%s (%s): values differ from ConcatRows'", what, p.name())
			}
		}
		const h, d = 16, 128
		cc, gc := p.in(p.randn(h*d, 1), 1, h, d)
		before := g.MemStats().Mallocs
		moved := 0
		for f := 1; f < 200; f++ {
			cy, gy := p.in(p.randn(h*d, 1), 1, h, d)
			prev := g.tensor(gc).buf
			cc = fx.cpu.ConcatRows(cc, cy)
			gc = g.AppendRows(gc, gy)
			p.gpu.Free(gy)
			if g.tensor(gc).buf != prev {
				moved++
			}
			if f%50 == 0 || f == 199 {
				same(fmt.Sprintf("AppendRows, %d rows", f+1), gc, cc)
			}
		}
		if moved > 10 {
			t.Errorf("%s: the cache moved to a new buffer %d times in 199 rows", p.name(), moved)
		}
		if m := g.MemStats().Mallocs - before; m > 16 {
			t.Errorf("%s: %d device allocations for a cache of 200 rows", p.name(), m)
		}
		// a buffer with a bf16 copy is not written in place
		cx, gx := p.in(p.randn(4*h*d, 1), 4, h, d)
		var bfBuf *buffer
		_ = g.own.do(func() error {
			b := g.tensor(gx).buf
			bf, err := g.pool.get(b.size / 2)
			if err != nil {
				return err
			}
			b.bf, bfBuf = bf, b
			return nil
		})
		cy, gy := p.in(p.randn(h*d, 1), 1, h, d)
		gz := g.AppendRows(gx, gy)
		if g.tensor(gz).buf == bfBuf {
			t.Errorf("%s: AppendRows wrote into a buffer with a bf16 copy", p.name())
		}
		cz := fx.cpu.ConcatRows(cx, cy)
		same("AppendRows after a bf16 copy", gz, cz)
		// without cuda.append_in_place: a new buffer every time
		setInPlace(false)
		prev := g.tensor(gz).buf
		gw := g.AppendRows(gz, gy)
		if g.tensor(gw).buf == prev {
			t.Errorf("%s: AppendRows wrote in place with append_in_place off", p.name())
		}
		p.check("AppendRows without append_in_place", gw, fx.cpu.ConcatRows(cz, cy), 0)
		for _, x := range []backend.Tensor{gc, gy} {
			p.gpu.Free(x)
		}
		if err := g.Err(); err != nil {
			t.Fatal(err)
		}
	}
}

func TestRoPE(t *testing.T) {
	p := pairs(t, 7)[0]
	const b, n, h, d = 2, 37, 4, 64
	cx, gx := p.in(p.randn(b*n*h*d, 1), b, n, h, d)
	ang := make([]float32, n*d/2)
	for i := range ang {
		ang[i] = float32(p.rng.Float64() * 6.3)
	}
	cs, sn := make([]float32, len(ang)), make([]float32, len(ang))
	for i, a := range ang {
		cs[i], sn[i] = float32(math.Cos(float64(a))), float32(math.Sin(float64(a)))
	}
	cc, gc := p.in(cs, n, d/2)
	csn, gsn := p.in(sn, n, d/2)
	for _, pr := range []backend.RoPEPairing{backend.RoPEHalves2D, backend.RoPEInterleaved} {
		p.check(fmt.Sprintf("RoPE pairing %d", pr), p.gpu.RoPE(gx, gc, gsn, pr), fx.cpu.RoPE(cx, cc, csn, pr), tolFP32)
	}
}

// TestAttention covers the fp32 kernel (FP32 mode, and head dims other than
// 64 in BF16 mode) and the bf16 tensor-core kernel (head dim 64 in BF16 mode).
func TestAttention(t *testing.T) {
	cases := []struct{ b, nq, nk, h, d int }{
		{2, 37, 53, 3, 64}, {1, 300, 1005, 2, 64}, {3, 5, 9000, 2, 64}, {2, 17, 40, 2, 128}, {1, 129, 131, 1, 32}, {1, 1005, 1005, 16, 64},
		// A few queries over many keys (the camera head's cache), with fewer
		// keys than the decode kernel has warps, and one key.
		{1, 1, 2000, 16, 128}, {2, 8, 300, 3, 128}, {1, 2, 5, 2, 32}, {3, 1, 1, 2, 64},
	}
	for _, p := range pairs(t, 8) {
		for _, c := range cases {
			tol := tolFP32
			if p.gpu == fx.bf16 && c.d == 64 {
				tol = p.tol
			}
			cq, gq := p.in(p.randn(c.b*c.nq*c.h*c.d, 1), c.b, c.nq, c.h, c.d)
			ck, gk := p.in(p.randn(c.b*c.nk*c.h*c.d, 1), c.b, c.nk, c.h, c.d)
			cv, gv := p.in(p.randn(c.b*c.nk*c.h*c.d, 1), c.b, c.nk, c.h, c.d)
			scale := float32(1 / math.Sqrt(float64(c.d)))
			want := fx.cpu.Attention(cq, ck, cv, scale)
			p.check(fmt.Sprintf("Attention %+v", c), p.gpu.Attention(gq, gk, gv, scale), want, tol)
			if g := p.gpu.(*gpu); g.cfg.Precision == BF16 && c.d == 64 {
				// The portable kernel (on Hopper one batch runs the
				// warpgroup kernel by default, fa2 otherwise), and the lab's
				// in cudadev builds.
				for _, variant := range append([]string{pagedFA2}, labPagedKernels()...) {
					g.pagedVariant = variant
					p.check(fmt.Sprintf("Attention %+v kernel %s", c, variant), p.gpu.Attention(gq, gk, gv, scale), want, tol)
				}
				g.pagedVariant = pagedFA
				// Each lever, on the cp.async kernel and on the TMA kernel
				// for one image (Config.DenseTMA), which also runs alone.
				for _, tma := range []bool{false, true} {
					g.denseTMA = tma
					if tma {
						p.check(fmt.Sprintf("Attention %+v dense_tma", c), p.gpu.Attention(gq, gk, gv, scale), want, tol)
					}
					eachAttnVariant(g, func(a AttnSettings) {
						p.check(fmt.Sprintf("Attention %+v dense_tma %v attn %v", c, tma, a), p.gpu.Attention(gq, gk, gv, scale), want, tol)
					})
				}
				g.denseTMA = g.cfg.DenseTMA
			}
		}
	}
}

// TestPagedAttention writes frames into pages in a scrambled order with a
// page size that is not a power of two, packs "special" rows into a partial
// last page, and compares against the CPU store fed the same writes.
func TestPagedAttention(t *testing.T) {
	cases := []struct{ ps, frames, specials, nq, h, d int }{
		{999, 5, 6, 1005, 2, 64}, {7, 11, 3, 10, 2, 64}, {13, 3, 13, 20, 1, 128},
		// Page sizes just above and at the 64-key tile (a tile straddles two
		// pages), many splits, query counts off the 128-query tile.
		{65, 40, 30, 200, 2, 64}, {64, 9, 64, 129, 3, 64}, {100, 30, 1, 77, 1, 64},
		// Pages of at least a 128-key tile (the TMA kernel): two tiles a
		// page, the second of 2 rows; a last tile ending inside the page;
		// whole tiles and a full last page.
		{130, 7, 100, 200, 2, 64}, {257, 3, 200, 150, 2, 64}, {128, 4, 128, 130, 1, 64},
	}
	for _, p := range pairs(t, 9) {
		for _, c := range cases {
			spec := backend.KVSpec{Layers: 2, Pages: c.frames + 4, PageSize: c.ps, Heads: c.h, HeadDim: c.d}
			cs, gs := p.kvStores(spec)
			ld := c.h * c.d
			var table []int32
			specialPage := int32(c.frames + 2)
			for f := 0; f < c.frames; f++ {
				page := int32((f*3 + 1) % (c.frames + 2)) // scrambled, never the special page
				rows := c.ps + 2                          // two "special" rows first, like a frame's tokens
				ck, gk := p.in(p.randn(rows*ld, 1), rows, c.h, c.d)
				cv, gv := p.in(p.randn(rows*ld, 1), rows, c.h, c.d)
				fx.cpu.WriteKV(cs, 1, int(page), 0, ck, cv, 2, c.ps)
				p.gpu.WriteKV(gs, 1, int(page), 0, gk, gv, 2, c.ps)
				table = append(table, page)
			}
			// Rows past the specials hold stale values, here NaN: no kernel
			// may let them through (P is 0 there, but 0·NaN is not 0).
			nan := make([]float32, c.ps*ld)
			for i := range nan {
				nan[i] = float32(math.NaN())
			}
			ck, gk := p.in(nan, c.ps, ld)
			fx.cpu.WriteKV(cs, 1, int(specialPage), 0, ck, ck, 0, c.ps)
			p.gpu.WriteKV(gs, 1, int(specialPage), 0, gk, gk, 0, c.ps)
			// The specials: written in two pieces into the last page.
			ck, gk = p.in(p.randn(c.specials*ld, 1), c.specials, ld)
			cv, gv := p.in(p.randn(c.specials*ld, 1), c.specials, ld)
			half := c.specials / 2
			fx.cpu.WriteKV(cs, 1, int(specialPage), 0, ck, cv, 0, half)
			p.gpu.WriteKV(gs, 1, int(specialPage), 0, gk, gv, 0, half)
			fx.cpu.WriteKV(cs, 1, int(specialPage), half, ck, cv, half, c.specials-half)
			p.gpu.WriteKV(gs, 1, int(specialPage), half, gk, gv, half, c.specials-half)
			table = append(table, specialPage)

			cq, gq := p.in(p.randn(c.nq*ld, 1), c.nq, c.h, c.d)
			scale := float32(1 / math.Sqrt(float64(c.d)))
			what := fmt.Sprintf("PagedAttention %+v", c)
			p.check(what, p.gpu.PagedAttention(gq, gs, 1, table, c.specials, scale), fx.cpu.PagedAttention(cq, cs, 1, table, c.specials, scale), p.tol)
			if g := p.gpu.(*gpu); g.cfg.Precision == BF16 && c.d == 64 {
				for _, variant := range append([]string{pagedFA2}, labPagedKernels()...) {
					g.pagedVariant = variant
					p.check(what+" kernel "+variant, p.gpu.PagedAttention(gq, gs, 1, table, c.specials, scale), fx.cpu.PagedAttention(cq, cs, 1, table, c.specials, scale), p.tol)
				}
				g.pagedVariant = pagedFA
				eachAttnVariant(g, func(a AttnSettings) {
					p.check(fmt.Sprintf("%s attn %v", what, a), p.gpu.PagedAttention(gq, gs, 1, table, c.specials, scale), fx.cpu.PagedAttention(cq, cs, 1, table, c.specials, scale), p.tol)
				})
			}
			// A shorter table (same device buffer, re-uploaded) and full last page.
			p.check(what+" prefix", p.gpu.PagedAttention(gq, gs, 1, table[:2], c.ps, scale), fx.cpu.PagedAttention(cq, cs, 1, table[:2], c.ps, scale), p.tol)
			// Nothing cached: zeros, as the reference.
			z := p.gpu.ToHost(p.gpu.PagedAttention(gq, gs, 0, nil, 0, scale))
			for i, v := range z {
				if v != 0 {
					t.Fatalf("%s: empty table gave %g at %d, want 0", what, v, i)
				}
			}
		}
	}
}

func TestConv2D(t *testing.T) {
	for _, p := range pairs(t, 10) {
		cases := []struct{ n, c, h, w, o, k, stride, pad int }{
			{2, 3, 28, 42, 16, 14, 14, 0}, // patch embedding
			{1, 16, 15, 20, 8, 3, 1, 1},
			{2, 8, 9, 11, 5, 1, 1, 0},
			{1, 4, 10, 9, 6, 3, 2, 1},
		}
		for _, c := range cases {
			cx, gx := p.in(p.randn(c.n*c.c*c.h*c.w, 1), c.n, c.c, c.h, c.w)
			for _, prec := range []backend.Precision{backend.Trunk, backend.Head} {
				cw, gw := p.weight(p.randn(c.o*c.c*c.k*c.k, 0.2), prec, c.o, c.c, c.k, c.k)
				cb, gb := p.weight(p.randn(c.o, 1), prec, c.o)
				tol := p.tol
				if prec == backend.Head {
					tol = headConvTol(p)
				}
				what := fmt.Sprintf("Conv2D %+v prec %d", c, prec)
				p.check(what, p.gpu.Conv2D(gx, gw, gb, c.stride, c.pad), fx.cpu.Conv2D(cx, cw, cb, c.stride, c.pad), tol)
				p.check(what+" no bias", p.gpu.Conv2D(gx, gw, nil, c.stride, c.pad), fx.cpu.Conv2D(cx, cw, nil, c.stride, c.pad), tol)
			}
		}
	}
}

func TestConvTranspose2D(t *testing.T) {
	for _, p := range pairs(t, 11) {
		for _, c := range []struct{ n, c, h, w, o, k int }{{2, 8, 5, 7, 6, 2}, {1, 16, 3, 4, 4, 4}} {
			cx, gx := p.in(p.randn(c.n*c.c*c.h*c.w, 1), c.n, c.c, c.h, c.w)
			cw, gw := p.weight(p.randn(c.c*c.o*c.k*c.k, 0.3), backend.Head, c.c, c.o, c.k, c.k)
			cb, gb := p.weight(p.randn(c.o, 1), backend.Head, c.o)
			p.check(fmt.Sprintf("ConvTranspose2D %+v", c), p.gpu.ConvTranspose2D(gx, gw, gb, c.k), fx.cpu.ConvTranspose2D(cx, cw, cb, c.k), headConvTol(p))
		}
	}
}

// headConvTol: head convolutions are exact fp32 in FP32 mode and run on the
// TF32 tensor cores in BF16 mode (as the reference's cuDNN convolutions).
func headConvTol(p pair) float64 {
	if p.gpu == fx.bf16 {
		return tolTF32
	}
	return tolFP32
}

func TestResizeBilinear(t *testing.T) {
	p := pairs(t, 12)[0]
	cx, gx := p.in(p.randn(2*3*9*13, 1), 2, 3, 9, 13)
	for _, s := range [][2]int{{18, 26}, {37, 53}, {4, 5}, {1, 1}} {
		for _, align := range []bool{false, true} {
			p.check(fmt.Sprintf("Resize to %v align %v", s, align), p.gpu.ResizeBilinear(gx, s[0], s[1], align), fx.cpu.ResizeBilinear(cx, s[0], s[1], align), tolFP32)
		}
	}
}

// After one warm-up pass, repeating the same work with Free must not call
// cuMemAlloc again.
func TestSteadyStateAllocatesNothing(t *testing.T) {
	g := fx.bf16.(*gpu)
	p := pairs(t, 13)[1]
	x := g.FromHost(p.randn(1005*256, 1), 1005, 256)
	w := g.Weight("w", p.randn(512*256, 0.1), backend.Trunk, 512, 256)
	step := func() {
		h := g.Linear(x, w, nil, backend.ActGELU)
		n := g.LayerNorm(h, nil, nil, 1e-5)
		q := g.Reshape(g.SliceCols(n, 0, 256), 1, 1005, 4, 64)
		a := g.Attention(q, q, q, 0.125)
		for _, t := range []backend.Tensor{h, n, q, a} {
			g.Free(t)
		}
	}
	step()
	before := g.MemStats()
	for i := 0; i < 3; i++ {
		step()
	}
	after := g.MemStats()
	if err := g.Err(); err != nil {
		t.Fatal(err)
	}
	if after.Mallocs != before.Mallocs {
		t.Errorf("steady state called cuMemAlloc %d times (stats before %+v, after %+v)", after.Mallocs-before.Mallocs, before, after)
	}
}

func TestKVStoreTooLarge(t *testing.T) {
	spec := backend.KVSpec{Layers: 24, Pages: 100000, PageSize: 999, Heads: 16, HeadDim: 64}
	_, err := fx.bf16.NewKVStore(spec)
	if err == nil {
		t.Fatalf("a %d GB KV store was accepted", spec.Bytes(2)>>30)
	}
	if !strings.Contains(err.Error(), "GiB") || !strings.Contains(err.Error(), "999 rows") {
		t.Errorf("error does not name the sizes: %v", err)
	}
	if fx.bf16.Err() != nil {
		t.Errorf("a refused KV store must not poison the backend: %v", fx.bf16.Err())
	}
}

func TestCompileErrorShowsLog(t *testing.T) {
	_, err := compile("broken", "extern \"C\" __global__ void k(float* x) { x[0] = undefined_name; }", []string{"--gpu-architecture=compute_90"})
	if err == nil {
		t.Fatal("a kernel with an undefined name compiled")
	}
	if !strings.Contains(err.Error(), "undefined_name") {
		t.Errorf("error lacks the NVRTC log: %v", err)
	}
}

// In BF16 mode a trunk matrix is kept only as its bf16 copy; an op other than
// a GEMM that reads it gets the fp32 values back exactly (rounded to bf16,
// as the reference stores them).
func TestTrunkMatrixKeptInBF16Only(t *testing.T) {
	g := fx.bf16.(*gpu)
	p := pairs(t, 14)[1]
	const rows, cols = 384, 256
	data := p.randn(rows*cols, 0.1)
	before := g.MemStats()
	w := g.Weight("w", data, backend.Trunk, rows, cols)
	after := g.MemStats()
	if d := after.WeightsBF16 - before.WeightsBF16; d != sizeClass(rows*cols*2) {
		t.Errorf("bf16 weight bytes grew by %d, want %d", d, sizeClass(rows*cols*2))
	}
	if d := after.Weights - before.Weights; d != 0 {
		t.Errorf("fp32 weight bytes grew by %d for a bf16-only trunk matrix", d)
	}
	cw := fx.cpu.Weight("w", data, backend.Trunk, rows, cols)
	cx, gx := p.in(p.randn(7*cols, 1), 7, cols)
	p.check("Linear on a bf16-only weight", g.Linear(gx, w, nil, backend.ActNone), fx.cpu.Linear(cx, cw, nil, backend.ActNone), p.tol)
	got := g.ToHost(w) // restores the fp32 copy
	for i, v := range data {
		want := math.Float32frombits((math.Float32bits(v) + 0x7fff + (math.Float32bits(v)>>16)&1) &^ 0xffff)
		if got[i] != want {
			t.Fatalf("restored element %d = %g, want %g (bf16 of %g)", i, got[i], want, v)
		}
	}
	if d := g.MemStats().Weights - after.Weights; d != sizeClass(rows*cols*4) {
		t.Errorf("restoring the fp32 copy added %d bytes, want %d", d, sizeClass(rows*cols*4))
	}
	g.Free(w)
	if err := g.Err(); err != nil {
		t.Fatal(err)
	}
}

// Freed buffers past Config.CacheLimit go back to the driver, those of the
// size asked for least recently first.
func TestCacheLimitReleases(t *testing.T) {
	g := fx.fp32.(*gpu)
	const n = 768 << 10 / 4 // 768 KiB tensors, under a 1 MiB cache
	_ = g.own.do(func() error { g.pool.trim(); g.pool.limit = 1 << 20; return nil })
	defer g.own.do(func() error { g.pool.limit = max(DefaultConfig().CacheLimit, 0); return nil })
	a, b := g.Zeros(n), g.Zeros(n)
	before := g.MemStats()
	g.Free(a)
	g.Free(b)
	after := g.MemStats()
	if err := g.Err(); err != nil {
		t.Fatal(err)
	}
	if after.Released-before.Released != 1 || after.Cached > 1<<20 || after.Reserved != before.Reserved-activationClass(n*4) {
		t.Errorf("freeing two 768 KiB tensors under a 1 MiB cache limit: before %+v, after %+v", before, after)
	}
	// A buffer of another size, freed now, evicts the older class's buffer
	// and is itself kept.
	c := g.Zeros(n + 1024)
	g.Free(c)
	last := g.MemStats()
	if last.Released-after.Released != 1 || last.Cached != activationClass((n+1024)*4) {
		t.Errorf("a newer size class should evict the older one: before %+v, after %+v", after, last)
	}
	d := g.Zeros(n + 1024) // served from the cache
	if m := g.MemStats().Mallocs; m != last.Mallocs {
		t.Errorf("the kept buffer was not reused: %d mallocs, want %d", m, last.Mallocs)
	}
	g.Free(d)
	g.Trim()
	if s := g.MemStats(); s.Cached != 0 || s.Reserved != last.Reserved-activationClass((n+1024)*4) {
		t.Errorf("Trim left %d bytes cached (stats before %+v, after %+v)", s.Cached, last, s)
	}
}
