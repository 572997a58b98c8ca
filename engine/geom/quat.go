package geom

import (
	"errors"
	"fmt"
	"math"
)

// Quat is a rotation quaternion in ROS and TUM order: x, y, z, w.
type Quat = [4]float64

// ErrDegenerate is wrapped by every error about a value that stands for no
// rotation or no camera: a quaternion without a direction, a rotation block
// that is singular, mirroring or not finite, unusable intrinsics.
var ErrDegenerate = errors.New("degenerate geometry")

// minQuatNorm2 is the smallest |q|² read as a direction. Below it the
// 2/|q|² factor loses its precision (and underflows to a division by zero).
const minQuatNorm2 = 1e-24

// nanMat3 and nanQuat stand in for results that do not exist, so that a
// caller who drops the error still cannot mistake them for the identity.
func nanMat3() Mat3 {
	n := math.NaN()
	return Mat3{{n, n, n}, {n, n, n}, {n, n, n}}
}

func nanQuat() Quat {
	n := math.NaN()
	return Quat{n, n, n, n}
}

// QuatToMat is the rotation of an XYZW quaternion of any length. The 2/|q|²
// factor (instead of normalising first) is what the reference does; it
// yields a proper rotation for every q with a direction. A quaternion of
// (nearly) zero length or with a NaN or infinite component gives an
// ErrDegenerate error and a matrix of NaNs.
func QuatToMat(q Quat) (Mat3, error) {
	n2 := q[0]*q[0] + q[1]*q[1] + q[2]*q[2] + q[3]*q[3]
	if !(n2 >= minQuatNorm2) || math.IsInf(n2, 0) {
		return nanMat3(), fmt.Errorf("quaternion (%g %g %g %g) has no direction: %w", q[0], q[1], q[2], q[3], ErrDegenerate)
	}
	i, j, k, r := q[0], q[1], q[2], q[3]
	s := 2 / n2
	return Mat3{
		{1 - s*(j*j+k*k), s * (i*j - k*r), s * (i*k + j*r)},
		{s * (i*j + k*r), 1 - s*(i*i+k*k), s * (j*k - i*r)},
		{s * (i*k - j*r), s * (j*k + i*r), 1 - s*(i*i+j*j)},
	}, nil
}

// rotation is QuatToMat for callers that pass NaNs on (the model's pose
// encodings: a broken output stays visibly broken downstream).
func rotation(q Quat) Mat3 {
	m, _ := QuatToMat(q)
	return m
}

// MatToQuat is the unit XYZW quaternion, w ≥ 0, of the rotation nearest to m
// (NearestRotation: model outputs and float32 round trips are never exactly
// orthonormal). Like the reference (PyTorch3D's algorithm) it builds the four
// candidate quaternions and keeps the best-conditioned one, so it stays
// accurate near 180° turns. A singular, mirroring or non-finite m gives an
// ErrDegenerate error and a quaternion of NaNs.
func MatToQuat(m Mat3) (Quat, error) {
	r, err := NearestRotation(m)
	if err != nil {
		return nanQuat(), err
	}
	return rotToQuat(r), nil
}

// rotToQuat converts an orthonormal matrix with determinant +1.
func rotToQuat(m Mat3) Quat {
	m00, m01, m02 := m[0][0], m[0][1], m[0][2]
	m10, m11, m12 := m[1][0], m[1][1], m[1][2]
	m20, m21, m22 := m[2][0], m[2][1], m[2][2]
	qAbs := [4]float64{
		sqrtPos(1 + m00 + m11 + m22),
		sqrtPos(1 + m00 - m11 - m22),
		sqrtPos(1 - m00 + m11 - m22),
		sqrtPos(1 - m00 - m11 + m22),
	}
	// Candidate c is the quaternion (r, i, j, k) multiplied by 2·qAbs[c].
	cand := [4][4]float64{
		{qAbs[0] * qAbs[0], m21 - m12, m02 - m20, m10 - m01},
		{m21 - m12, qAbs[1] * qAbs[1], m10 + m01, m02 + m20},
		{m02 - m20, m10 + m01, qAbs[2] * qAbs[2], m12 + m21},
		{m10 - m01, m20 + m02, m21 + m12, qAbs[3] * qAbs[3]},
	}
	best := 0 // first maximum, as torch.argmax
	for c := 1; c < 4; c++ {
		if qAbs[c] > qAbs[best] {
			best = c
		}
	}
	den := 2 * math.Max(qAbs[best], 0.1)
	c := cand[best]
	q := Quat{c[1] / den, c[2] / den, c[3] / den, c[0] / den}
	n := math.Sqrt(q[0]*q[0] + q[1]*q[1] + q[2]*q[2] + q[3]*q[3])
	if q[3] < 0 {
		n = -n
	}
	for i := range q {
		q[i] /= n
	}
	return q
}

func sqrtPos(x float64) float64 {
	if x > 0 {
		return math.Sqrt(x)
	}
	return 0
}

// NearestRotation is the rotation closest to a in the Frobenius norm (its
// orthonormal polar factor), by Newton's iteration R ← (R + R⁻ᵀ)/2, which
// converges quadratically. A singular, mirroring (det ≤ 0) or non-finite a
// gives an ErrDegenerate error and a matrix of NaNs.
func NearestRotation(a Mat3) (Mat3, error) {
	scale := 0.0
	for i := range 3 {
		for j := range 3 {
			v := a[i][j]
			if math.IsNaN(v) || math.IsInf(v, 0) {
				return nanMat3(), fmt.Errorf("rotation block %v is not finite: %w", a, ErrDegenerate)
			}
			scale = max(scale, math.Abs(v))
		}
	}
	if scale == 0 {
		return nanMat3(), fmt.Errorf("rotation block is zero: %w", ErrDegenerate)
	}
	orig := a
	for i := range 3 {
		for j := range 3 {
			a[i][j] /= scale
		}
	}
	for range 50 {
		d := det3(a)
		if !(d > 1e-12) {
			return nanMat3(), fmt.Errorf("rotation block %v is singular or mirroring (det %.3g): %w", orig, det3(orig), ErrDegenerate)
		}
		it := invTranspose3(a, d)
		diff := 0.0
		for i := range 3 {
			for j := range 3 {
				v := (a[i][j] + it[i][j]) / 2
				diff = max(diff, math.Abs(v-a[i][j]))
				a[i][j] = v
			}
		}
		if diff < 1e-15 {
			break
		}
	}
	return a, nil
}

func det3(a Mat3) float64 {
	return a[0][0]*(a[1][1]*a[2][2]-a[1][2]*a[2][1]) -
		a[0][1]*(a[1][0]*a[2][2]-a[1][2]*a[2][0]) +
		a[0][2]*(a[1][0]*a[2][1]-a[1][1]*a[2][0])
}

// invTranspose3 is (a⁻¹)ᵀ: the cofactor matrix over det.
func invTranspose3(a Mat3, det float64) Mat3 {
	var c Mat3
	for i := range 3 {
		for j := range 3 {
			i1, i2 := (i+1)%3, (i+2)%3
			j1, j2 := (j+1)%3, (j+2)%3
			c[i][j] = (a[i1][j1]*a[i2][j2] - a[i1][j2]*a[i2][j1]) / det
		}
	}
	return c
}
