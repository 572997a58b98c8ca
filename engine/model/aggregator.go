package model

import (
	"fmt"

	"github.com/lingbotmap/lingbotmap/engine/backend"
	"github.com/lingbotmap/lingbotmap/engine/kvcache"
	"github.com/lingbotmap/lingbotmap/engine/weights"
)

// The aggregator (reference-model.md §5) alternates frame blocks (attention
// inside one frame, 2D RoPE) and global blocks (attention across frames through
// the paged KV cache, 3D video RoPE). Each frame carries 6 special tokens
// (camera, 4 registers, scale) in front of its DINO patch tokens.

const (
	rope2DBase = 100
	aggHeadDim = 64
	aggEps     = 1e-5
)

type aggregator struct {
	dim, registers, numSpecial int
	// special[c][s] are a frame's special tokens [numSpecial, dim] with copy c
	// of the camera and register tokens and copy s of the scale token (§5.1).
	special       [2][2]backend.Tensor
	frame, global []*block
	rope3         rope3D

	// Per-resolution 2D RoPE tables [P, D/2].
	gh, gw     int
	cos2, sin2 backend.Tensor
}

func loadAggregator(be backend.Backend, c *weights.Cursor, dim int) (*aggregator, error) {
	a := &aggregator{dim: dim}
	camera, err := c.Get("camera_token", 1, 2, 1, dim)
	if err != nil {
		return nil, err
	}
	regShape, err := c.Shape("register_token")
	if err != nil {
		return nil, err
	}
	if len(regShape) != 4 {
		return nil, fmt.Errorf("weights: %q has shape %v, want [1, 2, registers, %d]", c.Key("register_token"), regShape, dim)
	}
	a.registers = regShape[2]
	register, err := c.Get("register_token", 1, 2, a.registers, dim)
	if err != nil {
		return nil, err
	}
	scale, err := c.Get("scale_token", 1, 2, 1, dim)
	if err != nil {
		return nil, err
	}
	a.numSpecial = 1 + a.registers + 1
	for cc := 0; cc < 2; cc++ {
		for sc := 0; sc < 2; sc++ {
			host := make([]float32, 0, a.numSpecial*dim)
			host = append(host, camera[cc*dim:(cc+1)*dim]...)
			host = append(host, register[cc*a.registers*dim:(cc+1)*a.registers*dim]...)
			host = append(host, scale[sc*dim:(sc+1)*dim]...)
			name := fmt.Sprintf("aggregator.special_tokens[camera %d, scale %d]", cc, sc)
			a.special[cc][sc] = be.Weight(name, host, backend.Trunk, a.numSpecial, dim)
		}
	}

	fb, gb := c.Sub("frame_blocks"), c.Sub("global_blocks")
	nf, ng := countBlocks(fb, "norm1.weight"), countBlocks(gb, "norm1.weight")
	if nf == 0 || nf != ng {
		return nil, fmt.Errorf("weights: the aggregator has %d frame blocks and %d global blocks; want the same non-zero number", nf, ng)
	}
	cfg := blockConfig{dim: dim, headDim: aggHeadDim, normEps: aggEps, qkNorm: true, prec: backend.Trunk}
	for i := 0; i < nf; i++ {
		f, err := loadBlock(be, fb.Sub(fmt.Sprint(i)), cfg)
		if err != nil {
			return nil, err
		}
		g, err := loadBlock(be, gb.Sub(fmt.Sprint(i)), cfg)
		if err != nil {
			return nil, err
		}
		a.frame = append(a.frame, f)
		a.global = append(a.global, g)
	}
	a.rope3 = newRope3D()
	return a, nil
}

func (a *aggregator) depth() int { return len(a.frame) }

func (a *aggregator) prepare(be backend.Backend, gh, gw int) {
	if a.cos2 != nil && a.gh == gh && a.gw == gw {
		return
	}
	a.release(be)
	cos, sin := rope2DTables(a.numSpecial, gh, gw, aggHeadDim, rope2DBase)
	p := a.numSpecial + gh*gw
	a.cos2 = be.FromHost(cos, p, aggHeadDim/2)
	a.sin2 = be.FromHost(sin, p, aggHeadDim/2)
	a.gh, a.gw = gh, gw
}

func (a *aggregator) release(be backend.Backend) {
	if a.cos2 != nil {
		be.Free(a.cos2)
		be.Free(a.sin2)
		a.cos2, a.sin2 = nil, nil
	}
}

// aggCall is what one aggregator forward needs to know about the cache.
type aggCall struct {
	s            int                  // frames in this call
	cachedFrames int                  // frames in the cache before the call (copy selection)
	scaleFor     int                  // num_frame_for_scale of the call
	timeIndex    int                  // RoPE time index of the first frame
	dense        bool                 // phase 1: bidirectional attention inside the call
	plans        []kvcache.AppendPlan // one per frame; write K/V there (nil: no write)
	pages        []int32              // phase 2: the visible page table
	lastPageLen  int
	keepLayers   []int // selected layers, ascending
	store        backend.KVStore
}

// aggRun is an aggregator forward in progress: a sliced call (Pass) runs it
// one frame/global block pair at a time.
type aggRun struct {
	call       aggCall
	x          backend.Tensor   // the residual stream [S, P, E] entering the next pair
	cos3, sin3 backend.Tensor   // the call's 3D RoPE tables
	outs       []backend.Tensor // selected layers so far
	next       int              // index into call.keepLayers
}

// begin prepares a forward on DINO patch tokens [S, NP, E] (not freed): the
// special tokens in front of each frame's patches and the 3D RoPE tables.
func (a *aggregator) begin(be backend.Backend, patches backend.Tensor, call aggCall) *aggRun {
	s, e := call.s, a.dim
	np := a.gh * a.gw
	p := a.numSpecial + np
	n := call.cachedFrames + call.s // S_true of §5.1

	parts := make([]backend.Tensor, 0, 2*s)
	for f := 0; f < s; f++ {
		pos := call.cachedFrames + f
		camCopy, scaleCopy := 1, 1
		if pos == 0 {
			camCopy = 0
		}
		if pos < min(call.scaleFor, n) {
			scaleCopy = 0
		}
		parts = append(parts, a.special[camCopy][scaleCopy], be.Reshape(be.SliceRows(patches, f, 1), np, e))
	}
	x := be.Reshape(be.ConcatRows(parts...), s, p, e)
	for f := 0; f < s; f++ {
		be.Free(parts[2*f+1])
	}

	cos3h, sin3h := a.rope3.tables(call.timeIndex, s, a.numSpecial, a.gh, a.gw)
	return &aggRun{
		call: call, x: x,
		cos3: be.FromHost(cos3h, s*p, aggHeadDim/2),
		sin3: be.FromHost(sin3h, s*p, aggHeadDim/2),
	}
}

// pair runs frame block i and global block i.
func (a *aggregator) pair(be backend.Backend, r *aggRun, i int) {
	fo := a.frameBlock(be, a.frame[i], r.x)
	be.Free(r.x)
	gOut := a.globalBlock(be, a.global[i], i, fo, r.call, r.cos3, r.sin3)
	if r.next < len(r.call.keepLayers) && r.call.keepLayers[r.next] == i {
		r.outs = append(r.outs, be.ConcatCols(fo, gOut))
		r.next++
	}
	be.Free(fo)
	r.x = gOut
}

// finish ends a forward whose pairs all ran and returns the selected
// layers' outputs concat(frame, global) as [S, P, 2E] each.
func (r *aggRun) finish(be backend.Backend) []backend.Tensor {
	outs := r.outs
	r.outs = nil
	r.free(be)
	return outs
}

// free drops what the run holds (a call that stops half way).
func (r *aggRun) free(be backend.Backend) {
	for _, t := range append([]backend.Tensor{r.x, r.cos3, r.sin3}, r.outs...) {
		be.Free(t)
	}
	r.x, r.cos3, r.sin3, r.outs = nil, nil, nil, nil
}

// frameBlock: attention inside each frame, 2D RoPE. x [S, P, E].
func (a *aggregator) frameBlock(be backend.Backend, blk *block, x backend.Tensor) backend.Tensor {
	q, k, v := blk.qkvHeads(be, x, a.cos2, a.sin2, backend.RoPEHalves2D, backend.KVAttention)
	att := be.Attention(q, k, v, blk.scale())
	be.Free(q)
	be.Free(k)
	be.Free(v)
	return blk.finish(be, x, att)
}

// globalBlock: attention across frames, 3D RoPE, K/V through the paged cache.
// x [S, P, E].
func (a *aggregator) globalBlock(be backend.Backend, blk *block, layer int, x backend.Tensor, call aggCall, cos3, sin3 backend.Tensor) backend.Tensor {
	s, p := call.s, a.numSpecial+a.gh*a.gw
	xs := be.Reshape(x, 1, s*p, a.dim)
	kvUse := backend.KVAny // phase 1: the dense attention and the cache
	switch {
	case !call.dense:
		kvUse = backend.KVCache
	case call.plans == nil:
		kvUse = backend.KVAttention
	}
	qr, kr, v := blk.qkvHeads(be, xs, cos3, sin3, backend.RoPEInterleaved, kvUse)

	var att backend.Tensor
	if call.dense {
		// Phase 1: full bidirectional attention over all frames of the call.
		att = be.Attention(qr, kr, v, blk.scale())
	}
	if call.plans != nil {
		k2 := be.Reshape(kr, s*p, blk.heads, blk.hd)
		v2 := be.Reshape(v, s*p, blk.heads, blk.hd)
		for f, plan := range call.plans {
			be.WriteKV(call.store, layer, plan.PatchPage, 0, k2, v2, f*p+a.numSpecial, p-a.numSpecial)
			for _, r := range plan.Special {
				be.WriteKV(call.store, layer, r.Page, r.Row, k2, v2, f*p+r.Src, r.N)
			}
		}
	}
	if !call.dense {
		q2 := be.Reshape(qr, s*p, blk.heads, blk.hd)
		att = be.PagedAttention(q2, call.store, layer, call.pages, call.lastPageLen, blk.scale())
	}
	be.Free(qr)
	be.Free(kr)
	be.Free(v)
	return be.Reshape(blk.finish(be, xs, att), s, p, a.dim)
}
