package node

import "math"

// rotationFromQuat is the rotation matrix of a unit quaternion (x, y, z, w).
func rotationFromQuat(x, y, z, w float64) [3][3]float64 {
	return [3][3]float64{
		{1 - 2*(y*y+z*z), 2 * (x*y - z*w), 2 * (x*z + y*w)},
		{2 * (x*y + z*w), 1 - 2*(x*x+z*z), 2 * (y*z - x*w)},
		{2 * (x*z - y*w), 2 * (y*z + x*w), 1 - 2*(x*x+y*y)},
	}
}

// PoseEncToCamToWorld turns the model's pose encoding [t(3), q XYZW (not
// normalised), fov_h, fov_w] into a camera→world matrix. Like the reference it
// scales by 2/|q|², so any non-zero quaternion gives a proper rotation.
func PoseEncToCamToWorld(enc [9]float32) [4][4]float64 {
	x, y, z, w := float64(enc[3]), float64(enc[4]), float64(enc[5]), float64(enc[6])
	n := math.Sqrt(x*x + y*y + z*z + w*w)
	if n == 0 {
		n, w = 1, 1
	}
	r := rotationFromQuat(x/n, y/n, z/n, w/n)
	return [4][4]float64{
		{r[0][0], r[0][1], r[0][2], float64(enc[0])},
		{r[1][0], r[1][1], r[1][2], float64(enc[1])},
		{r[2][0], r[2][1], r[2][2], float64(enc[2])},
		{0, 0, 0, 1},
	}
}

// IntrinsicsFromPoseEnc gives fx, fy, cx, cy for an image of w×h from the
// encoding's field of view, with the principal point at the exact centre as
// the reference does.
func IntrinsicsFromPoseEnc(enc [9]float32, w, h int) [4]float64 {
	fovH, fovW := float64(enc[7]), float64(enc[8])
	fy := float64(h) / 2 / math.Tan(fovH/2)
	fx := float64(w) / 2 / math.Tan(fovW/2)
	return [4]float64{fx, fy, float64(w) / 2, float64(h) / 2}
}

// mul multiplies two rigid transforms.
func mul(a, b [4][4]float64) [4][4]float64 {
	var c [4][4]float64
	for i := 0; i < 4; i++ {
		for j := 0; j < 4; j++ {
			for k := 0; k < 4; k++ {
				c[i][j] += a[i][k] * b[k][j]
			}
		}
	}
	return c
}

// invertRigid inverts [R|t] as [Rᵀ | −Rᵀt].
func invertRigid(m [4][4]float64) [4][4]float64 {
	var r [4][4]float64
	for i := 0; i < 3; i++ {
		for j := 0; j < 3; j++ {
			r[i][j] = m[j][i]
		}
	}
	for i := 0; i < 3; i++ {
		r[i][3] = -(r[i][0]*m[0][3] + r[i][1]*m[1][3] + r[i][2]*m[2][3])
	}
	r[3][3] = 1
	return r
}

// Unproject maps pixel (u, v) with depth d through intrinsics k = fx, fy, cx,
// cy into the camera frame and then into the world with camToWorld.
func Unproject(u, v int, d float64, k [4]float64, camToWorld [4][4]float64) [3]float64 {
	xc := (float64(u) - k[2]) / k[0] * d
	yc := (float64(v) - k[3]) / k[1] * d
	zc := d
	m := camToWorld
	return [3]float64{
		m[0][0]*xc + m[0][1]*yc + m[0][2]*zc + m[0][3],
		m[1][0]*xc + m[1][1]*yc + m[1][2]*zc + m[1][3],
		m[2][0]*xc + m[2][1]*yc + m[2][2]*zc + m[2][3],
	}
}
