//go:build cuda

package cuda

import (
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/lingbotmap/lingbotmap/engine/backend"
)

// TestSplitQKV compares the fused split/qk-norm/RoPE with the CPU op (which
// engine/cpu tests against SliceCols + LayerNorm + RoPE). Head size 64 takes
// the register kernel (qkv_split_d64), the others the generic one.
func TestSplitQKV(t *testing.T) {
	shapes := []struct {
		lead []int // [..., N]
		h, d int
	}{
		{[]int{2, 7}, 16, 64},
		{[]int{3, 5}, 3, 8},   // odd head count, pairs of a lane loop once
		{[]int{2, 9}, 2, 128}, // 64 pairs: two per lane
		{[]int{4, 3}, 5, 6},   // interleaved only (halves-2D needs D % 4 == 0)
		{[]int{37}, 1, 64},    // 2-D qkv
		{[]int{1, 1005}, 16, 64},
		{[]int{3, 1005}, 16, 64}, // more warps than the grid: the grid-stride loop
	}
	for _, p := range pairs(t, 21) {
		for _, sh := range shapes {
			n, e := sh.lead[len(sh.lead)-1], sh.h*sh.d
			qkvShape := append(slices.Clone(sh.lead), 3*e)
			x := p.randn(backend.Numel(qkvShape), 2)
			for i := range x {
				x[i] += 0.7 // a mean away from zero tests the two-pass variance
			}
			cx, gx := p.in(x, qkvShape...)
			ang := p.randn(n*sh.d/2, 3)
			cs, sn := make([]float32, len(ang)), make([]float32, len(ang))
			for i, a := range ang {
				cs[i], sn[i] = float32(math.Cos(float64(a))), float32(math.Sin(float64(a)))
			}
			cc, gc := p.in(cs, n, sh.d/2)
			csn, gsn := p.in(sn, n, sh.d/2)
			// qk-norm parameters are trunk parameters (bf16 in BF16 mode, as in the model).
			var cw, gw [4]backend.Tensor
			for i := range cw {
				cw[i], gw[i] = p.weight(p.randn(sh.d, 1), backend.Trunk, sh.d)
			}

			for _, norm := range []string{"none", "affine", "plain"} {
				for _, rope := range []string{"none", "halves2d", "interleaved"} {
					if rope == "halves2d" && sh.d%4 != 0 {
						continue
					}
					cp := backend.QKVParams{Heads: sh.h, HeadDim: sh.d, Eps: 1e-5}
					gp := cp
					tol := tolFP32 // activations stay fp32 in both modes
					switch norm {
					case "affine":
						cp.Norm, cp.QW, cp.QB, cp.KW, cp.KB = true, cw[0], cw[1], cw[2], cw[3]
						gp.Norm, gp.QW, gp.QB, gp.KW, gp.KB = true, gw[0], gw[1], gw[2], gw[3]
						tol = p.tol // the GPU's weights are rounded to bf16 in BF16 mode
					case "plain":
						cp.Norm, gp.Norm = true, true
					}
					switch rope {
					case "halves2d":
						cp.Cos, cp.Sin, cp.Pairing = cc, csn, backend.RoPEHalves2D
						gp.Cos, gp.Sin, gp.Pairing = gc, gsn, backend.RoPEHalves2D
					case "interleaved":
						cp.Cos, cp.Sin, cp.Pairing = cc, csn, backend.RoPEInterleaved
						gp.Cos, gp.Sin, gp.Pairing = gc, gsn, backend.RoPEInterleaved
					}
					gq, gk, gv := p.gpu.SplitQKV(gx, gp)
					wq, wk, wv := fx.cpu.SplitQKV(cx, cp)
					name := fmt.Sprintf("SplitQKV %v as %d heads × %d, norm %s, rope %s", qkvShape, sh.h, sh.d, norm, rope)
					// k and v carry bf16 copies for the attention in BF16 mode (head size 64).
					copies := p.name() == "bf16" && sh.d == 64
					checkBF16Copy(p, name+": q", gq, false)
					checkBF16Copy(p, name+": k", gk, copies)
					checkBF16Copy(p, name+": v", gv, copies)
					checkHeads(p, name+": q", gq, wq, tol, sh.h, sh.d)
					checkHeads(p, name+": k", gk, wk, tol, sh.h, sh.d)
					checkHeads(p, name+": v", gv, wv, 0, sh.h, sh.d) // a plain copy
				}
			}
			for _, tt := range []backend.Tensor{cx, cc, csn, cw[0], cw[1], cw[2], cw[3]} {
				fx.cpu.Free(tt)
			}
			for _, tt := range []backend.Tensor{gx, gc, gsn, gw[0], gw[1], gw[2], gw[3]} {
				p.gpu.Free(tt)
			}
		}
	}
}

// checkHeads is pair.check for [..., H, D] outputs: a failure names the
// worst element as (row, head, dim) and counts the elements that are off.
func checkHeads(p pair, what string, got, want backend.Tensor, tol float64, h, d int) {
	p.t.Helper()
	if err := p.gpu.Err(); err != nil {
		p.t.Fatalf("%s (%s): device error: %v", what, p.name(), err)
	}
	if gs, ws := got.Shape(), want.Shape(); !slices.Equal(gs, ws) {
		p.t.Fatalf("%s (%s): shape %v, want %v", what, p.name(), gs, ws)
	}
	g, w := p.gpu.ToHost(got), fx.cpu.ToHost(want)
	p.gpu.Free(got)
	fx.cpu.Free(want)
	rel, worst := relErr(g, w)
	if rel <= tol {
		return
	}
	var sq float64
	for _, v := range w {
		sq += float64(v) * float64(v)
	}
	rms := math.Sqrt(sq / float64(max(len(w), 1)))
	off, first := 0, -1
	for i := range w {
		if d := math.Abs(float64(g[i]) - float64(w[i])); !(d <= 10*tol*rms) {
			if first < 0 {
				first = i
			}
			off++
		}
	}
	at := func(i int) string {
		return fmt.Sprintf("row %d head %d dim %d: got %g want %g", i/(h*d), i/d%h, i%d, g[i], w[i])
	}
	msg := fmt.Sprintf("%s (%s): relative error %.3g > %.3g; worst at %s; %d of %d elements off by more than %.3g",
		what, p.name(), rel, tol, at(worst), off, len(w), 10*tol*rms)
	if first >= 0 {
		msg += "; first at " + at(first)
	}
	p.t.Error(msg)
}
