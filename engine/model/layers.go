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
	return loadLinearScaled(be, c, name, out, in, prec, nil)
}

// loadLinearScaled is loadLinear with output row m of the weight and the bias
// multiplied by gamma[m] before upload (nil: unscaled), so that the layer
// computes γ ⊙ (x·Wᵀ + b): a LayerScale folded into the GEMM.
func loadLinearScaled(be backend.Backend, c *weights.Cursor, name string, out, in int, prec backend.Precision, gamma []float32) (linear, error) {
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
	if gamma != nil {
		if len(gamma) != out {
			return linear{}, fmt.Errorf("model: %d LayerScale values for the %d outputs of %q", len(gamma), out, sub.Key("weight"))
		}
		w, b = scaleRows(w, gamma, in), scaleRows(b, gamma, 1)
	}
	return linear{
		w:   be.Weight(sub.Key("weight"), w, prec, out, in),
		b:   be.Weight(sub.Key("bias"), b, prec, out),
		in:  in,
		out: out,
	}, nil
}

// scaleRows returns a copy of the [len(s), n] matrix a with row m multiplied
// by s[m]; a is the store's data and is left unchanged.
func scaleRows(a, s []float32, n int) []float32 {
	out := make([]float32, len(a))
	for m, g := range s {
		for j := m * n; j < (m+1)*n; j++ {
			out[j] = g * a[j]
		}
	}
	return out
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

// linear is l applied to the normalised x where nothing else reads the
// normalised values: one backend.NormLinear, so a backend need not keep
// them in every form.
func (n layerNorm) linear(be backend.Backend, x backend.Tensor, l linear, act backend.Activation) backend.Tensor {
	return backend.NormLinear(be, x, n.w, n.b, n.eps, l.w, l.b, act)
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
// x += γ1 ⊙ proj(attn(LN1(x))); x += γ2 ⊙ fc2(GELU(fc1(LN2(x)))). γ1 and γ2
// are folded into proj and fc2 at load.
// The attention itself is left to the caller (dense, paged or cached), which
// receives q, k, v shaped [..., N, H, D].
type block struct {
	norm1, norm2   layerNorm
	qkv, proj      linear
	qNorm, kNorm   layerNorm
	hasQKNorm      bool
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
	// LayerScale is folded into the branch's last projection (see finish);
	// the gammas are still read, so the checkpoint's shapes and keys are checked.
	ls1, err := c.Sub("ls1").Get("gamma", e)
	if err != nil {
		return nil, err
	}
	if b.proj, err = loadLinearScaled(be, attn, "proj", e, e, cfg.prec, ls1); err != nil {
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
	mlp := c.Sub("mlp")
	if b.fc1, err = loadLinear(be, mlp, "fc1", -1, e, cfg.prec); err != nil {
		return nil, err
	}
	ls2, err := c.Sub("ls2").Get("gamma", e)
	if err != nil {
		return nil, err
	}
	if b.fc2, err = loadLinearScaled(be, mlp, "fc2", e, b.fc1.out, cfg.prec, ls2); err != nil {
		return nil, err
	}
	return b, nil
}

// scale is the softmax temperature 1/√D.
func (b *block) scale() float32 { return float32(1 / math.Sqrt(float64(b.hd))) }

// qkvHeads runs norm1 and the qkv projection on x [..., N, E] and splits the
// result into q, k, v [..., N, H, D], all in one backend.NormQKV, whose split
// also applies the optional qk-norm and, when cos and sin [N, D/2] are set,
// the RoPE of q and k (nil tables: no rotation). kvUse says what reads k and
// v (backend.KVUse): a backend may then write only the forms those read.
func (b *block) qkvHeads(be backend.Backend, x, cos, sin backend.Tensor, pairing backend.RoPEPairing, kvUse backend.KVUse) (q, k, v backend.Tensor) {
	return backend.NormQKV(be, x, b.norm1.w, b.norm1.b, b.norm1.eps, b.qkv.w, b.qkv.b, backend.QKVParams{
		Heads: b.heads, HeadDim: b.hd,
		Norm: b.hasQKNorm, QW: b.qNorm.w, QB: b.qNorm.b, KW: b.kNorm.w, KB: b.kNorm.b, Eps: b.qNorm.eps,
		Cos: cos, Sin: sin, Pairing: pairing, KVUse: kvUse,
	})
}

// finish adds the attention branch (attn [..., N, H, D]) and the MLP branch to x,
// each as one GEMM with the residual (proj and fc2 carry the LayerScale).
// It frees attn; x is left to the caller.
func (b *block) finish(be backend.Backend, x, attn backend.Tensor) backend.Tensor {
	a := be.Reshape(attn, x.Shape()...)
	x1 := be.LinearAdd(a, b.proj.w, b.proj.b, x)
	be.Free(a)

	m := b.norm2.linear(be, x1, b.fc1, backend.ActGELU)
	x2 := be.LinearAdd(m, b.fc2.w, b.fc2.b, x1)
	be.Free(m)
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
