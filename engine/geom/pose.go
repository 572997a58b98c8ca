// Package geom is the engine's camera geometry, computed on the host in float64
// (except where the reference's float32 arithmetic decides an outcome, see
// FlowMagnitude): the model's pose encoding and the matrices it stands for,
// depth unprojection, the optical flow that picks keyframes, and the similarity
// alignment that stitches windows (reference-model.md §10, §12–§14).
//
// Conventions (OpenCV camera axes: x right, y down, z forward):
//   - A pose encoding is [cx, cy, cz, qx, qy, qz, qw, fov_h, fov_w]: the camera
//     centre in world coordinates, the camera→world rotation as an XYZW
//     quaternion that need not be unit length, and the two fields of view in
//     radians.
//   - CamToWorld matrices map camera points to world points: X_w = R·X_c + t.
//   - Intrinsics are [fx, fy, cx, cy] in pixels at the model resolution.
package geom

import "math"

// Mat3 is a row-major 3×3 matrix.
type Mat3 = [3][3]float64

// Mat4 is a row-major 4×4 homogeneous matrix.
type Mat4 = [4][4]float64

// Intrinsics is [fx, fy, cx, cy] in pixels.
type Intrinsics = [4]float64

// QuatToMat turns an XYZW quaternion of any non-zero length into a rotation.
// The 2/|q|² factor (instead of normalising first) is what the reference does;
// it yields a proper rotation for every non-zero q. A zero quaternion gives NaNs,
// as in the reference.
func QuatToMat(q [4]float64) Mat3 {
	i, j, k, r := q[0], q[1], q[2], q[3]
	s := 2 / (i*i + j*j + k*k + r*r)
	return Mat3{
		{1 - s*(j*j+k*k), s * (i*j - k*r), s * (i*k + j*r)},
		{s * (i*j + k*r), 1 - s*(i*i+k*k), s * (j*k - i*r)},
		{s * (i*k - j*r), s * (j*k + i*r), 1 - s*(i*i+j*j)},
	}
}

// MatToQuat turns a rotation matrix into a unit XYZW quaternion with w ≥ 0.
// Like the reference (PyTorch3D's algorithm) it builds the four candidate
// quaternions and keeps the best-conditioned one, so it stays accurate near
// 180° rotations.
func MatToQuat(m Mat3) [4]float64 {
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
	r := cand[best]
	q := [4]float64{r[1] / den, r[2] / den, r[3] / den, r[0] / den}
	if q[3] < 0 {
		for n := range q {
			q[n] = -q[n]
		}
	}
	return q
}

func sqrtPos(x float64) float64 {
	if x > 0 {
		return math.Sqrt(x)
	}
	return 0
}

func encQuat(enc [9]float32) [4]float64 {
	return [4]float64{float64(enc[3]), float64(enc[4]), float64(enc[5]), float64(enc[6])}
}

func encCentre(enc [9]float32) [3]float64 {
	return [3]float64{float64(enc[0]), float64(enc[1]), float64(enc[2])}
}

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

// PoseEncToCamToWorld is the camera→world pose a pose encoding stands for:
// rotation from the (unnormalised) quaternion, translation = camera centre.
func PoseEncToCamToWorld(enc [9]float32) Mat4 {
	return Rigid(QuatToMat(encQuat(enc)), encCentre(enc))
}

// PoseEncToWorldToCam is the inverse pose (what the reference's demo stores as
// "extrinsic"), by the closed-form rigid inverse [Rᵀ | −Rᵀt].
func PoseEncToWorldToCam(enc [9]float32) Mat4 {
	return InvertRigid(PoseEncToCamToWorld(enc))
}

// InvertRigid inverts a rotation+translation matrix in closed form. It does not
// check that the upper-left block is orthonormal.
func InvertRigid(m Mat4) Mat4 {
	var r Mat3
	var t [3]float64
	for i := range 3 {
		for j := range 3 {
			r[i][j] = m[j][i]
		}
	}
	for i := range 3 {
		t[i] = -(r[i][0]*m[0][3] + r[i][1]*m[1][3] + r[i][2]*m[2][3])
	}
	return Rigid(r, t)
}

// IntrinsicsFromFoV gives [fx, fy, cx, cy] for an h×w image from the encoding's
// fields of view: f = (size/2)/tan(fov/2), principal point exactly (w/2, h/2).
// A zero field of view gives an infinite focal length, as in the reference.
func IntrinsicsFromFoV(enc [9]float32, h, w int) Intrinsics {
	fovH, fovW := float64(enc[7]), float64(enc[8])
	return Intrinsics{
		(float64(w) / 2) / math.Tan(fovW/2),
		(float64(h) / 2) / math.Tan(fovH/2),
		float64(w) / 2,
		float64(h) / 2,
	}
}

// EncodePose is the inverse of PoseEncToCamToWorld and IntrinsicsFromFoV: the
// rotation becomes a unit quaternion with w ≥ 0, and the fields of view are
// fov = 2·atan((size/2)/f).
func EncodePose(camToWorld Mat4, k Intrinsics, h, w int) [9]float32 {
	var r Mat3
	for i := range 3 {
		for j := range 3 {
			r[i][j] = camToWorld[i][j]
		}
	}
	q := MatToQuat(r)
	return [9]float32{
		float32(camToWorld[0][3]), float32(camToWorld[1][3]), float32(camToWorld[2][3]),
		float32(q[0]), float32(q[1]), float32(q[2]), float32(q[3]),
		float32(2 * math.Atan((float64(h)/2)/k[1])),
		float32(2 * math.Atan((float64(w)/2)/k[0])),
	}
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
