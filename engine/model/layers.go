package model

import (
	"fmt"
	"math"

	"github.com/lingbotmap/lingbotmap/engine/backend"
	"github.com/lingbotmap/lingbotmap/engine/weights"
)

// This file holds the modules shared by DINO, the aggregator and the camera
// head: Linear, LayerNorm and the pre-norm transformer block. Each loads itself
// from a weights cursor positioned at its own key prefix, so that Go names line
// up with the checkpoint's module tree.

// linear is y = x·Wᵀ + b.
type linear struct {
	w, b    backend.Tensor
	in, out int
}

// loadLinear reads name.weight [out, in] and name.bias [out]; out or in may be
// -1 to take them from the checkpoint.
func loadLinear(be backend.Backend, c *weights.Cursor, name string, out, in int, prec backend.Precision) (linear, error) {
	sub := c.Sub(name)
	shape, err := sub.Shape("weight")
	if err != nil {
		return linear{}, err
	}
	if len(shape) != 2 {
		return linear{}, fmt.Errorf("weights: %q has shape %v, want a matrix [out, in]", sub.Key("weight"), shape)
	}
	w, err := sub.Get("weight", out, in)
	if err != nil {
		return linear{}, err
	}
	out, in = shape[0], shape[1]
	b, err := sub.Get("bias", out)
	if err != nil {
		return linear{}, err
	}
	return linear{
		w:   be.Weight(sub.Key("weight"), w, prec, out, in),
		b:   be.Weight(sub.Key("bias"), b, prec, out),
		in:  in,
		out: out,
	}, nil
}

func (l linear) forward(be backend.Backend, x backend.Tensor, act backend.Activation) backend.Tensor {
	return be.Linear(x, l.w, l.b, act)
}

// layerNorm normalises the last dimension; w and b are nil when not affine.
type layerNorm struct {
	w, b backend.Tensor
	eps  float32
}

func loadLayerNorm(be backend.Backend, c *weights.Cursor, name string, dim int, eps float32, prec backend.Precision) (layerNorm, error) {
	sub := c.Sub(name)
	w, err := sub.Get("weight", dim)
	if err != nil {
		return layerNorm{}, err
	}
	b, err := sub.Get("bias", dim)
	if err != nil {
		return layerNorm{}, err
	}
	return layerNorm{
		w:   be.Weight(sub.Key("weight"), w, prec, dim),
		b:   be.Weight(sub.Key("bias"), b, prec, dim),
		eps: eps,
	}, nil
}

func (n layerNorm) forward(be backend.Backend, x backend.Tensor) backend.Tensor {
	return be.LayerNorm(x, n.w, n.b, n.eps)
}

// loadVector reads a 1-D parameter of length dim (LayerScale gammas).
func loadVector(be backend.Backend, c *weights.Cursor, name string, dim int, prec backend.Precision) (backend.Tensor, error) {
	v, err := c.Get(name, dim)
	if err != nil {
		return nil, err
	}
	return be.Weight(c.Key(name), v, prec, dim), nil
}

// blockConfig describes one family of transformer blocks.
type blockConfig struct {
	dim     int
	headDim int
	normEps float32 // norm1/norm2
	qkNorm  bool    // per-head LayerNorm on q and k (eps 1e-5), aggregator only
	prec    backend.Precision
}

// block is a pre-norm transformer block with LayerScale on both branches:
// x += γ1 ⊙ proj(attn(LN1(x))); x += γ2 ⊙ fc2(GELU(fc1(LN2(x)))).
// The attention itself is left to the caller (dense, paged or cached), which
// receives q, k, v shaped [..., N, H, D].
type block struct {
	norm1, norm2   layerNorm
	qkv, proj      linear
	qNorm, kNorm   layerNorm
	hasQKNorm      bool
	ls1, ls2       backend.Tensor
	fc1, fc2       linear
	dim, heads, hd int
}

func loadBlock(be backend.Backend, c *weights.Cursor, cfg blockConfig) (*block, error) {
	e := cfg.dim
	if cfg.headDim <= 0 || e%cfg.headDim != 0 {
		return nil, fmt.Errorf("model: block width %d is not a multiple of the head size %d", e, cfg.headDim)
	}
	b := &block{dim: e, heads: e / cfg.headDim, hd: cfg.headDim, hasQKNorm: cfg.qkNorm}
	var err error
	if b.norm1, err = loadLayerNorm(be, c, "norm1", e, cfg.normEps, cfg.prec); err != nil {
		return nil, err
	}
	if b.norm2, err = loadLayerNorm(be, c, "norm2", e, cfg.normEps, cfg.prec); err != nil {
		return nil, err
	}
	attn := c.Sub("attn")
	if b.qkv, err = loadLinear(be, attn, "qkv", 3*e, e, cfg.prec); err != nil {
		return nil, err
	}
	if b.proj, err = loadLinear(be, attn, "proj", e, e, cfg.prec); err != nil {
		return nil, err
	}
	if cfg.qkNorm {
		if b.qNorm, err = loadLayerNorm(be, attn, "q_norm", cfg.headDim, 1e-5, cfg.prec); err != nil {
			return nil, err
		}
		if b.kNorm, err = loadLayerNorm(be, attn, "k_norm", cfg.headDim, 1e-5, cfg.prec); err != nil {
			return nil, err
		}
	}
	if b.ls1, err = loadVector(be, c.Sub("ls1"), "gamma", e, cfg.prec); err != nil {
		return nil, err
	}
	if b.ls2, err = loadVector(be, c.Sub("ls2"), "gamma", e, cfg.prec); err != nil {
		return nil, err
	}
	mlp := c.Sub("mlp")
	if b.fc1, err = loadLinear(be, mlp, "fc1", -1, e, cfg.prec); err != nil {
		return nil, err
	}
	if b.fc2, err = loadLinear(be, mlp, "fc2", e, b.fc1.out, cfg.prec); err != nil {
		return nil, err
	}
	return b, nil
}

// scale is the softmax temperature 1/√D.
func (b *block) scale() float32 { return float32(1 / math.Sqrt(float64(b.hd))) }

// qkv runs norm1, the qkv projection and the optional qk-norm on x [..., N, E]
// and returns q, k, v as [..., N, H, D].
func (b *block) qkvHeads(be backend.Backend, x backend.Tensor) (q, k, v backend.Tensor) {
	xs := x.Shape()
	lead := xs[:len(xs)-1]
	hshape := append(append([]int{}, lead...), b.heads, b.hd)

	h := b.norm1.forward(be, x)
	qkv := b.qkv.forward(be, h, backend.ActNone)
	be.Free(h)
	q = be.Reshape(be.SliceCols(qkv, 0, b.dim), hshape...)
	k = be.Reshape(be.SliceCols(qkv, b.dim, b.dim), hshape...)
	v = be.Reshape(be.SliceCols(qkv, 2*b.dim, b.dim), hshape...)
	be.Free(qkv)
	if b.hasQKNorm {
		qn := b.qNorm.forward(be, q)
		kn := b.kNorm.forward(be, k)
		be.Free(q)
		be.Free(k)
		q, k = qn, kn
	}
	return q, k, v
}

// finish adds the attention branch (attn [..., N, H, D]) and the MLP branch to x.
// It frees attn; x is left to the caller.
func (b *block) finish(be backend.Backend, x, attn backend.Tensor) backend.Tensor {
	a := be.Reshape(attn, x.Shape()...)
	p := b.proj.forward(be, a, backend.ActNone)
	be.Free(a)
	x1 := be.AddScaled(x, p, b.ls1)
	be.Free(p)

	h := b.norm2.forward(be, x1)
	m := b.fc1.forward(be, h, backend.ActGELU)
	be.Free(h)
	o := b.fc2.forward(be, m, backend.ActNone)
	be.Free(m)
	x2 := be.AddScaled(x1, o, b.ls2)
	be.Free(o)
	be.Free(x1)
	return x2
}

// countBlocks counts the consecutive numbered children "0", "1", … of c that
// have the given tensor.
func countBlocks(c *weights.Cursor, probe string) int {
	n := 0
	for c.Has(fmt.Sprintf("%d.%s", n, probe)) {
		n++
	}
	return n
}
