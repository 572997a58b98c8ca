//go:build cuda

package cuda

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/lingbotmap/lingbotmap/engine/backend"
)

// The element-wise levers of the trunk (cuda.fuse_norm, cuda.lean_qkv,
// cuda.fc1_bf16): each is checked against the CPU and, where it is meant
// to change no value, against the same GPU backend with the lever off, to
// the bit.

// setConfig changes b's settings for one test and returns the undo.
func setConfig(b Backend, set func(*Config)) (undo func()) {
	g := b.(*gpu)
	old := g.cfg
	set(&g.cfg)
	return func() { g.cfg = old }
}

// allPrecisions are pairs for fp32, bf16 and fp8.
func allPrecisions(t *testing.T, seed uint64) []pair {
	return append(pairs(t, seed), pair{t: t, gpu: fx.fp8, tol: tolBF16, rng: rand.New(rand.NewPCG(seed, 3))})
}

// sameBits fails unless a and b (tensors of p's GPU backend) hold the same
// float32 values bit for bit.
func sameBits(p pair, what string, a, b backend.Tensor) {
	p.t.Helper()
	if err := p.gpu.Err(); err != nil {
		p.t.Fatalf("%s (%s): device error: %v", what, p.name(), err)
	}
	av, bv := p.gpu.ToHost(a), p.gpu.ToHost(b)
	if len(av) != len(bv) {
		p.t.Fatalf("%s (%s): %d values against %d", what, p.name(), len(av), len(bv))
	}
	for i := range av {
		if math.Float32bits(av[i]) != math.Float32bits(bv[i]) {
			p.t.Errorf("%s (%s): element %d is %g with the lever on, %g off", what, p.name(), i, av[i], bv[i])
			return
		}
	}
}

// TestNormLinear: NormLinear equals the CPU's LayerNorm → Linear; with
// cuda.fuse_norm (the LayerNorm writing only the GEMM's bf16 operand) it
// equals the GPU's own unfused pair to the bit, for trunk weights (fused in
// bf16 and fp8), head weights and widths the one-warp kernel does not take
// (both unfused).
func TestNormLinear(t *testing.T) {
	shapes := []struct{ rows, e, m int }{{37, 1024, 3072}, {1005, 1024, 4096}, {9, 64, 96}, {3, 2048, 512}, {4, 7, 5}}
	for _, p := range allPrecisions(t, 31) {
		for _, s := range shapes {
			x := p.randn(s.rows*s.e, 2)
			for i := range x {
				x[i] += 0.9 // a mean away from zero tests the two-pass variance
			}
			cx, gx := p.in(x, s.rows, s.e)
			for _, prec := range []backend.Precision{backend.Trunk, backend.Head} {
				cnw, gnw := p.weight(p.randn(s.e, 1), prec, s.e)
				cnb, gnb := p.weight(p.randn(s.e, 0.2), prec, s.e)
				cw, gw := p.weightAsStored(p.randn(s.m*s.e, 1/math.Sqrt(float64(s.e))), prec, s.m, s.e)
				cb, gb := p.weight(p.randn(s.m, 0.5), prec, s.m)
				tol := p.tol
				if prec == backend.Head {
					tol = tolFP32 // fp32 arithmetic on the head's weights as stored
				}
				for _, act := range []backend.Activation{backend.ActNone, backend.ActGELU} {
					what := fmt.Sprintf("NormLinear %dx%d→%d prec %d act %d", s.rows, s.e, s.m, prec, act)
					on := p.gpu.(backend.NormLinearer).NormLinear(gx, gnw, gnb, 1e-6, gw, gb, act)
					undo := setConfig(p.gpu, func(c *Config) { c.FuseNorm = false })
					off := backend.NormLinear(p.gpu, gx, gnw, gnb, 1e-6, gw, gb, act)
					undo()
					sameBits(p, what+": fuse_norm on against off", on, off)
					p.gpu.Free(off)
					p.check(what, on, fx.cpu.NormLinear(cx, cnw, cnb, 1e-6, cw, cb, act), tol)
				}
				for _, w := range []backend.Tensor{gnw, gnb, gw, gb} {
					p.gpu.Free(w)
				}
			}
			p.gpu.Free(gx)
		}
	}
}

// TestSplitQKVLean: with cuda.lean_qkv, k and v announced for the
// attention alone (backend.KVAttention) come out in bf16 only where the
// attention reads bf16 (head size 64, bf16 and fp8), and announced for the
// KV cache alone (KVCache) without bf16 copies; the attention, the cache's
// writes and paged attention give the same values to the bit as from
// KVAny's outputs, and the CPU's within the precision's tolerance. Read
// by something else, bf16-only k comes back as its bf16 values.
func TestSplitQKVLean(t *testing.T) {
	for _, p := range allPrecisions(t, 32) {
		for _, s := range [][2]int{{37, 2}, {1005, 16}} {
			n, h := s[0], s[1]
			e := h * 64
			bf := p.name() != "fp32"
			what := fmt.Sprintf("%d tokens × %d heads", n, h)
			cx, gx := p.in(p.randn(n*3*e, 1), 1, n, 3*e)
			cw, gw := p.weight(p.randn(4*64, 1), backend.Trunk, 4, 64)
			prm := func(ws [4]backend.Tensor, use backend.KVUse) backend.QKVParams {
				return backend.QKVParams{Heads: h, HeadDim: 64, Norm: true, QW: ws[0], QB: ws[1], KW: ws[2], KB: ws[3], Eps: 1e-5, KVUse: use}
			}
			gws, cws := [4]backend.Tensor{}, [4]backend.Tensor{}
			for i := range gws {
				gws[i] = p.gpu.Reshape(p.gpu.SliceRows(gw, i, 1), 64)
				cws[i] = fx.cpu.Reshape(fx.cpu.SliceRows(cw, i, 1), 64)
			}
			scale := float32(0.125)

			// Dense: a frame block.
			aq, ak, av := p.gpu.SplitQKV(gx, prm(gws, backend.KVAny))
			lq, lk, lv := p.gpu.SplitQKV(gx, prm(gws, backend.KVAttention))
			for _, kv := range []backend.Tensor{lk, lv} {
				c := kv.(*Tensor)
				if c.buf.bfOnly != bf || (bf && c.buf.ptr != 0) {
					t.Errorf("%s (%s): KVAttention k/v bf16 only: %v (fp32 at %#x), want %v", what, p.name(), c.buf.bfOnly, c.buf.ptr, bf)
				}
			}
			ga := p.gpu.Attention(p.gpu.Reshape(aq, 1, n, h, 64), p.gpu.Reshape(ak, 1, n, h, 64), p.gpu.Reshape(av, 1, n, h, 64), scale)
			gl := p.gpu.Attention(p.gpu.Reshape(lq, 1, n, h, 64), p.gpu.Reshape(lk, 1, n, h, 64), p.gpu.Reshape(lv, 1, n, h, 64), scale)
			if bf && !lk.(*Tensor).buf.bfOnly {
				t.Errorf("%s (%s): the attention restored the fp32 copy of bf16-only k", what, p.name())
			}
			sameBits(p, what+": dense attention, lean_qkv against KVAny", gl, ga)
			cq, ck, cv := fx.cpu.SplitQKV(cx, prm(cws, backend.KVAny))
			ca := fx.cpu.Attention(fx.cpu.Reshape(cq, 1, n, h, 64), fx.cpu.Reshape(ck, 1, n, h, 64), fx.cpu.Reshape(cv, 1, n, h, 64), scale)
			fx.cpu.Free(ck)
			fx.cpu.Free(cv)
			p.check(what+": dense attention", gl, ca, p.tol)
			p.gpu.Free(ga)
			// Read by another op, bf16-only k is its bf16 values.
			if bf {
				kb := p.gpu.ToHost(lk)
				ka := p.gpu.ToHost(ak)
				for i := range ka {
					if r := bf16Round(ka[i]); kb[i] != r {
						t.Errorf("%s (%s): bf16-only k element %d read back as %g, want %g (%g rounded)", what, p.name(), i, kb[i], r, ka[i])
						break
					}
				}
			}
			for _, x := range []backend.Tensor{lq, lk, lv} {
				p.gpu.Free(x)
			}

			// Paged: a global block of a streaming call.
			kq, kk, kv := p.gpu.SplitQKV(gx, prm(gws, backend.KVCache))
			if bf {
				checkBF16Copy(p, what+": KVCache k", kk, false)
				checkBF16Copy(p, what+": KVCache v", kv, false)
			}
			spec := backend.KVSpec{Layers: 1, Pages: 2, PageSize: n, Heads: h, HeadDim: 64}
			as, err := p.gpu.NewKVStore(spec)
			if err != nil {
				t.Fatal(err)
			}
			ks, err := p.gpu.NewKVStore(spec)
			if err != nil {
				t.Fatal(err)
			}
			p.gpu.WriteKV(as, 0, 1, 0, p.gpu.Reshape(ak, n, h, 64), p.gpu.Reshape(av, n, h, 64), 0, n)
			p.gpu.WriteKV(ks, 0, 1, 0, p.gpu.Reshape(kk, n, h, 64), p.gpu.Reshape(kv, n, h, 64), 0, n)
			table := []int32{1}
			// The CPU attends to what the GPU's cache stored (bf16 or e4m3).
			cs, err := fx.cpu.NewKVStore(spec)
			if err != nil {
				t.Fatal(err)
			}
			sk, sv := make([]float32, n*e), make([]float32, n*e)
			if err := ks.(backend.KVSnapshotter).ExportKV(0, table, sk, sv); err != nil {
				t.Fatal(err)
			}
			if err := cs.(backend.KVSnapshotter).ImportKV(0, table, sk, sv); err != nil {
				t.Fatal(err)
			}
			pa := p.gpu.PagedAttention(p.gpu.Reshape(aq, n, h, 64), as, 0, table, n, scale)
			pk := p.gpu.PagedAttention(p.gpu.Reshape(kq, n, h, 64), ks, 0, table, n, scale)
			sameBits(p, what+": paged attention, lean_qkv against KVAny", pk, pa)
			tol := p.tol
			if p.name() == "fp8" {
				tol = 6e-2 // against the stored e4m3 values, as TestPagedAttentionFP8
			}
			p.check(what+": paged attention", pk, fx.cpu.PagedAttention(fx.cpu.Reshape(cq, n, h, 64), cs, 0, table, n, scale), tol)
			p.gpu.Free(pa)
			for _, x := range []backend.Tensor{aq, ak, av, kq, kk, kv, gx, gw} {
				p.gpu.Free(x)
			}
			for _, s := range []backend.KVStore{as, ks} {
				if c, ok := s.(interface{ Close() error }); ok {
					c.Close()
				}
			}
			// lean_qkv off: KVAttention keeps both forms, as before.
			undo := setConfig(p.gpu, func(c *Config) { c.LeanQKV = false })
			ones := p.gpu.FromHost(slices.Repeat([]float32{0.5}, n*3*e), 1, n, 3*e)
			oq, ok, ov := p.gpu.SplitQKV(ones, backend.QKVParams{Heads: h, HeadDim: 64, KVUse: backend.KVAttention})
			undo()
			if ok.(*Tensor).buf.bfOnly || ov.(*Tensor).buf.bfOnly {
				t.Errorf("%s (%s): lean_qkv off, k or v bf16 only", what, p.name())
			}
			checkBF16Copy(p, what+": lean_qkv off, k", ok, bf)
			for _, x := range []backend.Tensor{ones, oq, ok, ov} {
				p.gpu.Free(x)
			}
		}
	}
}

// bf16Round is v rounded to the nearest bf16 (ties to even), as a float32.
func bf16Round(v float32) float32 {
	u := math.Float32bits(v)
	return math.Float32frombits((u + 0x7fff + (u>>16)&1) &^ 0xffff)
}

// TestFC1BF16: with cuda.fc1_bf16 a trunk Linear with GELU in bf16 and fp8
// runs cuBLASLt with a bf16 output and bias (its plan says so) and GELU on
// those values: every element is a bf16 value, it equals the GELU of the
// fp32 pre-activation rounded to bf16 to within one bf16 step, and
// the MLP (NormLinear → LinearAdd) matches the CPU's. In fp32 the lever
// changes nothing.
func TestFC1BF16(t *testing.T) {
	for _, p := range allPrecisions(t, 33) {
		for _, s := range [][3]int{{37, 128, 512}, {1005, 1024, 4096}, {3, 64, 6}} {
			rows, e, hid := s[0], s[1], s[2]
			bf := p.name() != "fp32"
			what := fmt.Sprintf("%dx%d→%d", rows, e, hid)
			cx, gx := p.in(p.randn(rows*e, 1), rows, e)
			cnw, gnw := p.weight(p.randn(e, 1), backend.Trunk, e)
			cnb, gnb := p.weight(p.randn(e, 0.2), backend.Trunk, e)
			cw1, gw1 := p.weight(p.randn(hid*e, 1/math.Sqrt(float64(e))), backend.Trunk, hid, e)
			cb1, gb1 := p.weight(p.randn(hid, 0.5), backend.Trunk, hid)
			cw2, gw2 := p.weight(p.randn(e*hid, 1/math.Sqrt(float64(hid))), backend.Trunk, e, hid)
			cb2, gb2 := p.weight(p.randn(e, 0.5), backend.Trunk, e)

			pre := p.gpu.Linear(gx, gw1, gb1, backend.ActNone) // fp32 pre-activation
			undo := setConfig(p.gpu, func(c *Config) { c.FC1BF16 = true })
			gh := p.gpu.Linear(gx, gw1, gb1, backend.ActGELU)
			gm := backend.NormLinear(p.gpu, gx, gnw, gnb, 1e-6, gw1, gb1, backend.ActGELU)
			undo()
			g := p.gpu.(*gpu)
			var planned bool
			_ = g.own.do(func() error {
				for key := range g.lt.plans {
					planned = planned || key.outBF && key.m == hid && key.n == rows && key.k == e
				}
				return nil
			})
			if planned != bf {
				t.Errorf("%s (%s): a bf16-output GEMM plan made: %v, want %v", what, p.name(), planned, bf)
			}
			if bf {
				// The two GEMMs may sum in other orders, so the
				// pre-activation's rounding may land on a neighbouring bf16
				// value, and Go's erf and the GPU's may round GELU apart:
				// each element is within a bf16 step of GELU of one of the
				// three bf16 values nearest the fp32 pre-activation. In
				// GELU's far negative tail the kernel's fp32 1 + erf(x/√2)
				// (the reference's formula) cancels: there the element
				// may also miss by x/2 times a few fp32 steps of 1.
				hv, pv := p.gpu.ToHost(gh), p.gpu.ToHost(pre)
				bad := 0
				for i, v := range hv {
					r := bf16Round(pv[i])
					near := false
					for _, d := range []int32{-1, 0, 1} {
						x := float64(math.Float32frombits(uint32(int32(math.Float32bits(r)) + d<<16)))
						c := bf16Round(float32(gelu64(x)))
						_, exp := math.Frexp(math.Abs(float64(c)))
						near = near || math.Abs(float64(v)-float64(c)) <= math.Ldexp(1, exp-8)+math.Abs(x)*0x1p-22
					}
					if bf16Round(v) != v || !near {
						if bad == 0 {
							t.Errorf("%s (%s): element %d is %g, want bf16(GELU(x)) for x next to %g", what, p.name(), i, v, r)
						}
						bad++
					}
				}
				if bad > 0 {
					t.Errorf("%s (%s): %d of %d elements off", what, p.name(), bad, len(hv))
				}
			}
			p.check(what+": hidden layer", gh, fx.cpu.Linear(cx, cw1, cb1, backend.ActGELU), p.tol)
			gy := p.gpu.LinearAdd(gm, gw2, gb2, gx)
			cy := fx.cpu.LinearAdd(fx.cpu.NormLinear(cx, cnw, cnb, 1e-6, cw1, cb1, backend.ActGELU), cw2, cb2, cx)
			p.check(what+": MLP", gy, cy, p.tol)
			for _, x := range []backend.Tensor{pre, gm, gx, gnw, gnb, gw1, gb1, gw2, gb2} {
				p.gpu.Free(x)
			}
		}
	}
}

// gelu64 is the exact GELU in float64.
func gelu64(x float64) float64 { return 0.5 * x * (1 + math.Erf(x/math.Sqrt2)) }

// TestNormQKV: NormQKV (norm1, the qkv GEMM and the split with qk-norm and
// RoPE) matches the CPU's. With cuda.qkv_bf16, in bf16 and fp8, cuBLASLt
// runs the projection with a bf16 output (its plan says so) and the split
// reads it: v, a plain copy of the projection, holds bf16 values, each
// within a bf16 step of the fp32 v of the path without it; in fp32 the
// lever changes nothing.
func TestNormQKV(t *testing.T) {
	for _, p := range allPrecisions(t, 34) {
		for _, s := range [][2]int{{37, 2}, {1005, 16}} {
			n, h := s[0], s[1]
			e := h * 64
			bf := p.name() != "fp32"
			what := fmt.Sprintf("NormQKV %d tokens × %d heads", n, h)
			cx, gx := p.in(p.randn(n*e, 1), 1, n, e)
			cnw, gnw := p.weight(p.randn(e, 1), backend.Trunk, e)
			cnb, gnb := p.weight(p.randn(e, 0.2), backend.Trunk, e)
			cw, gw := p.weight(p.randn(3*e*e, 1/math.Sqrt(float64(e))), backend.Trunk, 3*e, e)
			cb, gb := p.weight(p.randn(3*e, 0.5), backend.Trunk, 3*e)
			cqn, gqn := p.weight(p.randn(4*64, 1), backend.Trunk, 4, 64)
			ang := p.randn(n*32, 3)
			cs, sn := make([]float32, len(ang)), make([]float32, len(ang))
			for i, a := range ang {
				cs[i], sn[i] = float32(math.Cos(float64(a))), float32(math.Sin(float64(a)))
			}
			ccs, gcs := p.in(cs, n, 32)
			csn, gsn := p.in(sn, n, 32)
			prm := func(be backend.Backend, qn, c, s backend.Tensor) backend.QKVParams {
				row := func(i int) backend.Tensor { return be.Reshape(be.SliceRows(qn, i, 1), 64) }
				return backend.QKVParams{Heads: h, HeadDim: 64, Norm: true, QW: row(0), QB: row(1), KW: row(2), KB: row(3), Eps: 1e-5,
					Cos: c, Sin: s, Pairing: backend.RoPEInterleaved}
			}
			gp, cp := prm(p.gpu, gqn, gcs, gsn), prm(fx.cpu, cqn, ccs, csn)
			undo := setConfig(p.gpu, func(c *Config) { c.QKVBF16 = false })
			dq, dk, dv := backend.NormQKV(p.gpu, gx, gnw, gnb, 1e-6, gw, gb, gp)
			undo()
			undo = setConfig(p.gpu, func(c *Config) { c.QKVBF16 = true })
			lq, lk, lv := backend.NormQKV(p.gpu, gx, gnw, gnb, 1e-6, gw, gb, gp)
			undo()
			g := p.gpu.(*gpu)
			var planned bool
			_ = g.own.do(func() error {
				for key := range g.lt.plans {
					planned = planned || key.outBF && key.m == 3*e && key.n == n && key.k == e
				}
				return nil
			})
			if planned != bf {
				t.Errorf("%s (%s): a bf16-output GEMM plan made: %v, want %v", what, p.name(), planned, bf)
			}
			if bf {
				lvv, dvv := p.gpu.ToHost(lv), p.gpu.ToHost(dv)
				for i, v := range lvv {
					r := bf16Round(dvv[i])
					_, exp := math.Frexp(math.Abs(float64(r)))
					if bf16Round(v) != v || math.Abs(float64(v)-float64(r)) > math.Ldexp(1, exp-8) {
						t.Errorf("%s (%s): v element %d is %g, want a bf16 value next to %g", what, p.name(), i, v, dvv[i])
						break
					}
				}
			} else {
				sameBits(p, what+": q, lever on against off (fp32)", lq, dq)
			}
			for _, lever := range []string{"", " with qkv_bf16"} {
				got := [3]backend.Tensor{dq, dk, dv}
				if lever != "" {
					got = [3]backend.Tensor{lq, lk, lv}
				}
				cq, ck, cv := fx.cpu.NormQKV(cx, cnw, cnb, 1e-6, cw, cb, cp)
				for i, want := range []backend.Tensor{cq, ck, cv} {
					p.check(what+": "+[]string{"q", "k", "v"}[i]+lever, got[i], want, p.tol)
				}
			}
			for _, x := range []backend.Tensor{gx, gnw, gnb, gw, gb, gqn, gcs, gsn} {
				p.gpu.Free(x)
			}
		}
	}
}

// BenchmarkTrunkBlockLevers times a block of 1005 tokens as the model runs
// it, graphs on, in bf16 and fp8: a frame block (NormQKV with KVAttention,
// the dense attention, proj with the residual, NormLinear with GELU, fc2
// with the residual) and a streaming global block (NormQKV with KVCache,
// the cache's write, paged attention over 8 pages, whose keys are split,
// then the same), each with the element-wise levers off, with the exact
// ones (cuda.fuse_norm, cuda.lean_qkv, cuda.warp_combine), with
// cuda.fc1_bf16, cuda.qkv_bf16 and cuda.layernorm_v4 added one at a time,
// and with all of them (the defaults).
func BenchmarkTrunkBlockLevers(b *testing.B) {
	const n, c, h = 1005, 1024, 16
	levers := []struct {
		name string
		set  func(*Config)
	}{
		{"off", func(c *Config) {
			c.FuseNorm, c.LeanQKV, c.WarpCombine, c.FC1BF16, c.QKVBF16, c.LayerNormV4 = false, false, false, false, false, false
		}},
		{"exact", func(c *Config) {
			c.FuseNorm, c.LeanQKV, c.WarpCombine, c.FC1BF16, c.QKVBF16, c.LayerNormV4 = true, true, true, false, false, false
		}},
		{"fc1_bf16", func(c *Config) {
			c.FuseNorm, c.LeanQKV, c.WarpCombine, c.FC1BF16, c.QKVBF16, c.LayerNormV4 = true, true, true, true, false, false
		}},
		{"qkv_bf16", func(c *Config) {
			c.FuseNorm, c.LeanQKV, c.WarpCombine, c.FC1BF16, c.QKVBF16, c.LayerNormV4 = true, true, true, false, true, false
		}},
		{"layernorm_v4", func(c *Config) {
			c.FuseNorm, c.LeanQKV, c.WarpCombine, c.FC1BF16, c.QKVBF16, c.LayerNormV4 = true, true, true, false, false, true
		}},
		{"default", func(c *Config) { // all of them: the shipped defaults
			c.FuseNorm, c.LeanQKV, c.WarpCombine, c.FC1BF16, c.QKVBF16, c.LayerNormV4 = true, true, true, true, true, true
		}},
	}
	const pages = 8 // a streaming global block over 8 frames' pages: its keys are split
	for _, be := range []Backend{fx.bf16, fx.fp8} {
		g := be.(*gpu)
		p := pair{t: b, gpu: be, rng: rand.New(rand.NewPCG(24, 1))}
		w := func(scale float64, shape ...int) backend.Tensor {
			return be.Weight("w", p.randn(backend.Numel(shape), scale), backend.Trunk, shape...)
		}
		x := be.FromHost(p.randn(n*c, 1), 1, n, c)
		ln1w, ln1b, ln2w, ln2b := w(0.1, c), w(0.1, c), w(0.1, c), w(0.1, c)
		wqkv, bqkv := w(0.03, 3*c, c), w(0.1, 3*c)
		wo, bo := w(0.03, c, c), w(0.1, c)
		w1, b1 := w(0.03, 4*c, c), w(0.1, 4*c)
		w2, b2 := w(0.015, c, 4*c), w(0.1, c)
		store, err := be.NewKVStore(backend.KVSpec{Layers: 1, Pages: pages, PageSize: n, Heads: h, HeadDim: c / h})
		if err != nil {
			b.Fatal(err)
		}
		table := make([]int32, pages)
		for i := range table {
			table[i] = int32(i)
			kv := be.FromHost(p.randn(n*c, 1), n, h, c/h)
			be.WriteKV(store, 0, i, 0, kv, kv, 0, n)
			be.Free(kv)
		}
		var global bool
		block := func() {
			var a backend.Tensor
			if global {
				q, k, v := backend.NormQKV(be, x, ln1w, ln1b, 1e-6, wqkv, bqkv, backend.QKVParams{Heads: h, HeadDim: c / h, KVUse: backend.KVCache})
				be.WriteKV(store, 0, pages-1, 0, be.Reshape(k, n, h, c/h), be.Reshape(v, n, h, c/h), 0, n)
				a = be.PagedAttention(be.Reshape(q, n, h, c/h), store, 0, table, n, 0.125)
				be.Free(q)
				be.Free(k)
				be.Free(v)
			} else {
				q, k, v := backend.NormQKV(be, x, ln1w, ln1b, 1e-6, wqkv, bqkv, backend.QKVParams{Heads: h, HeadDim: c / h, KVUse: backend.KVAttention})
				a = be.Attention(q, k, v, 0.125)
				be.Free(q)
				be.Free(k)
				be.Free(v)
			}
			x1 := be.LinearAdd(be.Reshape(a, 1, n, c), wo, bo, x)
			be.Free(a)
			f := backend.NormLinear(be, x1, ln2w, ln2b, 1e-6, w1, b1, backend.ActGELU)
			be.Free(be.LinearAdd(f, w2, b2, x1))
			be.Free(f)
			be.Free(x1)
			if err := g.own.do(g.flush); err != nil {
				b.Fatal(err)
			}
		}
		for _, kind := range []string{"frame", "global"} {
			for _, l := range levers {
				b.Run(p.name()+"/"+kind+"/"+l.name, func(b *testing.B) {
					global = kind == "global"
					undo := setConfig(be, l.set)
					defer undo()
					for range 3 {
						block()
					}
					waitGPU(b, be)
					b.ResetTimer()
					for i := 0; i < b.N; i++ {
						block()
					}
					waitGPU(b, be)
				})
			}
		}
		if c, ok := store.(interface{ Close() error }); ok {
			c.Close()
		}
		for _, t := range []backend.Tensor{x, ln1w, ln1b, ln2w, ln2b, wqkv, bqkv, wo, bo, w1, b1, w2, b2} {
			be.Free(t)
		}
	}
}

// TestWarpCombine: attention split over its keys (paged over five pages
// with four splits; dense fp32 with few queries) merges the same with
// cuda.warp_combine as without, bit for bit, and matches the CPU; in bf16
// and fp8 the warp merge also writes the bf16 copy the proj GEMM reads,
// where the old merge wrote none (which shows the keys were split).
func TestWarpCombine(t *testing.T) {
	for _, p := range allPrecisions(t, 35) {
		const n, h, pages = 1005, 16, 5
		e := h * 64
		g := p.gpu.(*gpu)
		bf := p.name() != "fp32"
		spec := backend.KVSpec{Layers: 1, Pages: pages, PageSize: n, Heads: h, HeadDim: 64}
		gs, err := p.gpu.NewKVStore(spec)
		if err != nil {
			t.Fatal(err)
		}
		table := make([]int32, pages)
		for i := range table {
			table[i] = int32(pages - 1 - i)
			gk, gv := p.gpu.FromHost(p.randn(n*e, 1), n, h, 64), p.gpu.FromHost(p.randn(n*e, 1), n, h, 64)
			p.gpu.WriteKV(gs, 0, i, 0, gk, gv, 0, n)
			p.gpu.Free(gk)
			p.gpu.Free(gv)
		}
		cq, gq := p.in(p.randn(n*e, 1), n, h, 64)
		splits := g.pagedSplits
		g.pagedSplits = 4
		on := p.gpu.PagedAttention(gq, gs, 0, table, n, 0.125)
		undo := setConfig(p.gpu, func(c *Config) { c.WarpCombine = false })
		off := p.gpu.PagedAttention(gq, gs, 0, table, n, 0.125)
		undo()
		g.pagedSplits = splits
		sameBits(p, "paged attention merged a warp a row", on, off)
		checkBF16Copy(p, "paged attention, warp merge", on, bf)
		checkBF16Copy(p, "paged attention, old merge", off, false)
		// The CPU attends to what the GPU's cache stored.
		cs, err := fx.cpu.NewKVStore(spec)
		if err != nil {
			t.Fatal(err)
		}
		sk, sv := make([]float32, pages*n*e), make([]float32, pages*n*e)
		if err := gs.(backend.KVSnapshotter).ExportKV(0, table, sk, sv); err != nil {
			t.Fatal(err)
		}
		if err := cs.(backend.KVSnapshotter).ImportKV(0, table, sk, sv); err != nil {
			t.Fatal(err)
		}
		tol := p.tol
		if p.name() == "fp8" {
			tol = 6e-2 // against the stored e4m3 values, as TestPagedAttentionFP8
		}
		p.check("paged attention, split keys", on, fx.cpu.PagedAttention(cq, cs, 0, table, n, 0.125), tol)
		p.gpu.Free(off)
		if c, ok := gs.(interface{ Close() error }); ok {
			c.Close()
		}

		if !bf {
			// Dense fp32: 37 queries over 1005 keys split in several.
			cq, gq := p.in(p.randn(37*2*64, 1), 1, 37, 2, 64)
			ck, gk := p.in(p.randn(n*2*64, 1), 1, n, 2, 64)
			cv, gv := p.in(p.randn(n*2*64, 1), 1, n, 2, 64)
			on := p.gpu.Attention(gq, gk, gv, 0.125)
			undo := setConfig(p.gpu, func(c *Config) { c.WarpCombine = false })
			off := p.gpu.Attention(gq, gk, gv, 0.125)
			undo()
			sameBits(p, "dense fp32 attention merged a warp a row", on, off)
			p.check("dense fp32 attention, split keys", on, fx.cpu.Attention(cq, ck, cv, 0.125), p.tol)
			for _, x := range []backend.Tensor{off, gq, gk, gv} {
				p.gpu.Free(x)
			}
		}
		p.gpu.Free(gq)
	}
}

// TestLayerNormV4: with cuda.layernorm_v4 the trunk's width (1024) runs
// layernorm_v4_w1024 (two warps a row, 16-byte loads) in bf16 and fp8
// (fp32 keeps the one-warp kernel): LayerNorm, with
// and without affine, matches the CPU at fp32's tolerance and the one-warp
// kernel to within a few fp32 roundings, its bf16 copy is its output
// rounded, and NormLinear (bf16 operand only) matches the CPU.
func TestLayerNormV4(t *testing.T) {
	for _, p := range allPrecisions(t, 36) {
		for _, rows := range []int{1005, 37, 1} {
			const c = 1024
			x := p.randn(rows*c, 3)
			for i := range x {
				x[i] += 1.5 // a mean far from zero tests the two-pass variance
			}
			cx, gx := p.in(x, rows, c)
			cw, gw := p.weight(p.randn(c, 1), backend.Head, c)
			cb, gb := p.weight(p.randn(c, 1), backend.Head, c)
			cm, gm := p.weight(p.randn(96*c, 1/math.Sqrt(c)), backend.Trunk, 96, c)
			what := fmt.Sprintf("LayerNorm %dx%d, layernorm_v4", rows, c)
			undo := setConfig(p.gpu, func(c *Config) { c.LayerNormV4 = false })
			off := p.gpu.LayerNorm(gx, gw, gb, 1e-5)
			undo()
			undo = setConfig(p.gpu, func(c *Config) { c.LayerNormV4 = true })
			on := p.gpu.LayerNorm(gx, gw, gb, 1e-5)
			plain := p.gpu.LayerNorm(gx, nil, nil, 1e-6)
			nl := backend.NormLinear(p.gpu, gx, gw, gb, 1e-5, gm, nil, backend.ActNone)
			undo()
			g := p.gpu.(*gpu)
			var ran bool
			_ = g.own.do(func() error { _, ran = g.kernels.funcs["layernorm.layernorm_v4_w1024"]; return nil })
			// fp32, the exact path, keeps the one-warp kernel
			if want := p.name() != "fp32"; ran != want {
				t.Fatalf("%s (%s): layernorm_v4_w1024 ran: %v, want %v", what, p.name(), ran, want)
			}
			if rel, i := relErr(p.gpu.ToHost(on), p.gpu.ToHost(off)); !(rel <= 1e-6) {
				t.Errorf("%s (%s): %.3g from the one-warp kernel (element %d)", what, p.name(), rel, i)
			}
			checkBF16Copy(p, what, on, p.name() != "fp32")
			p.check(what, on, fx.cpu.LayerNorm(cx, cw, cb, 1e-5), tolFP32)
			p.check(what+" no affine", plain, fx.cpu.LayerNorm(cx, nil, nil, 1e-6), tolFP32)
			p.check(what+" → Linear", nl, fx.cpu.NormLinear(cx, cw, cb, 1e-5, cm, nil, backend.ActNone), p.tol)
			for _, x := range []backend.Tensor{off, gx, gw, gb, gm} {
				p.gpu.Free(x)
			}
		}
	}
}
