package traj

import (
	"errors"
	"fmt"
	"math"

	"gonum.org/v1/gonum/mat"
)

// Sim3 is a similarity transform p ↦ S·R·p + T.
type Sim3 struct {
	S float64       `json:"scale"`
	R [3][3]float64 `json:"rotation"`
	T [3]float64    `json:"translation"`
}

// Identity is the transform that changes nothing.
func Identity() Sim3 {
	return Sim3{S: 1, R: [3][3]float64{{1, 0, 0}, {0, 1, 0}, {0, 0, 1}}}
}

// Apply transforms a point.
func (g Sim3) Apply(p [3]float64) [3]float64 {
	r := mulVec(g.R, p)
	return [3]float64{g.S*r[0] + g.T[0], g.S*r[1] + g.T[1], g.S*r[2] + g.T[2]}
}

// ApplyPose moves a camera pose by the transform: its position is transformed
// and its orientation rotated.
func (g Sim3) ApplyPose(p Pose) Pose {
	return Pose{Time: p.Time, T: g.Apply(p.T), R: mulMat(g.R, p.R)}
}

// Alignment says which transform Umeyama estimates.
type Alignment string

const (
	AlignSim3 Alignment = "sim3" // rotation, translation and scale (monocular)
	AlignSE3  Alignment = "se3"  // rotation and translation
	AlignNone Alignment = "none" // no alignment
)

// ParseAlignment checks an alignment name.
func ParseAlignment(s string) (Alignment, error) {
	switch a := Alignment(s); a {
	case AlignSim3, AlignSE3, AlignNone:
		return a, nil
	}
	return "", fmt.Errorf("alignment must be sim3, se3 or none, not %q", s)
}

// ErrDegenerate marks point sets that cannot fix an alignment: fewer than
// three pairs, all points the same, or all on one line (a rotation about
// that line changes nothing). evo refuses these as "Degenerate covariance
// rank, Umeyama alignment is not possible".
var ErrDegenerate = errors.New("degenerate covariance rank, Umeyama alignment is not possible")

// rankTol is the smallest singular value of the cross-covariance, relative
// to the largest, that counts towards its rank. Collinear points give
// rounding noise near 1e-16 there; a straight drive with 1 cm of sideways
// motion over 100 m still gives about 1e-8.
const rankTol = 1e-12

// Umeyama returns the transform that maps src onto dst with least squared
// error (Umeyama 1991, "Least-squares estimation of transformation parameters
// between two point patterns"); withScale estimates the scale as well, else
// it is 1. Like evo it needs a cross-covariance of rank ≥ 2 (at least 3
// pairs, not all on one line); otherwise the error wraps ErrDegenerate.
func Umeyama(src, dst [][3]float64, withScale bool) (Sim3, error) {
	n := len(src)
	if n != len(dst) {
		return Sim3{}, fmt.Errorf("alignment: %d estimated but %d reference positions", n, len(dst))
	}
	if n < 3 {
		return Sim3{}, fmt.Errorf("alignment: %w: it needs at least 3 associated poses, have %d", ErrDegenerate, n)
	}
	var ms, md [3]float64
	for i := range n {
		for k := range 3 {
			ms[k] += src[i][k]
			md[k] += dst[i][k]
		}
	}
	for k := range 3 {
		ms[k] /= float64(n)
		md[k] /= float64(n)
	}
	// Covariance Σ = 1/n Σ (dst−μd)(src−μs)ᵀ and the source variance.
	var cov [3][3]float64
	var varS, varD float64
	for i := range n {
		var a, b [3]float64
		for k := range 3 {
			a[k] = src[i][k] - ms[k]
			b[k] = dst[i][k] - md[k]
			varS += a[k] * a[k]
			varD += b[k] * b[k]
		}
		for r := range 3 {
			for c := range 3 {
				cov[r][c] += b[r] * a[c]
			}
		}
	}
	varS /= float64(n)
	varD /= float64(n)
	if !(varS > 1e-300) || math.IsInf(varS, 0) {
		return Sim3{}, fmt.Errorf("alignment: %w: the estimated positions are all the same point (or not finite), so no rotation or scale can be found", ErrDegenerate)
	}
	if !(varD > 1e-300) || math.IsInf(varD, 0) {
		return Sim3{}, fmt.Errorf("alignment: %w: the reference positions are all the same point (or not finite), so no rotation or scale can be found", ErrDegenerate)
	}
	m := mat.NewDense(3, 3, nil)
	for r := range 3 {
		for c := range 3 {
			m.Set(r, c, cov[r][c]/float64(n))
		}
	}
	var svd mat.SVD
	if !svd.Factorize(m, mat.SVDFull) {
		return Sim3{}, errors.New("alignment: the singular value decomposition did not converge")
	}
	var u, v mat.Dense
	svd.UTo(&u)
	svd.VTo(&v)
	d := svd.Values(nil) // descending
	if !(d[1] > rankTol*d[0]) {
		return Sim3{}, fmt.Errorf("alignment: %w: the %d associated positions lie on one line (singular values of their cross-covariance %.3g, %.3g, %.3g), so the rotation about it is undetermined; use --align none", ErrDegenerate, n, d[0], d[1], d[2])
	}
	// Reflection guard: force det(R) = +1.
	sgn := [3]float64{1, 1, 1}
	if mat.Det(&u)*mat.Det(&v) < 0 {
		sgn[2] = -1
	}
	var g Sim3
	for r := range 3 {
		for c := range 3 {
			var s float64
			for k := range 3 {
				s += u.At(r, k) * sgn[k] * v.At(c, k)
			}
			g.R[r][c] = s
		}
	}
	g.S = 1
	if withScale {
		g.S = (d[0]*sgn[0] + d[1]*sgn[1] + d[2]*sgn[2]) / varS
	}
	rm := mulVec(g.R, ms)
	for k := range 3 {
		g.T[k] = md[k] - g.S*rm[k]
	}
	return g, nil
}

func mulVec(m [3][3]float64, p [3]float64) [3]float64 {
	return [3]float64{
		m[0][0]*p[0] + m[0][1]*p[1] + m[0][2]*p[2],
		m[1][0]*p[0] + m[1][1]*p[1] + m[1][2]*p[2],
		m[2][0]*p[0] + m[2][1]*p[1] + m[2][2]*p[2],
	}
}

func mulMat(a, b [3][3]float64) [3][3]float64 {
	var out [3][3]float64
	for r := range 3 {
		for c := range 3 {
			out[r][c] = a[r][0]*b[0][c] + a[r][1]*b[1][c] + a[r][2]*b[2][c]
		}
	}
	return out
}

func transpose(m [3][3]float64) [3][3]float64 {
	return [3][3]float64{
		{m[0][0], m[1][0], m[2][0]},
		{m[0][1], m[1][1], m[2][1]},
		{m[0][2], m[1][2], m[2][2]},
	}
}

// rotationAngle is the angle of a rotation matrix in radians, computed with
// atan2 so that small angles keep their precision.
func rotationAngle(m [3][3]float64) float64 {
	c := (m[0][0] + m[1][1] + m[2][2] - 1) / 2
	sx := m[2][1] - m[1][2]
	sy := m[0][2] - m[2][0]
	sz := m[1][0] - m[0][1]
	s := math.Sqrt(sx*sx+sy*sy+sz*sz) / 2
	return math.Atan2(s, c)
}
