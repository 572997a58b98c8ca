// Package geom is the one home of the project's camera geometry, computed on
// the host in float64 (except where the reference's float32 arithmetic
// decides an outcome, see MeanFlow): quaternions and rigid transforms, the
// model's pose encoding and the intrinsics it stands for, depth unprojection
// and the confident points that make a map, the optical flow that picks
// keyframes, and the similarity alignment that stitches windows
// (reference-model.md §10, §12–§14). The node, `run` and the engine all use
// it; msgs only copies its values into message structs.
//
// Conventions (OpenCV camera axes, which are REP 103's optical frame: x right,
// y down, z forward):
//   - Image sizes are always given width first, then height: (w, h).
//   - A pose encoding is [cx, cy, cz, qx, qy, qz, qw, fov_h, fov_w]: the camera
//     centre in world coordinates, the camera→world rotation as an XYZW
//     quaternion that need not be unit length, and the two fields of view in
//     radians.
//   - CamToWorld matrices map camera points to world points: X_w = R·X_c + t.
//   - Intrinsics are [fx, fy, cx, cy] in pixels at the model resolution;
//     pixel (u, v) has its corner, not its centre, at integer coordinates.
//
// Degenerate input has one behaviour everywhere. A quaternion of (nearly)
// zero length or with a non-finite component, a rotation block that is
// singular, mirroring or not finite, and intrinsics with a focal length that
// is not finite and positive stand for no rotation and no camera: functions
// that return an error return one wrapping ErrDegenerate, and every function
// gives NaNs in place of the result, never a made-up identity. A depth that
// is not finite and positive has no surface point: UnprojectMap gives NaN
// for that pixel and ConfidentPoints skips it.
package geom

import "math"

// Mat3 is a row-major 3×3 matrix.
type Mat3 = [3][3]float64

// Mat4 is a row-major 4×4 homogeneous matrix.
type Mat4 = [4][4]float64

func encQuat(enc [9]float32) Quat {
	return Quat{float64(enc[3]), float64(enc[4]), float64(enc[5]), float64(enc[6])}
}

func encCentre(enc [9]float32) [3]float64 {
	return [3]float64{float64(enc[0]), float64(enc[1]), float64(enc[2])}
}

// PoseEncToCamToWorld is the camera→world pose a pose encoding stands for:
// rotation from the (unnormalised) quaternion, translation = camera centre. A
// quaternion without a direction gives a NaN rotation (see QuatToMat).
func PoseEncToCamToWorld(enc [9]float32) Mat4 {
	return Rigid(rotation(encQuat(enc)), encCentre(enc))
}

// PoseEncToWorldToCam is the inverse pose (what the reference's demo stores as
// "extrinsic"), by the closed-form rigid inverse [Rᵀ | −Rᵀt].
func PoseEncToWorldToCam(enc [9]float32) Mat4 {
	return InvertRigid(PoseEncToCamToWorld(enc))
}

// EncodePose is the inverse of PoseEncToCamToWorld and
// IntrinsicsFromPoseEnc for a w×h image: the rotation becomes a unit
// quaternion with w ≥ 0 (NaN for a degenerate rotation), and the fields of
// view are fov = 2·atan((size/2)/f).
func EncodePose(camToWorld Mat4, k Intrinsics, w, h int) [9]float32 {
	q, _ := MatToQuat(RotationOf(camToWorld))
	return [9]float32{
		float32(camToWorld[0][3]), float32(camToWorld[1][3]), float32(camToWorld[2][3]),
		float32(q[0]), float32(q[1]), float32(q[2]), float32(q[3]),
		float32(2 * math.Atan((float64(h)/2)/k[1])),
		float32(2 * math.Atan((float64(w)/2)/k[0])),
	}
}
