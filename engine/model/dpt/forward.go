package dpt

import (
	"fmt"
	"math"

	"github.com/lingbotmap/lingbotmap/engine/backend"
)

// Forward runs the head on the four selected aggregator layers, each
// [S, P, C2] with the gh·gw patch tokens at [patchStart, P), and returns the raw
// map [S, OutDim, imgH, imgW] (imgH×imgW is the model input, gh·patch × gw·patch).
// The inputs are left untouched.
func (h *Head) Forward(be backend.Backend, layers []backend.Tensor, patchStart, gh, gw, imgH, imgW int) (backend.Tensor, error) {
	if len(layers) != levels {
		return nil, fmt.Errorf("dpt: got %d aggregator layers, the head needs %d", len(layers), levels)
	}
	if gh <= 0 || gw <= 0 || imgH <= 0 || imgW <= 0 || patchStart < 0 {
		return nil, fmt.Errorf("dpt: invalid sizes: patch grid %d×%d, image %d×%d, patch start %d", gh, gw, imgH, imgW, patchStart)
	}
	var s int
	for l, x := range layers {
		if x == nil {
			return nil, fmt.Errorf("dpt: aggregator layer %d is missing", l)
		}
		sh := x.Shape()
		if len(sh) != 3 || sh[1] != patchStart+gh*gw || sh[2] != h.dimIn {
			return nil, fmt.Errorf("dpt: aggregator layer %d has shape %v, want [frames, %d, %d] (%d special tokens + %d×%d patches)",
				l, sh, patchStart+gh*gw, h.dimIn, patchStart, gh, gw)
		}
		if l == 0 {
			s = sh[0]
		} else if sh[0] != s {
			return nil, fmt.Errorf("dpt: aggregator layers hold %d and %d frames", s, sh[0])
		}
	}
	if s == 0 {
		return nil, fmt.Errorf("dpt: no frames to run")
	}
	if s <= chunkFrames {
		return h.forward(be, layers, patchStart, gh, gw, imgH, imgW), nil
	}
	var parts []backend.Tensor
	for lo := 0; lo < s; lo += chunkFrames {
		n := min(chunkFrames, s-lo)
		chunk := make([]backend.Tensor, levels)
		for l, x := range layers {
			chunk[l] = be.SliceRows(x, lo, n)
		}
		parts = append(parts, h.forward(be, chunk, patchStart, gh, gw, imgH, imgW))
		for _, t := range chunk {
			be.Free(t)
		}
	}
	out := be.ConcatRows(parts...)
	for _, t := range parts {
		be.Free(t)
	}
	return out, nil
}

// forward runs validated inputs.
func (h *Head) forward(be backend.Backend, layers []backend.Tensor, patchStart, gh, gw, imgH, imgW int) backend.Tensor {
	s := layers[0].Shape()[0]
	np := gh * gw
	var feats [levels]backend.Tensor
	for l, x := range layers {
		// Patch tokens of every frame: columns [patchStart·C2, P·C2) of [S, P·C2].
		flat := be.Reshape(x, s, x.Shape()[1]*h.dimIn)
		tok := be.SliceCols(flat, patchStart*h.dimIn, np*h.dimIn)
		tok = be.Reshape(tok, s, np, h.dimIn)
		n := be.LayerNorm(tok, h.normW, h.normB, lnEps)
		be.Free(tok)
		p := be.Linear(n, h.projW[l], h.projB[l], backend.ActNone) // [S, NP, oc]
		be.Free(n)
		pt := be.Transpose(p) // [S, oc, NP]
		be.Free(p)
		m := be.Reshape(pt, s, h.outCh[l], gh, gw)
		m2 := be.Add(m, h.posEmbed(be, h.outCh[l], gh, gw, imgH, imgW))
		be.Free(pt)
		var r backend.Tensor
		switch l {
		case 0:
			r = be.ConvTranspose2D(m2, h.resize0.w, h.resize0.b, h.resize0.stride)
		case 1:
			r = be.ConvTranspose2D(m2, h.resize1.w, h.resize1.b, h.resize1.stride)
		case 2:
			r = m2
		case 3:
			r = h.resize3.apply(be, m2)
		}
		if r != m2 {
			be.Free(m2)
		}
		feats[l] = h.rn[l].apply(be, r)
		be.Free(r)
	}

	// Fusion from the coarsest level up; each refinenet ends at the size of the
	// next finer level, refinenet1 at twice its own.
	size := func(t backend.Tensor) (int, int) { sh := t.Shape(); return sh[2], sh[3] }
	oh, ow := size(feats[2])
	path := h.refine[3].forward(be, feats[3], nil, oh, ow)
	be.Free(feats[3])
	for l := 2; l >= 0; l-- {
		if l > 0 {
			oh, ow = size(feats[l-1])
		} else {
			oh, ow = size(feats[0])
			oh, ow = 2*oh, 2*ow
		}
		next := h.refine[l].forward(be, path, feats[l], oh, ow)
		be.Free(path)
		be.Free(feats[l])
		path = next
	}

	o1 := h.outConv1.apply(be, path)
	be.Free(path)
	up := be.ResizeBilinear(o1, imgH, imgW, true)
	be.Free(o1)
	pe := be.Add(up, h.posEmbed(be, h.headCh, imgH, imgW, imgH, imgW))
	be.Free(up)
	a := h.outConv2a.apply(be, pe)
	be.Free(pe)
	ar := be.Unary(backend.OpReLU, a)
	be.Free(a)
	out := h.outConv2b.apply(be, ar)
	be.Free(ar)
	return out
}

// posEmbed is the head's fixed sinusoidal embedding [c, gh, gw] of a map laid
// over an imgW×imgH image, times 0.1; built once per size and backend.
func (h *Head) posEmbed(be backend.Backend, c, gh, gw, imgH, imgW int) backend.Tensor {
	k := posKey{be: be, c: c, h: gh, w: gw, imgH: imgH, imgW: imgW}
	h.posEmbedMu.Lock()
	defer h.posEmbedMu.Unlock()
	if t, ok := h.posEmbeds[k]; ok {
		return t
	}
	t := be.FromHost(PosEmbed(c, gh, gw, imgH, imgW, 0.1), c, gh, gw)
	h.posEmbeds[k] = t
	return t
}

// PosEmbed is the reference's _apply_pos_embed table, [c, gh, gw] row-major,
// already multiplied by ratio. Grid coordinates span ±(w−1)/w of the image's
// half-extent normalised by its diagonal (aspect imgW/imgH), built in float32
// like torch.linspace; the sines and cosines are taken in float64 and rounded
// to float32. Channels are [sin x, cos x, sin y, cos y], c/4 each, with
// frequencies 100^(−k/(c/4)). c must be a multiple of 4.
func PosEmbed(c, gh, gw, imgH, imgW int, ratio float32) []float32 {
	aspect := float64(imgW) / float64(imgH)
	diag := math.Sqrt(aspect*aspect + 1)
	xs := linspace32(-aspect/diag*float64(gw-1)/float64(gw), aspect/diag*float64(gw-1)/float64(gw), gw)
	ys := linspace32(-1/diag*float64(gh-1)/float64(gh), 1/diag*float64(gh-1)/float64(gh), gh)
	q := c / 4
	omega := make([]float64, q)
	for k := range q {
		omega[k] = 1 / math.Pow(100, float64(k)/float64(q))
	}
	out := make([]float32, c*gh*gw)
	plane := gh * gw
	for k := range q {
		for i := range gh {
			ay := float64(ys[i]) * omega[k]
			sy := float32(math.Sin(ay)) * ratio
			cy := float32(math.Cos(ay)) * ratio
			for j := range gw {
				ax := float64(xs[j]) * omega[k]
				p := i*gw + j
				out[k*plane+p] = float32(math.Sin(ax)) * ratio
				out[(q+k)*plane+p] = float32(math.Cos(ax)) * ratio
				out[(2*q+k)*plane+p] = sy
				out[(3*q+k)*plane+p] = cy
			}
		}
	}
	return out
}

// linspace32 is torch.linspace in float32: the step is computed in float32 and
// the first half counts up from start, the second half down from end.
func linspace32(start, end float64, n int) []float32 {
	out := make([]float32, n)
	if n == 1 {
		out[0] = float32(start)
		return out
	}
	s, e := float32(start), float32(end)
	step := (e - s) / float32(n-1)
	half := n / 2
	for i := range n {
		if i < half {
			out[i] = s + step*float32(i)
		} else {
			out[i] = e - step*float32(n-1-i)
		}
	}
	return out
}
