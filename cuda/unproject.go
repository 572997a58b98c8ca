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

var _ backend.Unprojector = (*gpu)(nil)

// Unproject makes a frame's map points from its depth and confidence maps
// on the device (kernels/unproject.cu) and copies back only the kept ones:
// their count, then their coordinates and pixel indices in one copy.
func (g *gpu) Unproject(depth, conf backend.Tensor, u backend.Unprojection) ([]float32, []int32, error) {
	if err := checkUnprojection(u); err != nil {
		return nil, nil, err
	}
	if err := g.Err(); err != nil {
		return nil, nil, err
	}
	dt, ct := g.tensor(depth), g.tensor(conf)
	if n := u.Width * u.Height; dt.numel() != n || ct.numel() != n {
		return nil, nil, fmt.Errorf("cuda: Unproject: %d depth and %d confidence values for a %d×%d map", dt.numel(), ct.numel(), u.Width, u.Height)
	}
	gw := (u.Width + u.Stride - 1) / u.Stride
	gh := (u.Height + u.Stride - 1) / u.Stride
	n := gw * gh
	blocks := (n + unprojectThreads - 1) / unprojectThreads
	k, m := u.Intrinsics, u.CamToWorld
	args := []any{dt.ptr(), ct.ptr(), u.Width, gw, n, u.Stride, u.DepthScale, u.ConfThreshold,
		k[0], k[1], k[2], k[3],
		m[0][0], m[0][1], m[0][2], m[0][3], m[1][0], m[1][1], m[1][2], m[1][3], m[2][0], m[2][1], m[2][2], m[2][3]}
	var xyz []float32
	var pix []int32
	var bad error
	g.run("Unproject", func() error {
		// counts per block, the total, then room for every sampled pixel's
		// point (3 floats) and index
		buf, err := g.scratch(int64(blocks+1+4*n) * 4)
		if err != nil {
			return err
		}
		defer g.pool.put(buf)
		counts := buf.ptr
		total := counts + cu.DevicePtr(4*blocks)
		pts := total + 4
		grid, block := [3]int{blocks, 1, 1}, [3]int{unprojectThreads, 1, 1}
		if err := g.launch("unproject", "unproject_count", grid, block, 0, append(args, counts)...); err != nil {
			return err
		}
		if err := g.launch("unproject", "unproject_write", grid, block, 0, append(args, counts, pts, total)...); err != nil {
			return err
		}
		var cnt [1]int32
		if err := g.toHost(int32sAsFloats(cnt[:]), total); err != nil {
			return err
		}
		kept := int(cnt[0])
		if kept < 0 || kept > n {
			// not a device failure: the backend stays usable
			bad = fmt.Errorf("cuda: Unproject: the device counted %d points for %d pixels", kept, n)
			return nil
		}
		// the coordinates and then the pixel indices, in one copy
		all := make([]float32, 4*kept)
		if err := g.toHost(all, pts); err != nil {
			return err
		}
		xyz = all[: 3*kept : 3*kept]
		pix = floatsAsInt32s(all[3*kept:])
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
