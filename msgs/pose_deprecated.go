// The matrix conversions below are the last copy of quaternion math outside
// engine/geom. They stay only while node/ calls them: the node core is
// switching to geom.Decompose / geom.Compose with Pose, Transform and
// PoseParts (pose.go); then this file and its test go.

package msgs

import (
	"math"

	"github.com/bluenviron/goroslib/v2/pkg/msgs/geometry_msgs"
)

// PoseFromMatrix converts a rigid 4×4 transform (rotation in the upper-left
// 3×3, translation in the last column) to a Pose. The rotation is first
// replaced by the nearest true rotation, because model outputs and float32
// round trips are never exactly orthonormal; the quaternion is unit length
// with w ≥ 0. A degenerate or mirroring 3×3 block, or non-finite entries,
// give the identity orientation, since no rotation can represent them.
//
// Deprecated: use Pose(geom.Decompose(m)), which reports degenerate input.
func PoseFromMatrix(m [4][4]float64) geometry_msgs.Pose {
	x, y, z, w := matrixQuaternion(m)
	return geometry_msgs.Pose{
		Position:    geometry_msgs.Point{X: m[0][3], Y: m[1][3], Z: m[2][3]},
		Orientation: geometry_msgs.Quaternion{X: x, Y: y, Z: z, W: w},
	}
}

// TransformFromMatrix is PoseFromMatrix for a geometry_msgs/Transform, the
// payload of TF messages.
//
// Deprecated: use Transform(geom.Decompose(m)).
func TransformFromMatrix(m [4][4]float64) geometry_msgs.Transform {
	x, y, z, w := matrixQuaternion(m)
	return geometry_msgs.Transform{
		Translation: geometry_msgs.Vector3{X: m[0][3], Y: m[1][3], Z: m[2][3]},
		Rotation:    geometry_msgs.Quaternion{X: x, Y: y, Z: z, W: w},
	}
}

// MatrixFromPose is the inverse of PoseFromMatrix. The quaternion is
// normalised first; a zero or non-finite quaternion is read as the identity.
//
// Deprecated: use geom.Compose(PoseParts(p)), which reports degenerate input.
func MatrixFromPose(p geometry_msgs.Pose) [4][4]float64 {
	q := p.Orientation
	x, y, z, w := q.X, q.Y, q.Z, q.W
	n := math.Sqrt(x*x + y*y + z*z + w*w)
	if n == 0 || math.IsNaN(n) || math.IsInf(n, 0) {
		x, y, z, w, n = 0, 0, 0, 1, 1
	}
	x, y, z, w = x/n, y/n, z/n, w/n
	return [4][4]float64{
		{1 - 2*(y*y+z*z), 2 * (x*y - z*w), 2 * (x*z + y*w), p.Position.X},
		{2 * (x*y + z*w), 1 - 2*(x*x+z*z), 2 * (y*z - x*w), p.Position.Y},
		{2 * (x*z - y*w), 2 * (y*z + x*w), 1 - 2*(x*x+y*y), p.Position.Z},
		{0, 0, 0, 1},
	}
}

type mat3 [3][3]float64

func (a mat3) det() float64 {
	return a[0][0]*(a[1][1]*a[2][2]-a[1][2]*a[2][1]) -
		a[0][1]*(a[1][0]*a[2][2]-a[1][2]*a[2][0]) +
		a[0][2]*(a[1][0]*a[2][1]-a[1][1]*a[2][0])
}

// invTranspose returns (a⁻¹)ᵀ, which is the cofactor matrix over det.
func (a mat3) invTranspose(det float64) mat3 {
	var c mat3
	for i := range 3 {
		for j := range 3 {
			i1, i2 := (i+1)%3, (i+2)%3
			j1, j2 := (j+1)%3, (j+2)%3
			c[i][j] = (a[i1][j1]*a[i2][j2] - a[i1][j2]*a[i2][j1]) / det
		}
	}
	return c
}

// nearestRotation returns the orthonormal polar factor of a by Newton's
// iteration R ← (R + R⁻ᵀ)/2, which converges quadratically to the rotation
// closest to a in the Frobenius norm. ok is false when a is singular,
// mirroring or not finite.
func nearestRotation(a mat3) (mat3, bool) {
	scale := 0.0
	for i := range 3 {
		for j := range 3 {
			v := a[i][j]
			if math.IsNaN(v) || math.IsInf(v, 0) {
				return mat3{}, false
			}
			scale = max(scale, math.Abs(v))
		}
	}
	if scale == 0 {
		return mat3{}, false
	}
	for i := range 3 {
		for j := range 3 {
			a[i][j] /= scale
		}
	}
	for range 50 {
		d := a.det()
		if !(d > 1e-12) {
			return mat3{}, false
		}
		it := a.invTranspose(d)
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
	return a, true
}

// matrixQuaternion extracts the unit quaternion (x, y, z, w), w ≥ 0, of the
// rotation nearest to m's upper-left block (Shepperd's method: divide by the
// largest of the four candidate terms for accuracy).
func matrixQuaternion(m [4][4]float64) (x, y, z, w float64) {
	r, ok := nearestRotation(mat3{
		{m[0][0], m[0][1], m[0][2]},
		{m[1][0], m[1][1], m[1][2]},
		{m[2][0], m[2][1], m[2][2]},
	})
	if !ok {
		return 0, 0, 0, 1
	}
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
	return x, y, z, w
}
