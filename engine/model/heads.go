package model

import (
	"fmt"
	"sync"

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

// run queues the dense heads on the selected layers [S, P, 2E] of frames
// [f0, f0+S) of a call of total frames; out's maps are filled when dl is
// fetched. keep keeps the depth and confidence maps on the device as well
// (Step.KeepDepth).
func (hd heads) run(be backend.Backend, layers []backend.Tensor, patchStart, gh, gw, h, w, f0, total int, keep bool, dl *downloads, out *Output) error {
	s := layers[0].Shape()[0]
	if hd.depth != nil {
		raw, err := hd.depth.Forward(be, layers, patchStart, gh, gw, h, w)
		if err != nil {
			return fmt.Errorf("model: depth head: %w", err)
		}
		var devDepth, devConf *[]backend.Tensor
		if keep {
			devDepth, devConf = &out.DeviceDepth, &out.DeviceConf
		}
		activatePlanes(be, raw, s, f0, total, 0, 1, backend.OpExp, dl, &out.Depth, devDepth)
		activatePlanes(be, raw, s, f0, total, 1, 1, backend.OpExpP1, dl, &out.DepthConf, devConf)
		be.Free(raw)
	}
	if hd.point != nil {
		raw, err := hd.point.Forward(be, layers, patchStart, gh, gw, h, w)
		if err != nil {
			return fmt.Errorf("model: point head: %w", err)
		}
		activatePlanes(be, raw, s, f0, total, 0, 3, backend.OpInvLog, dl, &out.Points, nil)
		activatePlanes(be, raw, s, f0, total, 3, 1, backend.OpExpP1, dl, &out.PointsConf, nil)
		be.Free(raw)
	}
	return nil
}

// activatePlanes applies op to channels [c0, c0+n) of raw [S, C, H, W],
// frames [f0, f0+S) of total; once dl is fetched, *dst holds them per frame,
// channels last ([H·W·n]); with dev set, (*dev)[f] keeps each frame's
// tensor on the device too.
func activatePlanes(be backend.Backend, raw backend.Tensor, s, f0, total, c0, n int, op backend.UnaryOp, dl *downloads, dst *[][]float32, dev *[]backend.Tensor) {
	sh := raw.Shape()
	c, hw := sh[1], sh[2]*sh[3]
	flat := be.Reshape(raw, s*c, hw)
	if len(*dst) != total {
		*dst = make([][]float32, total)
	}
	if dev != nil && len(*dev) != total {
		*dev = make([]backend.Tensor, total)
	}
	for f := 0; f < s; f++ {
		planes := be.SliceRows(flat, f*c+c0, n)
		act := be.Unary(op, planes)
		be.Free(planes)
		if dev != nil {
			(*dev)[f0+f] = act
		}
		dl.add(act, dev != nil, func(host []float32) {
			if n == 1 {
				(*dst)[f0+f] = host
				return
			}
			(*dst)[f0+f] = toChannelsLast(host, hw, n)
		})
	}
}

// toChannelsLast turns n planes of hw values into hw pixels of n values, in
// four goroutines: a frame's points are ~200 000 pixels, and the GPU waits
// for the host while this runs.
func toChannelsLast(planes []float32, hw, n int) []float32 {
	out := make([]float32, hw*n)
	const parts = 4
	var wg sync.WaitGroup
	for part := 0; part < parts; part++ {
		lo, hi := hw*part/parts, hw*(part+1)/parts
		wg.Go(func() {
			for ch := 0; ch < n; ch++ {
				src := planes[ch*hw : (ch+1)*hw]
				for i := lo; i < hi; i++ {
					out[i*n+ch] = src[i]
				}
			}
		})
	}
	wg.Wait()
	return out
}

// downloads are device results whose copies to the host wait until all of a
// call's work is queued: each copy synchronises, and the device would
// otherwise idle while the host converts one head's output before queueing
// the next head.
type downloads []download

type download struct {
	t    backend.Tensor
	keep bool // the Output keeps t on the device (Step.KeepDepth)
	done func([]float32)
}

func (d *downloads) add(t backend.Tensor, keep bool, done func([]float32)) {
	*d = append(*d, download{t, keep, done})
}

// fetch copies every result to the host, hands it on and frees it unless
// the Output keeps it.
func (d *downloads) fetch(be backend.Backend) {
	ts := make([]backend.Tensor, len(*d))
	for i, x := range *d {
		ts[i] = x.t
	}
	hosts := backend.Download(be, ts...)
	for i, x := range *d {
		if !x.keep {
			be.Free(x.t)
		}
		x.done(hosts[i])
	}
	*d = nil
}

// inflight are a call's copies to the host queued without waiting
// (Step.DeferFetch).
type inflight struct {
	dl downloads
	p  backend.Pending
}

// start queues the copies of every result and hands them over in flight.
func (d *downloads) start(be backend.Backend) inflight {
	ts := make([]backend.Tensor, len(*d))
	for i, x := range *d {
		ts[i] = x.t
	}
	f := inflight{dl: *d, p: backend.StartDownload(be, ts...)}
	*d = nil
	return f
}

// finish waits for the copies, hands each result on and frees it unless
// the Output keeps it.
func (f *inflight) finish(be backend.Backend) {
	hosts := f.p.Wait()
	for i, x := range f.dl {
		if !x.keep {
			be.Free(x.t)
		}
		x.done(hosts[i])
	}
	f.dl = nil
}

// free waits for the copies (their memory is the backend's until then)
// and drops them with their tensors, kept ones too.
func (f *inflight) free(be backend.Backend) {
	f.p.Wait()
	for _, x := range f.dl {
		be.Free(x.t)
	}
	f.dl = nil
}

// free drops the queued results (a call that failed half way), kept ones
// too: the Output they were for is never handed out.
func (d *downloads) free(be backend.Backend, out *Output) {
	for _, x := range *d {
		be.Free(x.t)
	}
	*d = nil
	out.DeviceDepth, out.DeviceConf = nil, nil
}
