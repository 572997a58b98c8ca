package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/lingbotmap/lingbotmap/engine/backend"
)

// composedQKV is what SplitQKV replaces: three SliceCols, then LayerNorm and
// RoPE on q and k.
func composedQKV(b *Backend, qkv backend.Tensor, p backend.QKVParams) (q, k, v backend.Tensor) {
	s := qkv.Shape()
	hs := append(slices.Clone(s[:len(s)-1]), p.Heads, p.HeadDim)
	e := p.Heads * p.HeadDim
	q = b.Reshape(b.SliceCols(qkv, 0, e), hs...)
	k = b.Reshape(b.SliceCols(qkv, e, e), hs...)
	v = b.Reshape(b.SliceCols(qkv, 2*e, e), hs...)
	if p.Norm {
		q = b.LayerNorm(q, p.QW, p.QB, p.Eps)
		k = b.LayerNorm(k, p.KW, p.KB, p.Eps)
	}
	if p.Cos != nil {
		q = b.RoPE(q, p.Cos, p.Sin, p.Pairing)
		k = b.RoPE(k, p.Cos, p.Sin, p.Pairing)
	}
	return q, k, v
}

func TestSplitQKV(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	b := New(Config{Threads: 3})
	shapes := []struct {
		lead []int // [..., N]
		h, d int
	}{{[]int{2, 7}, 16, 64}, {[]int{3, 5}, 3, 8}, {[]int{9}, 2, 12}}
	for _, sh := range shapes {
		n := sh.lead[len(sh.lead)-1]
		e := sh.h * sh.d
		x := randSlice(r, backend.Numel(sh.lead)*3*e)
		for i := range x {
			x[i] = 2*x[i] + 0.7 // a mean away from zero, as after a projection
		}
		qkvShape := append(slices.Clone(sh.lead), 3*e)
		qkv := b.FromHost(x, qkvShape...)
		cs, sn := make([]float32, n*sh.d/2), make([]float32, n*sh.d/2)
		for i := range cs {
			a := r.Float64() * 6.3
			cs[i], sn[i] = float32(math.Cos(a)), float32(math.Sin(a))
		}
		cosT, sinT := b.FromHost(cs, n, sh.d/2), b.FromHost(sn, n, sh.d/2)
		vec := func() backend.Tensor { return b.FromHost(randSlice(r, sh.d), sh.d) }
		qw, qb, kw, kb := vec(), vec(), vec(), vec()

		for _, norm := range []string{"none", "affine", "plain"} {
			for _, rope := range []string{"none", "halves2d", "interleaved"} {
				p := backend.QKVParams{Heads: sh.h, HeadDim: sh.d, Eps: 1e-5}
				switch norm {
				case "affine":
					p.Norm, p.QW, p.QB, p.KW, p.KB = true, qw, qb, kw, kb
				case "plain": // no weights: LayerNorm without affine
					p.Norm = true
				}
				switch rope {
				case "halves2d":
					p.Cos, p.Sin, p.Pairing = cosT, sinT, backend.RoPEHalves2D
				case "interleaved":
					p.Cos, p.Sin, p.Pairing = cosT, sinT, backend.RoPEInterleaved
				}
				name := fmt.Sprintf("qkv %v, %d heads × %d, norm %s, rope %s", qkvShape, sh.h, sh.d, norm, rope)
				q, k, v := b.SplitQKV(qkv, p)
				wq, wk, wv := composedQKV(b, qkv, p)
				for i, pr := range [][2]backend.Tensor{{q, wq}, {k, wk}, {v, wv}} {
					what := fmt.Sprintf("%s: %c", name, "qkv"[i])
					if !slices.Equal(pr[0].Shape(), pr[1].Shape()) {
						t.Fatalf("%s: shape %v, want %v", what, pr[0].Shape(), pr[1].Shape())
					}
					// Same float32 arithmetic as the composed ops: equal up to
					// rounding (bit-exact where the compiler fuses nothing).
					checkClose(t, what, ct(pr[0]).data, ct(pr[1]).data, 1e-6)
				}
			}
		}
		if !slices.Equal(ct(qkv).data, x) {
			t.Fatalf("qkv %v: SplitQKV changed its input", qkvShape)
		}
	}
}

// The rotation is applied after the norm, so it must see normalised values:
// with zero angles RoPE is the identity and q equals LayerNorm(q) alone.
func TestSplitQKVNormThenIdentityRotation(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 14))
	b := New(Config{})
	const n, h, d = 4, 2, 8
	x := randSlice(r, n*3*h*d)
	cs, sn := make([]float32, n*d/2), make([]float32, n*d/2)
	for i := range cs {
		cs[i] = 1
	}
	qkv := b.FromHost(x, n, 3*h*d)
	q, k, v := b.SplitQKV(qkv, backend.QKVParams{Heads: h, HeadDim: d, Norm: true, Eps: 1e-6,
		Cos: b.FromHost(cs, n, d/2), Sin: b.FromHost(sn, n, d/2), Pairing: backend.RoPEInterleaved})
	for i, out := range []backend.Tensor{q, k} {
		got := ct(out).data
		for row := 0; row < n*h; row++ {
			head := got[row*d : (row+1)*d]
			var mean, sq float64
			for _, y := range head {
				mean += float64(y)
			}
			mean /= d
			for _, y := range head {
				sq += (float64(y) - mean) * (float64(y) - mean)
			}
			if math.Abs(mean) > 1e-5 || math.Abs(sq/d-1) > 1e-4 {
				t.Fatalf("%c row %d head: mean %g variance %g, want 0 and 1", "qk"[i], row/h, mean, sq/d)
			}
		}
	}
	for row := 0; row < n; row++ {
		want := x[row*3*h*d+2*h*d : (row+1)*3*h*d]
		if got := ct(v).data[row*h*d : (row+1)*h*d]; !slices.Equal(got, want) {
			t.Fatalf("v row %d = %v, want %v", row, got, want)
		}
	}
}
