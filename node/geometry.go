package node

// rotationFromQuat is the rotation matrix of a unit quaternion (x, y, z, w).
func rotationFromQuat(x, y, z, w float64) [3][3]float64 {
	return [3][3]float64{
		{1 - 2*(y*y+z*z), 2 * (x*y - z*w), 2 * (x*z + y*w)},
		{2 * (x*y + z*w), 1 - 2*(x*x+z*z), 2 * (y*z - x*w)},
		{2 * (x*z - y*w), 2 * (y*z + x*w), 1 - 2*(x*x+y*y)},
	}
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
