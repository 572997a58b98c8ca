//go:build cuda

package cuda

import (
	"errors"
	"fmt"
	"math"
	"unsafe"

	"gorgonia.org/cu"

	"github.com/lingbotmap/lingbotmap/engine/backend"
)

// unprojectThreads is UNPROJ_THREADS of kernels/unproject.cu.
const unprojectThreads = 256

var (
	_ backend.Unprojector      = (*gpu)(nil)
	_ backend.AsyncUnprojector = (*gpu)(nil)
)

// unprojectPlan is one frame's launch of kernels/unproject.cu: the
// kernels' arguments, the stride grid's pixels n and the blocks over them.
type unprojectPlan struct {
	args      []any
	n, blocks int
}

// planUnproject checks a frame's maps and camera and plans its launch.
func (g *gpu) planUnproject(depth, conf backend.Tensor, u backend.Unprojection) (unprojectPlan, error) {
	if err := checkUnprojection(u); err != nil {
		return unprojectPlan{}, err
	}
	if err := g.Err(); err != nil {
		return unprojectPlan{}, err
	}
	dt, ct := g.tensor(depth), g.tensor(conf)
	if n := u.Width * u.Height; dt.numel() != n || ct.numel() != n {
		return unprojectPlan{}, fmt.Errorf("cuda: Unproject: %d depth and %d confidence values for a %d×%d map", dt.numel(), ct.numel(), u.Width, u.Height)
	}
	gw := (u.Width + u.Stride - 1) / u.Stride
	gh := (u.Height + u.Stride - 1) / u.Stride
	n := gw * gh
	k, m := u.Intrinsics, u.CamToWorld
	return unprojectPlan{
		args: []any{dt.ptr(), ct.ptr(), u.Width, gw, n, u.Stride, u.DepthScale, u.ConfThreshold,
			k[0], k[1], k[2], k[3],
			m[0][0], m[0][1], m[0][2], m[0][3], m[1][0], m[1][1], m[1][2], m[1][3], m[2][0], m[2][1], m[2][2], m[2][3]},
		n: n, blocks: (n + unprojectThreads - 1) / unprojectThreads,
	}, nil
}

// launch queues the two kernels into a new scratch buffer: the counts per
// block, the total, then room for every sampled pixel's point (3 floats)
// and index. It returns the buffer and where the total is, the points
// right after it. Owner thread only.
func (g *gpu) launchUnproject(pl unprojectPlan) (*buffer, cu.DevicePtr, error) {
	buf, err := g.scratch(int64(pl.blocks+1+4*pl.n) * 4)
	if err != nil {
		return nil, 0, err
	}
	counts := buf.ptr
	total := counts + cu.DevicePtr(4*pl.blocks)
	pts := total + 4
	grid, block := [3]int{pl.blocks, 1, 1}, [3]int{unprojectThreads, 1, 1}
	if err := g.launch("unproject", "unproject_count", grid, block, 0, append(pl.args, counts)...); err != nil {
		g.pool.put(buf)
		return nil, 0, err
	}
	if err := g.launch("unproject", "unproject_write", grid, block, 0, append(pl.args, counts, pts, total)...); err != nil {
		g.pool.put(buf)
		return nil, 0, err
	}
	return buf, total, nil
}

// Unproject makes a frame's map points from its depth and confidence maps
// on the device (kernels/unproject.cu) and copies back only the kept ones:
// their count, then their coordinates and pixel indices in one copy.
func (g *gpu) Unproject(depth, conf backend.Tensor, u backend.Unprojection) ([]float32, []int32, error) {
	pl, err := g.planUnproject(depth, conf, u)
	if err != nil {
		return nil, nil, err
	}
	var xyz []float32
	var pix []int32
	var bad error
	g.run("Unproject", func() error {
		buf, total, err := g.launchUnproject(pl)
		if err != nil {
			return err
		}
		defer g.pool.put(buf)
		var cnt [1]int32
		if err := g.toHost(int32sAsFloats(cnt[:]), total); err != nil {
			return err
		}
		kept := int(cnt[0])
		if bad = checkKept(kept, pl.n); bad != nil {
			return nil
		}
		// the coordinates and then the pixel indices, in one copy
		all := make([]float32, 4*kept)
		if err := g.toHost(all, total+4); err != nil {
			return err
		}
		xyz, pix = splitPoints(all, kept)
		return nil
	})
	if err := g.Err(); err != nil {
		return nil, nil, err
	}
	if bad != nil {
		return nil, nil, bad
	}
	return xyz, pix, nil
}

// checkKept refuses a count of kept points that n pixels cannot give. It
// is not a device failure: the backend stays usable.
func checkKept(kept, n int) error {
	if kept < 0 || kept > n {
		return fmt.Errorf("cuda: Unproject: the device counted %d points for %d pixels", kept, n)
	}
	return nil
}

// splitPoints views kept points copied back (3·kept coordinates, then
// kept pixel indices' bits) as the coordinates and the indices.
func splitPoints(all []float32, kept int) ([]float32, []int32) {
	return all[: 3*kept : 3*kept], floatsAsInt32s(all[3*kept : 4*kept])
}

// StartUnproject queues Unproject's kernels and, behind them, one copy of
// the total and of every sampled pixel's room into a download slot
// (backend.AsyncUnprojector): the count is not known before the kernels
// ran, so the copy is the largest the frame can need, and no wait comes
// between the kernels and the copy. Without a free slot Wait copies as
// Unproject does, behind all the work queued by then.
func (g *gpu) StartUnproject(depth, conf backend.Tensor, u backend.Unprojection) backend.PendingPoints {
	p := &pendingPoints{g: g}
	if p.pl, p.err = g.planUnproject(depth, conf, u); p.err != nil {
		return p
	}
	g.run("StartUnproject", func() error {
		buf, total, err := g.launchUnproject(p.pl)
		if err != nil {
			return err
		}
		p.buf, p.src = buf, total
		p.slot, p.offs, err = g.startDownload([]cu.DevicePtr{total}, []int{1 + 4*p.pl.n})
		return err
	})
	return p
}

// pendingPoints are a frame's points queued by StartUnproject; the scratch
// buffer stays out of the pool until they are copied out.
type pendingPoints struct {
	g    *gpu
	pl   unprojectPlan
	err  error // a refused start
	buf  *buffer
	src  cu.DevicePtr // the total, the points after it
	slot *downSlot
	offs []int64
}

func (p *pendingPoints) Wait() ([]float32, []int32, error) {
	g := p.g
	if p.err != nil {
		return nil, nil, p.err
	}
	var xyz []float32
	var pix []int32
	var bad error
	ran := false
	g.run("WaitUnproject", func() error {
		ran = true
		if p.buf == nil {
			return nil // the start failed: the device's error is sticky
		}
		defer g.pool.put(p.buf)
		var all []float32
		if p.slot != nil {
			outs, err := g.waitDownload(p.slot, p.offs, []cu.DevicePtr{p.src}, []int{1 + 4*p.pl.n})
			if err != nil {
				return err
			}
			all = outs[0]
		} else {
			all = make([]float32, 1+4*p.pl.n)
			if err := g.toHost(all, p.src); err != nil {
				return err
			}
		}
		kept := int(floatsAsInt32s(all[:1])[0])
		if bad = checkKept(kept, p.pl.n); bad != nil {
			return nil
		}
		// copied into a slice of their own, so that the room of the
		// pixels not kept is not held with them
		pts := make([]float32, 4*kept)
		copy(pts, all[1:])
		xyz, pix = splitPoints(pts, kept)
		return nil
	})
	if !ran && p.slot != nil {
		// the call was refused (a sticky error): the slot's copy is
		// abandoned with the device
		_ = g.own.do(func() error {
			p.slot.inUse = false
			return nil
		})
	}
	if err := g.Err(); err != nil {
		return nil, nil, err
	}
	if bad != nil {
		return nil, nil, bad
	}
	return xyz, pix, nil
}

// checkUnprojection rejects sizes, strides and numbers the kernel cannot take.
func checkUnprojection(u backend.Unprojection) error {
	switch {
	case u.Width <= 0 || u.Height <= 0 || u.Width > math.MaxInt32/u.Height:
		return fmt.Errorf("cuda: Unproject: map size %d×%d", u.Width, u.Height)
	case u.Stride < 1:
		return fmt.Errorf("cuda: Unproject: stride %d, must be ≥ 1", u.Stride)
	case math.IsNaN(u.ConfThreshold) || math.IsInf(u.ConfThreshold, 0):
		return errors.New("cuda: Unproject: the confidence threshold is not a finite number")
	}
	return nil
}

// int32sAsFloats views xs as float32 storage, for copies that move bits.
func int32sAsFloats(xs []int32) []float32 {
	if len(xs) == 0 {
		return nil
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(&xs[0])), len(xs))
}

// floatsAsInt32s views bits copied into float32 storage as the int32s they
// are.
func floatsAsInt32s(xs []float32) []int32 {
	if len(xs) == 0 {
		return nil
	}
	return unsafe.Slice((*int32)(unsafe.Pointer(&xs[0])), len(xs))
}
