package geom

import (
	"fmt"
	"math"
)

// Similarity maps points of one window into another's coordinates:
// p' = Scale·R·p + T.
type Similarity struct {
	Scale float64
	R     Mat3
	T     [3]float64
}

// Identity is the similarity that changes nothing (window 0's).
func Identity() Similarity {
	return Similarity{Scale: 1, R: Mat3{{1, 0, 0}, {0, 1, 0}, {0, 0, 1}}}
}

// Matrix is [R | T] without the scale, the reference's chunk_transforms entry.
func (s Similarity) Matrix() Mat4 { return Rigid(s.R, s.T) }

// Apply maps a point.
func (s Similarity) Apply(p [3]float64) [3]float64 {
	q := MulVec3(s.R, p)
	return [3]float64{s.Scale*q[0] + s.T[0], s.Scale*q[1] + s.T[1], s.Scale*q[2] + s.T[2]}
}

// ApplyPose maps a pose encoding: the rotation becomes R·R(q), re-encoded as a
// unit quaternion with w ≥ 0 (so warped encodings are normalised, unlike raw
// model output), the centre Scale·R·c + T; the fields of view are kept.
func (s Similarity) ApplyPose(enc [9]float32) [9]float32 {
	q, _ := MatToQuat(MulMat3(s.R, rotation(encQuat(enc))))
	c := s.Apply(encCentre(enc))
	return [9]float32{
		float32(c[0]), float32(c[1]), float32(c[2]),
		float32(q[0]), float32(q[1]), float32(q[2]), float32(q[3]),
		enc[7], enc[8],
	}
}

// Inverse is the similarity that undoes s.
func (s Similarity) Inverse() Similarity {
	rt := Transpose3(s.R)
	t := MulVec3(rt, s.T)
	inv := 1 / s.Scale
	return Similarity{Scale: inv, R: rt, T: [3]float64{-inv * t[0], -inv * t[1], -inv * t[2]}}
}

// WindowFrames is one window's per-frame outputs, in the window's own
// coordinates, in frame order.
type WindowFrames struct {
	PoseEnc  [][9]float32
	Depth    [][]float32 // per frame h·w depths; may be nil (no depth scale then)
	Points   [][]float32 // per frame h·w·3 point-head points; may be nil
	Keyframe []bool      // per frame: scale frame or keyframe; nil when unknown
}

func (w *WindowFrames) check(name string) error {
	n := len(w.PoseEnc)
	if n == 0 {
		return fmt.Errorf("geom: %s window has no frames", name)
	}
	if w.Depth != nil && len(w.Depth) != n {
		return fmt.Errorf("geom: %s window has %d depth maps for %d poses", name, len(w.Depth), n)
	}
	if w.Points != nil && len(w.Points) != n {
		return fmt.Errorf("geom: %s window has %d point maps for %d poses", name, len(w.Points), n)
	}
	if w.Keyframe != nil && len(w.Keyframe) != n {
		return fmt.Errorf("geom: %s window has %d keyframe flags for %d poses", name, len(w.Keyframe), n)
	}
	return nil
}

// PairwiseAlignment finds the similarity that maps window cur (raw model output)
// into the coordinates of window prev (already aligned), as the reference's
// _pairwise_alignment does (§13). The last overlap frames of prev are the first
// frames of cur. Among them, the offsets that are keyframes in both windows are
// paired; the last paired offset is the anchor whose poses fix R and T, and the
// scale is the median of prev/cur depth over every pixel of every paired frame
// (finite values, |cur| > float32 epsilon; the lower middle value for an even
// count, like torch.median), clamped to [1e-3, 1e3]. Without keyframe flags or
// pairs, the first overlap frame is the anchor and the only depth pair. With no
// overlap the identity is returned.
func PairwiseAlignment(prev, cur WindowFrames, overlap int) (Similarity, error) {
	if overlap <= 0 {
		return Identity(), nil
	}
	if err := prev.check("previous"); err != nil {
		return Similarity{}, err
	}
	if err := cur.check("current"); err != nil {
		return Similarity{}, err
	}
	nPrev, nCur := len(prev.PoseEnc), len(cur.PoseEnc)
	start := max(nPrev-overlap, 0)
	eff := min(overlap, nPrev-start, nCur)

	var paired []int
	if prev.Keyframe != nil && cur.Keyframe != nil {
		for o := range eff {
			if prev.Keyframe[start+o] && cur.Keyframe[o] {
				paired = append(paired, o)
			}
		}
	}
	if len(paired) == 0 {
		paired = []int{0}
	}
	anchor := paired[len(paired)-1]

	ra := rotation(encQuat(prev.PoseEnc[start+anchor]))
	rb := rotation(encQuat(cur.PoseEnc[anchor]))
	rab := MulMat3(ra, Transpose3(rb))

	scale := 1.0
	if prev.Depth != nil && cur.Depth != nil {
		n := 0
		for _, o := range paired {
			n += len(cur.Depth[o])
		}
		ratios := make([]float32, 0, n)
		for _, o := range paired {
			a, b := prev.Depth[start+o], cur.Depth[o]
			if len(a) != len(b) {
				return Similarity{}, fmt.Errorf("geom: overlap frame %d has %d depths in the previous window and %d in the current one", o, len(a), len(b))
			}
			ratios = appendRatios(ratios, a, b)
		}
		if len(ratios) > 0 {
			scale = float64(selectKth(ratios, (len(ratios)-1)/2))
		}
		scale = min(max(scale, 1e-3), 1e3)
	}

	ca := encCentre(prev.PoseEnc[start+anchor])
	cb := MulVec3(rab, encCentre(cur.PoseEnc[anchor]))
	return Similarity{
		Scale: scale,
		R:     rab,
		T:     [3]float64{ca[0] - scale*cb[0], ca[1] - scale*cb[1], ca[2] - scale*cb[2]},
	}, nil
}

// eps32 is float32's machine epsilon (torch.finfo(torch.float32).eps).
const eps32 = 1.1920929e-07

// appendRatios adds a/b for the usable pixel pairs, divided in float32 as in
// the reference so that the median picks the same pixel.
func appendRatios(dst, a, b []float32) []float32 {
	const expMask = 0x7f800000 // all ones: Inf or NaN
	b = b[:len(a)]
	for i, x := range a {
		y := b[i]
		yb := math.Float32bits(y)
		if math.Float32bits(x)&expMask == expMask || yb&expMask == expMask || !(math.Float32frombits(yb&^(1<<31)) > eps32) {
			continue
		}
		dst = append(dst, x/y)
	}
	return dst
}

func isFinite32(x float32) bool {
	return !math.IsNaN(float64(x)) && !math.IsInf(float64(x), 0)
}

// Warp moves a window's outputs into another coordinate frame in place: poses by
// ApplyPose, depths times Scale, point-head points by Apply. The reference warps
// every window (window 0 by the identity, which still normalises its
// quaternions) whenever there are two windows or more, and none when there is one.
func Warp(w *WindowFrames, s Similarity) error {
	if err := w.check("warped"); err != nil {
		return err
	}
	for f, pts := range w.Points {
		if len(pts)%3 != 0 {
			return fmt.Errorf("geom: point map of frame %d has %d values, not a multiple of 3", f, len(pts))
		}
	}
	for i, p := range w.PoseEnc {
		w.PoseEnc[i] = s.ApplyPose(p)
	}
	for _, d := range w.Depth {
		for i, x := range d {
			d[i] = float32(float64(x) * s.Scale)
		}
	}
	for _, pts := range w.Points {
		for i := 0; i < len(pts); i += 3 {
			q := s.Apply([3]float64{float64(pts[i]), float64(pts[i+1]), float64(pts[i+2])})
			pts[i], pts[i+1], pts[i+2] = float32(q[0]), float32(q[1]), float32(q[2])
		}
	}
	return nil
}

// radixMin is the length from which selectKth narrows by a radix pass first.
const radixMin = 1 << 14

// selectKth returns the k-th smallest value (0-based) of xs, which holds no
// NaN, reordering xs. The median of millions of depth ratios is taken when
// live windows change, so it must cost little more than reading them: one
// pass counts the values by their top 16 bits in an order-preserving key,
// the bucket that holds the k-th is gathered to the front, and quickselect
// finishes inside it.
func selectKth(xs []float32, k int) float32 {
	if len(xs) < radixMin {
		return quickselect(xs, k)
	}
	hist := make([]int, 1<<16)
	for _, x := range xs {
		hist[orderKey(x)>>16]++
	}
	bucket := uint32(0)
	for b, n := range hist {
		if k < n {
			bucket = uint32(b)
			break
		}
		k -= n
	}
	n := 0
	for _, x := range xs {
		if orderKey(x)>>16 == bucket {
			xs[n] = x
			n++
		}
	}
	return quickselect(xs[:n], k)
}

// orderKey maps a float32 to a uint32 in the same order (negative values
// below positive ones, -0 just below +0).
func orderKey(x float32) uint32 {
	b := math.Float32bits(x)
	if b>>31 != 0 {
		return ^b
	}
	return b | 1<<31
}

// quickselect is selectKth by partitioning (expected linear time).
func quickselect(xs []float32, k int) float32 {
	lo, hi := 0, len(xs)-1
	for lo < hi {
		// Median of three as the pivot keeps sorted input linear.
		mid := lo + (hi-lo)/2
		if xs[mid] < xs[lo] {
			xs[mid], xs[lo] = xs[lo], xs[mid]
		}
		if xs[hi] < xs[lo] {
			xs[hi], xs[lo] = xs[lo], xs[hi]
		}
		if xs[hi] < xs[mid] {
			xs[hi], xs[mid] = xs[mid], xs[hi]
		}
		pivot := xs[mid]
		i, j := lo, hi
		for i <= j {
			for xs[i] < pivot {
				i++
			}
			for xs[j] > pivot {
				j--
			}
			if i <= j {
				xs[i], xs[j] = xs[j], xs[i]
				i++
				j--
			}
		}
		switch {
		case k <= j:
			hi = j
		case k >= i:
			lo = i
		default:
			return xs[k]
		}
	}
	return xs[k]
}
