package geom

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Rigid builds a homogeneous matrix [R | t; 0 0 0 1].
func Rigid(r Mat3, t [3]float64) Mat4 {
	var m Mat4
	for i := range 3 {
		for j := range 3 {
			m[i][j] = r[i][j]
		}
		m[i][3] = t[i]
	}
	m[3][3] = 1
	return m
}

// RotationOf is the upper-left 3×3 block of m.
func RotationOf(m Mat4) Mat3 {
	var r Mat3
	for i := range 3 {
		for j := range 3 {
			r[i][j] = m[i][j]
		}
	}
	return r
}

// TranslationOf is the last column of m's first three rows.
func TranslationOf(m Mat4) [3]float64 {
	return [3]float64{m[0][3], m[1][3], m[2][3]}
}

// InvertRigid inverts a rotation+translation matrix in closed form,
// [Rᵀ | −Rᵀt]. It does not check that the upper-left block is orthonormal.
func InvertRigid(m Mat4) Mat4 {
	r := Transpose3(RotationOf(m))
	t := MulVec3(r, TranslationOf(m))
	return Rigid(r, [3]float64{-t[0], -t[1], -t[2]})
}

// Mul4 is a·b; for rigid transforms, b applied first.
func Mul4(a, b Mat4) Mat4 {
	var c Mat4
	for i := range 4 {
		for j := range 4 {
			for k := range 4 {
				c[i][j] += a[i][k] * b[k][j]
			}
		}
	}
	return c
}

// Apply maps the point p through the rigid transform m: R·p + t.
func Apply(m Mat4, p [3]float64) [3]float64 {
	return [3]float64{
		m[0][0]*p[0] + m[0][1]*p[1] + m[0][2]*p[2] + m[0][3],
		m[1][0]*p[0] + m[1][1]*p[1] + m[1][2]*p[2] + m[1][3],
		m[2][0]*p[0] + m[2][1]*p[1] + m[2][2]*p[2] + m[2][3],
	}
}

// Compose is the rigid transform with translation t and the rotation of q
// (any length; see QuatToMat). A quaternion without a direction or a
// non-finite translation gives an ErrDegenerate error and NaNs.
func Compose(t [3]float64, q Quat) (Mat4, error) {
	r, err := QuatToMat(q)
	if err == nil && !finite3(t) {
		r, err = nanMat3(), fmt.Errorf("translation %v is not finite: %w", t, ErrDegenerate)
	}
	if err != nil {
		n := math.NaN()
		return Rigid(r, [3]float64{n, n, n}), err
	}
	return Rigid(r, t), nil
}

// Decompose splits a rigid transform into its translation and the unit XYZW
// quaternion (w ≥ 0) of the rotation nearest to its upper-left block: what a
// ROS pose or TF message and a TUM line carry. A singular, mirroring or
// non-finite block, or a non-finite translation, gives an ErrDegenerate
// error and NaNs.
func Decompose(m Mat4) (t [3]float64, q Quat, err error) {
	t = TranslationOf(m)
	if !finite3(t) {
		n := math.NaN()
		return [3]float64{n, n, n}, nanQuat(), fmt.Errorf("translation %v is not finite: %w", t, ErrDegenerate)
	}
	q, err = MatToQuat(RotationOf(m))
	return t, q, err
}

// ParseTransform reads "x y z qx qy qz qw" (a position and an XYZW
// quaternion of any length, as tf's static_transform_publisher takes them)
// into a rigid transform.
func ParseTransform(s string) (Mat4, error) {
	f := strings.Fields(s)
	if len(f) != 7 {
		return Mat4{}, fmt.Errorf("want 7 numbers \"x y z qx qy qz qw\", got %d", len(f))
	}
	var v [7]float64
	for i, tok := range f {
		x, err := strconv.ParseFloat(tok, 64)
		if err != nil || math.IsNaN(x) || math.IsInf(x, 0) {
			return Mat4{}, fmt.Errorf("%q is not a finite number", tok)
		}
		v[i] = x
	}
	return Compose([3]float64{v[0], v[1], v[2]}, Quat{v[3], v[4], v[5], v[6]})
}

// MulMat3 is a·b.
func MulMat3(a, b Mat3) Mat3 {
	var c Mat3
	for i := range 3 {
		for j := range 3 {
			c[i][j] = a[i][0]*b[0][j] + a[i][1]*b[1][j] + a[i][2]*b[2][j]
		}
	}
	return c
}

// Transpose3 is aᵀ.
func Transpose3(a Mat3) Mat3 {
	var t Mat3
	for i := range 3 {
		for j := range 3 {
			t[i][j] = a[j][i]
		}
	}
	return t
}

// MulVec3 is a·v.
func MulVec3(a Mat3, v [3]float64) [3]float64 {
	return [3]float64{
		a[0][0]*v[0] + a[0][1]*v[1] + a[0][2]*v[2],
		a[1][0]*v[0] + a[1][1]*v[1] + a[1][2]*v[2],
		a[2][0]*v[0] + a[2][1]*v[1] + a[2][2]*v[2],
	}
}

func finite3(v [3]float64) bool {
	for _, x := range v {
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return false
		}
	}
	return true
}
