package model

import (
	"fmt"

	"github.com/lingbotmap/lingbotmap/engine/backend"
	"github.com/lingbotmap/lingbotmap/engine/model/dpt"
	"github.com/lingbotmap/lingbotmap/engine/weights"
)

// The dense heads (reference-model.md §11): the depth head always exists in
// the released checkpoint, the point head only in models built with it (the
// tiny golden model has one). Their raw maps get the reference's activations
// here: depth exp, point sign·expm1, confidences 1+exp.

const dptLevels = 4

type heads struct {
	depth, point *dpt.Head
}

func loadHeads(be backend.Backend, root *weights.Cursor, selected int) (heads, error) {
	var hd heads
	for _, spec := range []struct {
		name string
		dst  **dpt.Head
		out  int
	}{{"depth_head", &hd.depth, 2}, {"point_head", &hd.point, 4}} {
		if !root.Has(spec.name + ".norm.weight") {
			continue
		}
		if selected != dptLevels {
			return heads{}, fmt.Errorf("the %s needs %d selected aggregator layers, the options select %d", spec.name, dptLevels, selected)
		}
		h, err := dpt.Load(be, root.Sub(spec.name))
		if err != nil {
			return heads{}, fmt.Errorf("%s: %w", spec.name, err)
		}
		if h.OutDim() != spec.out {
			return heads{}, fmt.Errorf("%s has %d output channels, want %d", spec.name, h.OutDim(), spec.out)
		}
		*spec.dst = h
	}
	return hd, nil
}

// run fills out's dense maps from the selected layers [S, P, 2E].
func (hd heads) run(be backend.Backend, layers []backend.Tensor, patchStart, gh, gw, h, w int, out *Output) error {
	s := layers[0].Shape()[0]
	if hd.depth != nil {
		raw, err := hd.depth.Forward(be, layers, patchStart, gh, gw, h, w)
		if err != nil {
			return fmt.Errorf("model: depth head: %w", err)
		}
		out.Depth = activatePlanes(be, raw, s, 0, 1, backend.OpExp)
		out.DepthConf = activatePlanes(be, raw, s, 1, 1, backend.OpExpP1)
		be.Free(raw)
	}
	if hd.point != nil {
		raw, err := hd.point.Forward(be, layers, patchStart, gh, gw, h, w)
		if err != nil {
			return fmt.Errorf("model: point head: %w", err)
		}
		out.Points = activatePlanes(be, raw, s, 0, 3, backend.OpInvLog)
		out.PointsConf = activatePlanes(be, raw, s, 3, 1, backend.OpExpP1)
		be.Free(raw)
	}
	return nil
}

// activatePlanes applies op to channels [c0, c0+n) of raw [S, C, H, W] and
// returns them per frame, channels last ([H·W·n]).
func activatePlanes(be backend.Backend, raw backend.Tensor, s, c0, n int, op backend.UnaryOp) [][]float32 {
	sh := raw.Shape()
	c, hw := sh[1], sh[2]*sh[3]
	flat := be.Reshape(raw, s*c, hw)
	out := make([][]float32, s)
	for f := 0; f < s; f++ {
		planes := be.SliceRows(flat, f*c+c0, n)
		act := be.Unary(op, planes)
		host := be.ToHost(act)
		be.Free(planes)
		be.Free(act)
		if n == 1 {
			out[f] = host
			continue
		}
		hwc := make([]float32, hw*n)
		for ch := 0; ch < n; ch++ {
			for i, v := range host[ch*hw : (ch+1)*hw] {
				hwc[i*n+ch] = v
			}
		}
		out[f] = hwc
	}
	return out
}
