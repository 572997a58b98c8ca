package model

import "math"

// Rotary position tables for the two RoPE flavours of the aggregator
// (reference-model.md §5.4, §5.5). Both return cos and sin tables of shape
// [tokens, headDim/2], one row per token, column m for pair m in the pairing the
// backend expects (backend.RoPEHalves2D and backend.RoPEInterleaved).

// rope2DTables builds the frame-block tables for one frame of numSpecial special
// tokens followed by a gh×gw patch grid: specials sit at (0, 0), patch (r, c) at
// (r+1, c+1). Column m < D/4 rotates by the row, m ≥ D/4 by the column, with
// frequency base^(−2t/(D/2)), t = m mod D/4. Like the reference, angles are float32.
func rope2DTables(numSpecial, gh, gw, headDim int, base float64) (cos, sin []float32) {
	quarter := headDim / 4
	half := headDim / 2
	invFreq := make([]float32, quarter)
	for t := range invFreq {
		e := float32(2*t) / float32(half)
		invFreq[t] = 1 / float32(math.Pow(base, float64(e)))
	}
	n := numSpecial + gh*gw
	cos = make([]float32, n*half)
	sin = make([]float32, n*half)
	for tok := 0; tok < n; tok++ {
		var y, x float32
		if tok >= numSpecial {
			p := tok - numSpecial
			y, x = float32(p/gw+1), float32(p%gw+1)
		}
		row := tok * half
		for t := 0; t < quarter; t++ {
			ay := y * invFreq[t]
			ax := x * invFreq[t]
			cos[row+t] = float32(math.Cos(float64(ay)))
			sin[row+t] = float32(math.Sin(float64(ay)))
			cos[row+quarter+t] = float32(math.Cos(float64(ax)))
			sin[row+quarter+t] = float32(math.Sin(float64(ax)))
		}
	}
	return cos, sin
}

// rope3D holds the frequencies of the global blocks' video RoPE: pairs are
// split time / height / width as fhw = [20, 22, 22] dims of a 64-dim head
// (10, 11, 11 pairs), base 10000, angles in float64.
type rope3D struct {
	tFreq, hFreq, wFreq []float64

	// The height/width columns of one frame's rows, kept for the grid they
	// were made for: only the time columns change from frame to frame.
	grid         [3]int // numSpecial, gh, gw
	spCos, spSin []float32
}

func newRope3D() rope3D {
	// The reference hard-codes the split for head dim 64 (Load checks it).
	const tDim, hDim = 20, 22
	freqs := func(dim int) []float64 {
		f := make([]float64, dim/2)
		for m := range f {
			f[m] = 1 / math.Pow(10000, float64(2*m)/float64(dim))
		}
		return f
	}
	return rope3D{tFreq: freqs(tDim), hFreq: freqs(hDim), wFreq: freqs(hDim)}
}

// spatial returns the height/width columns of one frame's rows, [p][hw].
func (r *rope3D) spatial(numSpecial, gh, gw int) (cos, sin []float32) {
	if g := [3]int{numSpecial, gh, gw}; r.spCos == nil || r.grid != g {
		hw := len(r.hFreq) + len(r.wFreq)
		p := numSpecial + gh*gw
		r.spCos, r.spSin = make([]float32, p*hw), make([]float32, p*hw)
		for tok := 0; tok < p; tok++ {
			var hp, wp float64
			if tok < numSpecial {
				hp, wp = float64(tok), float64(tok)
			} else {
				q := tok - numSpecial
				hp, wp = float64(numSpecial+q/gw), float64(numSpecial+q%gw)
			}
			m := tok * hw
			for _, pw := range [2]struct {
				pos float64
				fr  []float64
			}{{hp, r.hFreq}, {wp, r.wFreq}} {
				for _, w := range pw.fr {
					a := pw.pos * w
					r.spCos[m], r.spSin[m] = float32(math.Cos(a)), float32(math.Sin(a))
					m++
				}
			}
		}
		r.grid = g
	}
	return r.spCos, r.spSin
}

// tables builds rows for frames f0 … f0+frames−1, each of numSpecial special
// tokens (token j at (f, j, j)) then a gh×gw patch grid (patch (r, c) at
// (f, numSpecial+r, numSpecial+c)).
func (r *rope3D) tables(f0, frames, numSpecial, gh, gw int) (cos, sin []float32) {
	nt := len(r.tFreq)
	spCos, spSin := r.spatial(numSpecial, gh, gw)
	hw := len(spCos) / (numSpecial + gh*gw)
	half := nt + hw
	p := numSpecial + gh*gw
	cos = make([]float32, frames*p*half)
	sin = make([]float32, frames*p*half)
	tc, ts := make([]float32, nt), make([]float32, nt)
	for f := 0; f < frames; f++ {
		tpos := float64(f0 + f)
		for m, w := range r.tFreq {
			a := tpos * w
			tc[m], ts[m] = float32(math.Cos(a)), float32(math.Sin(a))
		}
		for tok := 0; tok < p; tok++ {
			row := (f*p + tok) * half
			copy(cos[row:], tc)
			copy(sin[row:], ts)
			copy(cos[row+nt:row+half], spCos[tok*hw:(tok+1)*hw])
			copy(sin[row+nt:row+half], spSin[tok*hw:(tok+1)*hw])
		}
	}
	return cos, sin
}
