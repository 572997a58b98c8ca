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

// rotToQuat converts an orthonormal matrix with determinant +1. Of the four
// ways to compute the quaternion it takes the one that divides by the
// largest of 1+tr, 1+2·m00−tr, 1+2·m11−tr, 1+2·m22−tr (first maximum on
// ties), the choice the reference (PyTorch3D's matrix_to_quaternion) makes,
// in Shepperd's arithmetic; it is then normalised with w ≥ 0.
func rotToQuat(r Mat3) Quat {
	var x, y, z, w float64
	tr := r[0][0] + r[1][1] + r[2][2]
	switch {
	case tr >= r[0][0] && tr >= r[1][1] && tr >= r[2][2]:
		s := 2 * math.Sqrt(1+tr)
		w, x, y, z = s/4, (r[2][1]-r[1][2])/s, (r[0][2]-r[2][0])/s, (r[1][0]-r[0][1])/s
	case r[0][0] >= r[1][1] && r[0][0] >= r[2][2]:
		s := 2 * math.Sqrt(1+r[0][0]-r[1][1]-r[2][2])
		w, x, y, z = (r[2][1]-r[1][2])/s, s/4, (r[0][1]+r[1][0])/s, (r[0][2]+r[2][0])/s
	case r[1][1] >= r[2][2]:
		s := 2 * math.Sqrt(1+r[1][1]-r[0][0]-r[2][2])
		w, x, y, z = (r[0][2]-r[2][0])/s, (r[0][1]+r[1][0])/s, s/4, (r[1][2]+r[2][1])/s
	default:
		s := 2 * math.Sqrt(1+r[2][2]-r[0][0]-r[1][1])
		w, x, y, z = (r[1][0]-r[0][1])/s, (r[0][2]+r[2][0])/s, (r[1][2]+r[2][1])/s, s/4
	}
	n := math.Sqrt(x*x + y*y + z*z + w*w)
	x, y, z, w = x/n, y/n, z/n, w/n
	if w < 0 {
		x, y, z, w = -x, -y, -z, -w
	}
	return Quat{x, y, z, w}
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
