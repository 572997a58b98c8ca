package model

import (
	"fmt"
	"math"
	"slices"

	"github.com/lingbotmap/lingbotmap/engine/backend"
	"github.com/lingbotmap/lingbotmap/engine/weights"
)

// The patch embedding is a DINOv2 ViT with register tokens
// (aggregator.patch_embed; reference-model.md §4): ImageNet normalisation, a
// patch convolution, cls + position table (resampled to the patch grid), the
// registers without position, pre-norm blocks (LayerNorm eps 1e-6) and a final
// norm, of which only the patch tokens are kept.

var (
	imagenetMean = [3]float32{0.485, 0.456, 0.406}
	imagenetStd  = [3]float32{0.229, 0.224, 0.225}
)

const dinoEps = 1e-6

type dino struct {
	dim, patch, grid, registers int
	projW, projB                backend.Tensor
	cls                         []float32 // [dim]
	posEmbed                    []float32 // [1+grid², dim], host copy for resampling
	regs                        []float32 // [registers, dim]
	blocks                      []*block
	norm                        layerNorm

	// Per-resolution cache: the resampled patch position table, the
	// cls+registers prefix and the input normalisation as x·scale + shift.
	gh, gw             int
	posGrid            backend.Tensor // [gh·gw, dim]
	prefix             backend.Tensor // [1+registers, dim]
	posHost            []float32      // [1+gh·gw, dim], as the reference's interpolated table
	normScale, normAdd backend.Tensor // [3, h, w]: 1/std and −mean/std of each colour plane
}

func loadDINO(be backend.Backend, c *weights.Cursor, headDim int) (*dino, error) {
	d := &dino{}
	clsShape, err := c.Shape("cls_token")
	if err != nil {
		return nil, err
	}
	if len(clsShape) != 3 || clsShape[0] != 1 || clsShape[1] != 1 {
		return nil, fmt.Errorf("weights: %q has shape %v, want [1, 1, dim]", c.Key("cls_token"), clsShape)
	}
	d.dim = clsShape[2]
	if d.cls, err = c.Get("cls_token", 1, 1, d.dim); err != nil {
		return nil, err
	}
	posShape, err := c.Shape("pos_embed")
	if err != nil {
		return nil, err
	}
	if len(posShape) != 3 || posShape[1] < 2 {
		return nil, fmt.Errorf("weights: %q has shape %v, want [1, 1+grid², %d]", c.Key("pos_embed"), posShape, d.dim)
	}
	d.grid = int(math.Round(math.Sqrt(float64(posShape[1] - 1))))
	if d.grid*d.grid != posShape[1]-1 {
		return nil, fmt.Errorf("weights: %q has %d positions, which is not 1 + a square grid", c.Key("pos_embed"), posShape[1])
	}
	if d.posEmbed, err = c.Get("pos_embed", 1, posShape[1], d.dim); err != nil {
		return nil, err
	}
	regShape, err := c.Shape("register_tokens")
	if err != nil {
		return nil, err
	}
	if len(regShape) != 3 {
		return nil, fmt.Errorf("weights: %q has shape %v, want [1, registers, %d]", c.Key("register_tokens"), regShape, d.dim)
	}
	d.registers = regShape[1]
	if d.regs, err = c.Get("register_tokens", 1, d.registers, d.dim); err != nil {
		return nil, err
	}
	// mask_token is a training-time parameter; read it so it counts as known.
	if c.Has("mask_token") {
		if _, err := c.Get("mask_token", 1, d.dim); err != nil {
			return nil, err
		}
	}

	pe := c.Sub("patch_embed").Sub("proj")
	wShape, err := pe.Shape("weight")
	if err != nil {
		return nil, err
	}
	if len(wShape) != 4 || wShape[0] != d.dim || wShape[1] != 3 || wShape[2] != wShape[3] {
		return nil, fmt.Errorf("weights: %q has shape %v, want [%d, 3, patch, patch]", pe.Key("weight"), wShape, d.dim)
	}
	d.patch = wShape[2]
	w, err := pe.Get("weight", wShape...)
	if err != nil {
		return nil, err
	}
	b, err := pe.Get("bias", d.dim)
	if err != nil {
		return nil, err
	}
	d.projW = be.Weight(pe.Key("weight"), w, backend.Trunk, wShape...)
	d.projB = be.Weight(pe.Key("bias"), b, backend.Trunk, d.dim)

	blocks := c.Sub("blocks")
	n := countBlocks(blocks, "norm1.weight")
	if n == 0 {
		return nil, fmt.Errorf("weights: no DINO blocks under %q", blocks.Key("0"))
	}
	cfg := blockConfig{dim: d.dim, headDim: headDim, normEps: dinoEps, prec: backend.Trunk}
	for i := 0; i < n; i++ {
		blk, err := loadBlock(be, blocks.Sub(fmt.Sprint(i)), cfg)
		if err != nil {
			return nil, err
		}
		d.blocks = append(d.blocks, blk)
	}
	if d.norm, err = loadLayerNorm(be, c, "norm", d.dim, dinoEps, backend.Trunk); err != nil {
		return nil, err
	}
	return d, nil
}

// prepare builds the per-resolution tables for a gh×gw patch grid.
func (d *dino) prepare(be backend.Backend, gh, gw int) {
	if d.posGrid != nil && d.gh == gh && d.gw == gw {
		return
	}
	d.release(be)
	e := d.dim
	grid := resizeBicubicAA(d.posEmbed[e:], d.grid, d.grid, e, gh, gw)
	d.posHost = append(append(make([]float32, 0, (1+gh*gw)*e), d.posEmbed[:e]...), grid...)
	d.posGrid = be.FromHost(grid, gh*gw, e)

	prefix := make([]float32, 0, (1+d.registers)*e)
	for i := 0; i < e; i++ {
		prefix = append(prefix, d.cls[i]+d.posEmbed[i])
	}
	prefix = append(prefix, d.regs...)
	d.prefix = be.FromHost(prefix, 1+d.registers, e)

	// ImageNet normalisation runs on the backend, so the pixels go up as
	// they are (on a GPU the host pass over them delayed every frame's start).
	h, w := gh*d.patch, gw*d.patch
	scale := make([]float32, 3*h*w)
	add := make([]float32, 3*h*w)
	for ch := 0; ch < 3; ch++ {
		for j := ch * h * w; j < (ch+1)*h*w; j++ {
			scale[j] = 1 / imagenetStd[ch]
			add[j] = -imagenetMean[ch] / imagenetStd[ch]
		}
	}
	d.normScale, d.normAdd = be.FromHost(scale, 3, h, w), be.FromHost(add, 3, h, w)
	d.gh, d.gw = gh, gw
}

func (d *dino) release(be backend.Backend) {
	if d.posGrid != nil {
		for _, t := range []backend.Tensor{d.posGrid, d.prefix, d.normScale, d.normAdd} {
			be.Free(t)
		}
		d.posGrid, d.prefix, d.posHost, d.normScale, d.normAdd = nil, nil, nil, nil, nil
	}
}

// The encoder runs in three parts so that a sliced call (Pass) can stop
// between its blocks: embed, then each block, then patchTokens.

// embed turns S images (host CHW in [0,1], h×w) into the token sequences
// [S, 1+registers+gh·gw, dim] that the first block takes.
func (d *dino) embed(be backend.Backend, images [][]float32, h, w int) backend.Tensor {
	s := len(images)
	gh, gw := h/d.patch, w/d.patch
	np := gh * gw
	e := d.dim
	d.prepare(be, gh, gw)

	pix := images[0]
	if s > 1 {
		pix = slices.Concat(images...)
	}
	raw := be.FromHost(pix, s, 3, h, w)
	scaled := be.Mul(raw, d.normScale)
	be.Free(raw)
	x := be.Add(scaled, d.normAdd)
	be.Free(scaled)
	conv := be.Conv2D(x, d.projW, d.projB, d.patch, 0) // [S, E, gh, gw]
	be.Free(x)
	tokens := be.Transpose(be.Reshape(conv, s, e, np)) // [S, NP, E]
	be.Free(conv)
	withPos := be.Add(tokens, d.posGrid)
	be.Free(tokens)

	// Per frame: cls+pos, registers, patches.
	n := 1 + d.registers + np
	parts := make([]backend.Tensor, 0, 2*s)
	for f := 0; f < s; f++ {
		parts = append(parts, d.prefix, be.Reshape(be.SliceRows(withPos, f, 1), np, e))
	}
	seq := be.Reshape(be.ConcatRows(parts...), s, n, e)
	for f := 0; f < s; f++ {
		be.Free(parts[2*f+1])
	}
	be.Free(withPos)
	return seq
}

// block runs block i on seq and frees it.
func (d *dino) block(be backend.Backend, i int, seq backend.Tensor) backend.Tensor {
	blk := d.blocks[i]
	q, k, v := blk.qkvHeads(be, seq, nil, nil, 0, backend.KVAttention) // no RoPE in DINO
	a := be.Attention(q, k, v, blk.scale())
	be.Free(q)
	be.Free(k)
	be.Free(v)
	next := blk.finish(be, seq, a)
	be.Free(seq)
	return next
}

// patchTokens applies the final norm to the last block's output, frees it
// and returns the normalised patch tokens [S, gh·gw, dim].
func (d *dino) patchTokens(be backend.Backend, seq backend.Tensor) backend.Tensor {
	sh := seq.Shape()
	s, n, e := sh[0], sh[1], d.dim
	np := d.gh * d.gw
	out := d.norm.forward(be, seq)
	be.Free(seq)

	// Keep the patch tokens of every frame.
	flat := be.Reshape(out, s*n, e)
	keep := make([]backend.Tensor, s)
	for f := 0; f < s; f++ {
		keep[f] = be.SliceRows(flat, f*n+1+d.registers, np)
	}
	patches := be.Reshape(be.ConcatRows(keep...), s, np, e)
	for _, t := range keep {
		be.Free(t)
	}
	be.Free(out)
	return patches
}
