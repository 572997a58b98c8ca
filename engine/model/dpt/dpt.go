// Package dpt is LingBot-Map's DPT head (reference-model.md §11): it turns four
// aggregator layers into a dense map at image resolution — depth and its
// confidence for "depth_head", world points and their confidence for
// "point_head". It is written once against backend.Backend.
//
// Shapes: S frames, P tokens per frame of which the patch tokens start at
// patchStart, gh×gw patch grid, C2 = 2·embed dim, oc_l the per-level channels,
// F the fusion width ("features").
//
//	per level l: [S, gh·gw, C2] → LayerNorm → 1×1 project → [S, oc_l, gh, gw]
//	             + pos embed → resize (×4, ×2, ×1, ÷2) → layer{l+1}_rn 3×3 → F
//	fusion:      refinenet4 → 3 → 2 → 1 (each ends at the next level's size;
//	             refinenet1 doubles) → [S, F, 8gh, 8gw]
//	output:      output_conv1 3×3 → bilinear to imgH×imgW → + pos embed
//	             → output_conv2 (3×3, ReLU, 1×1) → [S, outDim, imgH, imgW]
//
// The result is raw: the caller applies exp / 1+exp / sign·expm1 per channel.
package dpt

import (
	"fmt"
	"sync"

	"github.com/lingbotmap/lingbotmap/engine/backend"
	"github.com/lingbotmap/lingbotmap/engine/weights"
)

const (
	levels = 4
	// lnEps is the head's LayerNorm epsilon (PyTorch's default).
	lnEps = 1e-5
	// chunkFrames bounds the frames run through the head at once, as the
	// reference's frames_chunk_size (8) does; it only limits activation
	// memory, since frames do not mix in the head. Two rather than eight:
	// at 518×378 a frame's maps reach ~0.3 GB (the 128 channels at full
	// resolution before output_conv2), and phase 1's eight frames at once
	// were the GPU's peak.
	chunkFrames = 2
)

type conv struct {
	w, b   backend.Tensor // b may be nil
	stride int
	pad    int
}

func (c conv) apply(be backend.Backend, x backend.Tensor) backend.Tensor {
	return be.Conv2D(x, c.w, c.b, c.stride, c.pad)
}

// rcu is a ResidualConvUnit. The reference applies an in-place ReLU to its
// input before the first conv, so the skip connection adds relu(x), not x.
type rcu struct{ conv1, conv2 conv }

func (r rcu) forward(be backend.Backend, x backend.Tensor) backend.Tensor {
	a := be.Unary(backend.OpReLU, x)
	h := r.conv1.apply(be, a)
	h2 := be.Unary(backend.OpReLU, h)
	be.Free(h)
	h = r.conv2.apply(be, h2)
	be.Free(h2)
	out := be.Add(h, a)
	be.Free(h)
	be.Free(a)
	return out
}

// fusion is a FeatureFusionBlock ("refinenetN").
type fusion struct {
	res1    *rcu // nil in refinenet4
	res2    rcu
	outConv conv
}

// forward fuses prev (the coarser path) with skip (this level; nil for
// refinenet4), resizes to outH×outW (bilinear, align_corners) and projects.
func (f fusion) forward(be backend.Backend, prev, skip backend.Tensor, outH, outW int) backend.Tensor {
	x := prev
	if f.res1 != nil {
		r := f.res1.forward(be, skip)
		x = be.Add(prev, r)
		be.Free(r)
	}
	y := f.res2.forward(be, x)
	if x != prev {
		be.Free(x)
	}
	z := be.ResizeBilinear(y, outH, outW, true)
	be.Free(y)
	out := f.outConv.apply(be, z)
	be.Free(z)
	return out
}

// Head is a loaded DPT head.
type Head struct {
	dimIn      int            // C2
	outCh      [levels]int    // oc_l
	features   int            // F
	headCh     int            // output_conv1 channels (F/2 in the reference)
	outDim     int            // 2 (depth, conf) or 4 (xyz, conf)
	normW      backend.Tensor // [C2]
	normB      backend.Tensor
	projW      [levels]backend.Tensor // [oc_l, C2] (1×1 conv as a linear layer)
	projB      [levels]backend.Tensor
	resize0    conv // ConvTranspose k4 s4 (stride holds k)
	resize1    conv // ConvTranspose k2 s2
	resize3    conv // Conv k3 s2 p1
	rn         [levels]conv
	refine     [levels]fusion // refine[l] is refinenet{l+1}
	outConv1   conv
	outConv2a  conv
	outConv2b  conv
	posEmbedMu sync.Mutex
	posEmbeds  map[posKey]backend.Tensor
}

type posKey struct {
	be                  backend.Backend
	c, h, w, imgH, imgW int
}

// OutDim is the number of raw output channels (2 for depth, 4 for points).
func (h *Head) OutDim() int { return h.outDim }

// Load reads a head from c positioned at its module ("depth_head" or
// "point_head"). All sizes come from the weight shapes.
func Load(be backend.Backend, c *weights.Cursor) (*Head, error) {
	h := &Head{posEmbeds: map[posKey]backend.Tensor{}}
	ld := loader{be: be}

	sh, err := c.Shape("norm.weight")
	if err != nil {
		return nil, fmt.Errorf("dpt: %w", err)
	}
	if len(sh) != 1 || sh[0] <= 0 {
		return nil, fmt.Errorf("dpt: %s has shape %v, want one positive dimension", c.Key("norm.weight"), sh)
	}
	h.dimIn = sh[0]
	h.normW = ld.get(c, "norm.weight", h.dimIn)
	h.normB = ld.get(c, "norm.bias", h.dimIn)

	for l := range levels {
		p := c.Sub("projects").Sub(fmt.Sprint(l))
		sh, err := p.Shape("weight")
		if err != nil {
			return nil, fmt.Errorf("dpt: %w", err)
		}
		if len(sh) != 4 || sh[0] <= 0 {
			return nil, fmt.Errorf("dpt: %s has shape %v, want [out, %d, 1, 1]", p.Key("weight"), sh, h.dimIn)
		}
		h.outCh[l] = sh[0]
		h.projW[l] = ld.getAs(p, "weight", []int{h.outCh[l], h.dimIn, 1, 1}, h.outCh[l], h.dimIn)
		h.projB[l] = ld.get(p, "bias", h.outCh[l])
	}

	rs := c.Sub("resize_layers")
	oc := h.outCh
	h.resize0 = conv{w: ld.get(rs.Sub("0"), "weight", oc[0], oc[0], 4, 4), b: ld.get(rs.Sub("0"), "bias", oc[0]), stride: 4}
	h.resize1 = conv{w: ld.get(rs.Sub("1"), "weight", oc[1], oc[1], 2, 2), b: ld.get(rs.Sub("1"), "bias", oc[1]), stride: 2}
	h.resize3 = conv{w: ld.get(rs.Sub("3"), "weight", oc[3], oc[3], 3, 3), b: ld.get(rs.Sub("3"), "bias", oc[3]), stride: 2, pad: 1}

	sc := c.Sub("scratch")
	sh, err = sc.Sub("layer1_rn").Shape("weight")
	if err != nil {
		return nil, fmt.Errorf("dpt: %w", err)
	}
	if len(sh) != 4 || sh[0] <= 0 {
		return nil, fmt.Errorf("dpt: %s has shape %v, want [features, %d, 3, 3]", sc.Sub("layer1_rn").Key("weight"), sh, oc[0])
	}
	f := sh[0]
	h.features = f
	for l := range levels {
		h.rn[l] = conv{w: ld.get(sc.Sub(fmt.Sprintf("layer%d_rn", l+1)), "weight", f, oc[l], 3, 3), stride: 1, pad: 1}
	}
	conv3 := func(m *weights.Cursor) conv {
		return conv{w: ld.get(m, "weight", f, f, 3, 3), b: ld.get(m, "bias", f), stride: 1, pad: 1}
	}
	for l := range levels {
		m := sc.Sub(fmt.Sprintf("refinenet%d", l+1))
		var fu fusion
		if l != levels-1 { // refinenet4 has no first residual unit
			u := m.Sub("resConfUnit1")
			fu.res1 = &rcu{conv1: conv3(u.Sub("conv1")), conv2: conv3(u.Sub("conv2"))}
		}
		u := m.Sub("resConfUnit2")
		fu.res2 = rcu{conv1: conv3(u.Sub("conv1")), conv2: conv3(u.Sub("conv2"))}
		fu.outConv = conv{w: ld.get(m.Sub("out_conv"), "weight", f, f, 1, 1), b: ld.get(m.Sub("out_conv"), "bias", f), stride: 1}
		h.refine[l] = fu
	}

	oc1 := sc.Sub("output_conv1")
	if sh, err = oc1.Shape("weight"); err != nil {
		return nil, fmt.Errorf("dpt: %w", err)
	}
	if len(sh) != 4 || sh[0] <= 0 || sh[0]%4 != 0 {
		return nil, fmt.Errorf("dpt: %s has shape %v, want [c, %d, 3, 3] with c a multiple of 4 (positional embedding)", oc1.Key("weight"), sh, f)
	}
	h.headCh = sh[0]
	h.outConv1 = conv{w: ld.get(oc1, "weight", h.headCh, f, 3, 3), b: ld.get(oc1, "bias", h.headCh), stride: 1, pad: 1}

	o2a, o2b := sc.Sub("output_conv2").Sub("0"), sc.Sub("output_conv2").Sub("2")
	shA, errA := o2a.Shape("weight")
	shB, errB := o2b.Shape("weight")
	if errA != nil || errB != nil {
		return nil, fmt.Errorf("dpt: output_conv2: %w", firstErr(errA, errB))
	}
	if len(shA) != 4 || len(shB) != 4 || shA[0] <= 0 || shB[0] <= 0 {
		return nil, fmt.Errorf("dpt: output_conv2 weights have shapes %v and %v, want [c, %d, 3, 3] and [out, c, 1, 1]", shA, shB, h.headCh)
	}
	mid := shA[0]
	h.outDim = shB[0]
	h.outConv2a = conv{w: ld.get(o2a, "weight", mid, h.headCh, 3, 3), b: ld.get(o2a, "bias", mid), stride: 1, pad: 1}
	h.outConv2b = conv{w: ld.get(o2b, "weight", h.outDim, mid, 1, 1), b: ld.get(o2b, "bias", h.outDim), stride: 1}

	for l := range levels {
		if oc[l]%4 != 0 {
			return nil, fmt.Errorf("dpt: level %d has %d channels; the positional embedding needs a multiple of 4", l, oc[l])
		}
	}
	if ld.err != nil {
		return nil, fmt.Errorf("dpt: %w", ld.err)
	}
	return h, nil
}

func firstErr(errs ...error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}

// loader reads weights into backend tensors and keeps the first error, so that
// Load reads as a list of the checkpoint's tensors.
type loader struct {
	be  backend.Backend
	err error
}

func (l *loader) get(c *weights.Cursor, name string, shape ...int) backend.Tensor {
	return l.getAs(c, name, shape, shape...)
}

// getAs checks the stored shape and gives the tensor another shape of the same size.
func (l *loader) getAs(c *weights.Cursor, name string, stored []int, shape ...int) backend.Tensor {
	if l.err != nil {
		return nil
	}
	data, err := c.Get(name, stored...)
	if err != nil {
		l.err = err
		return nil
	}
	return l.be.Weight(c.Key(name), data, backend.HeadConv, shape...)
}
