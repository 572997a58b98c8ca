package model

import (
	"fmt"

	"github.com/lingbotmap/lingbotmap/engine/backend"
	"github.com/lingbotmap/lingbotmap/engine/weights"
)

// The camera head (reference-model.md §9) refines a 9-D pose encoding over a
// few iterations from the camera token of the last selected aggregator layer.
// Each iteration modulates the normalised token (adaLN: shift, scale, gate from
// the embedded current encoding), runs a small causal transformer whose blocks
// attend to the camera tokens of all committed frames (one cache per iteration
// and block, never evicted), and adds a delta to the pre-activation encoding.

const (
	camHeadDim = 128
	poseDim    = 9
	adaLNEps   = 1e-6
)

type cameraHead struct {
	dim                   int
	tokenNorm, trunkNorm  layerNorm
	emptyPose             backend.Tensor // [1, 9]
	embedPose, modulation linear
	fc1, fc2              linear
	trunk                 []*block
	iterations            int
	// shift0, scale0 and gate0 are the first iteration's modulation
	// (shift, 1 + scale, gate; [dim] each): its input is the learned empty
	// pose, the same for every frame, so it is computed once at load.
	shift0, scale0, gate0 backend.Tensor
}

// camCache is the camera head's state: k[i][j] and v[i][j] are the cached
// keys and values of iteration i, block j, [frames, H, D] each, nil while
// empty. It belongs to a model state, not to the weights.
type camCache struct {
	k, v   [][]backend.Tensor
	frames int
}

func newCamCache(iterations, blocks int) camCache {
	c := camCache{k: make([][]backend.Tensor, iterations), v: make([][]backend.Tensor, iterations)}
	for i := range c.k {
		c.k[i] = make([]backend.Tensor, blocks)
		c.v[i] = make([]backend.Tensor, blocks)
	}
	return c
}

func (c *camCache) reset(be backend.Backend) {
	for i := range c.k {
		for j := range c.k[i] {
			be.Free(c.k[i][j])
			be.Free(c.v[i][j])
			c.k[i][j], c.v[i][j] = nil, nil
		}
	}
	c.frames = 0
}

func loadCameraHead(be backend.Backend, c *weights.Cursor, dim, iterations int) (*cameraHead, error) {
	h := &cameraHead{dim: dim}
	var err error
	if h.tokenNorm, err = loadLayerNorm(be, c, "token_norm", dim, 1e-5, backend.Head); err != nil {
		return nil, err
	}
	if h.trunkNorm, err = loadLayerNorm(be, c, "trunk_norm", dim, 1e-5, backend.Head); err != nil {
		return nil, err
	}
	ep, err := c.Get("empty_pose_tokens", 1, 1, poseDim)
	if err != nil {
		return nil, err
	}
	h.emptyPose = be.Weight(c.Key("empty_pose_tokens"), ep, backend.Head, 1, poseDim)
	if h.embedPose, err = loadLinear(be, c, "embed_pose", dim, poseDim, backend.Head); err != nil {
		return nil, err
	}
	if h.modulation, err = loadLinear(be, c.Sub("poseLN_modulation"), "1", 3*dim, dim, backend.Head); err != nil {
		return nil, err
	}
	pb := c.Sub("pose_branch")
	if h.fc1, err = loadLinear(be, pb, "fc1", -1, dim, backend.Head); err != nil {
		return nil, err
	}
	if h.fc2, err = loadLinear(be, pb, "fc2", poseDim, h.fc1.out, backend.Head); err != nil {
		return nil, err
	}
	tc := c.Sub("trunk")
	n := countBlocks(tc, "norm1.weight")
	if n == 0 {
		return nil, fmt.Errorf("weights: no camera trunk blocks under %q", tc.Key("0"))
	}
	cfg := blockConfig{dim: dim, headDim: camHeadDim, normEps: 1e-5, prec: backend.Head}
	for i := 0; i < n; i++ {
		blk, err := loadBlock(be, tc.Sub(fmt.Sprint(i)), cfg)
		if err != nil {
			return nil, err
		}
		h.trunk = append(h.trunk, blk)
	}
	h.iterations = iterations
	u := be.Reshape(h.embedPose.forward(be, h.emptyPose, backend.ActNone), h.dim)
	h.shift0, h.scale0, h.gate0 = h.modulation3(be, u)
	return h, nil
}

// modulation3 turns an embedded encoding u ([dim], or [S, dim]) into the
// adaLN shift, 1 + scale and gate of the same shape. It frees u.
func (h *cameraHead) modulation3(be backend.Backend, u backend.Tensor) (shift, scale1, gate backend.Tensor) {
	su := be.Unary(backend.OpSiLU, u)
	be.Free(u)
	mod := h.modulation.forward(be, su, backend.ActNone)
	be.Free(su)
	shift = be.SliceCols(mod, 0, h.dim)
	scale := be.SliceCols(mod, h.dim, h.dim)
	gate = be.SliceCols(mod, 2*h.dim, h.dim)
	be.Free(mod)
	scale1 = be.ScaleShift(scale, 1, 1)
	be.Free(scale)
	return shift, scale1, gate
}

// forward takes the last selected aggregator layer [S, P, dim] and queues
// the head's work; once the device tensor it adds to dl is downloaded, *dst
// holds the activated encoding of every iteration, [iters][S][9]. With store
// the frames' camera tokens join the caches in cc; without (non-keyframes)
// they only attend.
func (h *cameraHead) forward(be backend.Backend, cc *camCache, last backend.Tensor, store bool, dl *downloads, dst *[][][poseDim]float32) {
	sh := last.Shape()
	s := sh[0]
	tok := be.SliceCols(be.Reshape(last, s, sh[1]*sh[2]), 0, h.dim) // camera token, index 0
	c := h.tokenNorm.forward(be, tok)
	be.Free(tok)
	cn := be.LayerNorm(c, nil, nil, adaLNEps)
	defer be.Free(c)
	defer be.Free(cn)

	iters := h.iterations
	// Each iteration's encoding stays on the device until the end: one copy
	// to the host per frame rather than a pipeline stall per iteration.
	preds := make([]backend.Tensor, 0, iters)
	var pred backend.Tensor // pre-activation accumulated encoding [S, 9]
	for i := 0; i < iters; i++ {
		// The first iteration's modulation ([dim], broadcast over the
		// frames) was computed at load.
		shift, scale1, gate := h.shift0, h.scale0, h.gate0
		if pred != nil {
			shift, scale1, gate = h.modulation3(be, h.embedPose.forward(be, pred, backend.ActNone)) // [S, dim]
		}
		// x = gate ⊙ (LN(c) ⊙ (1 + scale) + shift) + c.
		m1 := be.Mul(cn, scale1)
		m2 := be.Add(m1, shift)
		gated := mulBroadcast(be, m2, gate)
		x := be.Add(gated, c)
		for _, t := range []backend.Tensor{m1, m2, gated} {
			be.Free(t)
		}
		if pred != nil {
			for _, t := range []backend.Tensor{scale1, shift, gate} {
				be.Free(t)
			}
		}

		for j, blk := range h.trunk {
			xb := be.Reshape(x, 1, s, h.dim)
			q, k, v := blk.qkvHeads(be, xb, nil, nil, 0, backend.KVAny) // no RoPE in the camera trunk; k and v join its caches
			k3 := be.Reshape(k, s, blk.heads, blk.hd)
			v3 := be.Reshape(v, s, blk.heads, blk.hd)
			keys, vals := k3, v3
			switch {
			case store && cc.k[i][j] != nil:
				// the cache grows in place (backend.RowAppender): its
				// storage changes rarely, not at every frame
				keys = backend.AppendRows(be, cc.k[i][j], k3)
				vals = backend.AppendRows(be, cc.v[i][j], v3)
				cc.k[i][j], cc.v[i][j] = keys, vals
			case cc.k[i][j] != nil:
				keys = be.ConcatRows(cc.k[i][j], k3)
				vals = be.ConcatRows(cc.v[i][j], v3)
			}
			nk := keys.Shape()[0]
			att := be.Attention(q, be.Reshape(keys, 1, nk, blk.heads, blk.hd), be.Reshape(vals, 1, nk, blk.heads, blk.hd), blk.scale())
			be.Free(q)
			switch {
			case store && keys != k3:
				// the cache took the new rows
				be.Free(k3)
				be.Free(v3)
			case store:
				cc.k[i][j], cc.v[i][j] = k3, v3
			case cc.k[i][j] != nil:
				be.Free(keys)
				be.Free(vals)
				be.Free(k3)
				be.Free(v3)
			default:
				be.Free(k3)
				be.Free(v3)
			}
			nx := blk.finish(be, xb, att)
			be.Free(x)
			x = be.Reshape(nx, s, h.dim)
		}
		hid := h.trunkNorm.linear(be, x, h.fc1, backend.ActGELU)
		be.Free(x)
		delta := h.fc2.forward(be, hid, backend.ActNone)
		be.Free(hid)
		if pred == nil {
			pred = delta
		} else {
			pred = be.Add(pred, delta)
			be.Free(delta)
		}
		preds = append(preds, pred)
	}
	all := be.ConcatRows(preds...) // [iters·S, 9]
	for _, p := range preds {
		be.Free(p)
	}
	if store {
		cc.frames += s
	}
	dl.add(all, false, func(raw []float32) {
		out := make([][][poseDim]float32, iters)
		for i := range out {
			out[i] = activatePose(raw[i*s*poseDim:(i+1)*s*poseDim], s)
		}
		*dst = out
	})
}

// mulBroadcast multiplies x [S, C] by g, which is [S, C] or [1, C].
func mulBroadcast(be backend.Backend, x, g backend.Tensor) backend.Tensor {
	gs := g.Shape()
	if len(gs) == 2 && gs[0] == 1 && x.Shape()[0] != 1 {
		return be.Mul(x, be.Reshape(g, gs[1]))
	}
	return be.Mul(x, g)
}

// activatePose applies the pose activations to S pre-activation encodings:
// translation and quaternion linear, field of view ReLU.
func activatePose(raw []float32, s int) [][poseDim]float32 {
	out := make([][poseDim]float32, s)
	for f := range out {
		copy(out[f][:], raw[f*poseDim:(f+1)*poseDim])
		for k := 7; k < poseDim; k++ {
			out[f][k] = max(out[f][k], 0)
		}
	}
	return out
}
