package geom

import (
	"fmt"
	"math"
	"slices"
)

// Point is a coloured world point: the element of clouds, maps and PLY files.
type Point struct {
	X, Y, Z float32
	R, G, B uint8
}

// Grey is the colour of points from a frame without colours.
const Grey = 128

// DepthFrame is one frame's depth map with everything unprojection needs.
type DepthFrame struct {
	Width, Height int
	Depth         []float32 // Height·Width, row-major
	// Conf is the per-pixel confidence (Height·Width); nil means none, and
	// then no confidence filter applies.
	Conf []float32
	// RGB is the frame's colour (3·Height·Width, HWC); nil gives Grey points.
	RGB        []uint8
	Intrinsics Intrinsics // at Width×Height
	CamToWorld Mat4
	// Kept, when set, are the frame's points made ahead for Kept.Filter
	// (KeptPoints); consumers use them instead of ConfidentPoints when their
	// filter is that one.
	Kept *KeptPoints
}

// Check reports sizes that disagree and unusable intrinsics.
func (f *DepthFrame) Check() error {
	n := f.Width * f.Height
	if f.Width <= 0 || f.Height <= 0 || len(f.Depth) != n || (f.Conf != nil && len(f.Conf) != n) || (f.RGB != nil && len(f.RGB) != 3*n) {
		return fmt.Errorf("geom: %d depth, %d confidence and %d colour values for a %d×%d image",
			len(f.Depth), len(f.Conf), len(f.RGB), f.Width, f.Height)
	}
	if err := CheckIntrinsics(f.Intrinsics); err != nil {
		return fmt.Errorf("geom: %w", err)
	}
	return nil
}

// PointFilter chooses the pixels of a depth map that become map points.
type PointFilter struct {
	// ConfThreshold: a pixel is kept when its confidence is above it (strictly).
	ConfThreshold float64
	// Stride: every Stride-th pixel in both directions, starting at (0, 0); ≥ 1.
	Stride int
}

// Check rejects a stride below 1 and a threshold that is not a number.
func (p PointFilter) Check() error {
	if p.Stride < 1 {
		return fmt.Errorf("geom: point stride must be ≥ 1, not %d", p.Stride)
	}
	if math.IsNaN(p.ConfThreshold) || math.IsInf(p.ConfThreshold, 0) {
		return fmt.Errorf("geom: confidence threshold must be a finite number, not %g", p.ConfThreshold)
	}
	return nil
}

func validDepth(d float64) bool { return d > 0 && !math.IsInf(d, 0) }

// Unproject lifts pixel (u, v) at depth d into the world, as the reference's
// viewer does: X = ((u−cx)/fx·d, (v−cy)/fy·d, d) in the camera (no half-pixel
// shift), camToWorld·X in the world. It checks nothing: see ConfidentPoints
// and UnprojectMap for checked use.
func Unproject(u, v int, d float64, k Intrinsics, camToWorld Mat4) [3]float64 {
	x := (float64(u) - k[2]) / k[0] * d
	y := (float64(v) - k[3]) / k[1] * d
	return Apply(camToWorld, [3]float64{x, y, d})
}

// UnprojectMap lifts a whole w×h depth map (row-major) to world points, three
// float32 per pixel (HWC xyz), by Unproject. Pixels whose depth is not finite
// and positive get NaN points.
func UnprojectMap(depth []float32, w, h int, k Intrinsics, camToWorld Mat4) ([]float32, error) {
	if w <= 0 || h <= 0 {
		return nil, fmt.Errorf("geom: cannot unproject a %d×%d depth map: both sizes must be positive", w, h)
	}
	if len(depth) != w*h {
		return nil, fmt.Errorf("geom: depth map has %d values, want %d×%d = %d", len(depth), w, h, w*h)
	}
	if err := CheckIntrinsics(k); err != nil {
		return nil, fmt.Errorf("geom: %w", err)
	}
	nan := float32(math.NaN())
	out := make([]float32, 3*w*h)
	for v := range h {
		for u := range w {
			i := v*w + u
			o := out[3*i : 3*i+3]
			d := float64(depth[i])
			if !validDepth(d) {
				o[0], o[1], o[2] = nan, nan, nan
				continue
			}
			p := Unproject(u, v, d, k, camToWorld)
			o[0], o[1], o[2] = float32(p[0]), float32(p[1]), float32(p[2])
		}
	}
	return out, nil
}

// ConfidentPoints appends to dst the world points of f's pixels that pass the
// filter: every Stride-th pixel in each direction, row by row, with a finite
// positive depth and (when f has confidences) confidence above the
// threshold, unprojected by Unproject and coloured from f.RGB (Grey without
// it). Points that come out non-finite (overflow) are dropped.
func ConfidentPoints(dst []Point, f DepthFrame, filt PointFilter) ([]Point, error) {
	err := confident(f, filt, func(i int, p Point) {
		if f.RGB != nil {
			p.R, p.G, p.B = f.RGB[3*i], f.RGB[3*i+1], f.RGB[3*i+2]
		}
		dst = append(dst, p)
	})
	return dst, err
}

// confident calls keep, in ConfidentPoints' order, with each kept pixel's
// index (v·Width+u) and its grey point.
func confident(f DepthFrame, filt PointFilter, keep func(i int, p Point)) error {
	if err := f.Check(); err != nil {
		return err
	}
	if err := filt.Check(); err != nil {
		return err
	}
	for v := 0; v < f.Height; v += filt.Stride {
		for u := 0; u < f.Width; u += filt.Stride {
			i := v*f.Width + u
			d := float64(f.Depth[i])
			if !validDepth(d) || (f.Conf != nil && !(float64(f.Conf[i]) > filt.ConfThreshold)) {
				continue
			}
			w := Unproject(u, v, d, f.Intrinsics, f.CamToWorld)
			p := Point{X: float32(w[0]), Y: float32(w[1]), Z: float32(w[2]), R: Grey, G: Grey, B: Grey}
			if !isFinite32(p.X) || !isFinite32(p.Y) || !isFinite32(p.Z) {
				continue
			}
			keep(i, p)
		}
	}
	return nil
}

// KeptPoints are a frame's map points made ahead (on a GPU, where the depth
// map was), without their colours: ConfidentPoints' points of the frame for
// Filter, in its order, as coordinates and the pixel each came from.
type KeptPoints struct {
	Filter PointFilter
	XYZ    []float32 // 3 per point
	Pixel  []int32   // v·Width+u per point
}

// Keep is ConfidentPoints' selection of f's pixels as KeptPoints: the host
// form of what a GPU backend makes on the device.
func Keep(f DepthFrame, filt PointFilter) (*KeptPoints, error) {
	k := &KeptPoints{Filter: filt}
	err := confident(f, filt, func(i int, p Point) {
		k.XYZ = append(k.XYZ, p.X, p.Y, p.Z)
		k.Pixel = append(k.Pixel, int32(i))
	})
	if err != nil {
		return nil, err
	}
	return k, nil
}

// Points appends the kept points to dst, coloured from rgb (3·Height·Width,
// HWC; nil gives Grey), which must be the frame's. A pixel index outside
// rgb is an error.
func (k *KeptPoints) Points(dst []Point, rgb []uint8) ([]Point, error) {
	if len(k.XYZ) != 3*len(k.Pixel) {
		return dst, fmt.Errorf("geom: %d coordinates for %d kept points", len(k.XYZ), len(k.Pixel))
	}
	dst = slices.Grow(dst, len(k.Pixel))
	for j, i := range k.Pixel {
		p := Point{X: k.XYZ[3*j], Y: k.XYZ[3*j+1], Z: k.XYZ[3*j+2], R: Grey, G: Grey, B: Grey}
		if rgb != nil {
			if i < 0 || 3*int(i)+2 >= len(rgb) {
				return dst, fmt.Errorf("geom: kept point %d is pixel %d, outside the frame's %d colours", j, i, len(rgb)/3)
			}
			p.R, p.G, p.B = rgb[3*i], rgb[3*i+1], rgb[3*i+2]
		}
		dst = append(dst, p)
	}
	return dst, nil
}
