package mapio

import (
	"bufio"
	"fmt"
	"io"
	"math"
)

// StampedPose is one line of a TUM trajectory: time in seconds, position, and
// the unit quaternion (x, y, z, w) of the camera→world rotation.
type StampedPose struct {
	Time float64
	T    [3]float64
	Q    [4]float64 // x, y, z, w
}

// PoseFromMatrix makes a StampedPose from a camera→world 4×4 matrix.
func PoseFromMatrix(t float64, m [4][4]float64) StampedPose {
	q := QuatFromRotation([3][3]float64{
		{m[0][0], m[0][1], m[0][2]},
		{m[1][0], m[1][1], m[1][2]},
		{m[2][0], m[2][1], m[2][2]},
	})
	return StampedPose{Time: t, T: [3]float64{m[0][3], m[1][3], m[2][3]}, Q: q}
}

// QuatFromRotation converts a rotation matrix to a unit quaternion (x, y, z, w), w ≥ 0.
func QuatFromRotation(r [3][3]float64) [4]float64 {
	tr := r[0][0] + r[1][1] + r[2][2]
	var x, y, z, w float64
	switch {
	case tr > 0:
		s := math.Sqrt(tr+1) * 2
		w, x, y, z = s/4, (r[2][1]-r[1][2])/s, (r[0][2]-r[2][0])/s, (r[1][0]-r[0][1])/s
	case r[0][0] > r[1][1] && r[0][0] > r[2][2]:
		s := math.Sqrt(1+r[0][0]-r[1][1]-r[2][2]) * 2
		w, x, y, z = (r[2][1]-r[1][2])/s, s/4, (r[0][1]+r[1][0])/s, (r[0][2]+r[2][0])/s
	case r[1][1] > r[2][2]:
		s := math.Sqrt(1+r[1][1]-r[0][0]-r[2][2]) * 2
		w, x, y, z = (r[0][2]-r[2][0])/s, (r[0][1]+r[1][0])/s, s/4, (r[1][2]+r[2][1])/s
	default:
		s := math.Sqrt(1+r[2][2]-r[0][0]-r[1][1]) * 2
		w, x, y, z = (r[1][0]-r[0][1])/s, (r[0][2]+r[2][0])/s, (r[1][2]+r[2][1])/s, s/4
	}
	n := math.Sqrt(x*x + y*y + z*z + w*w)
	if w < 0 {
		n = -n
	}
	return [4]float64{x / n, y / n, z / n, w / n}
}

// WriteTUM writes "timestamp tx ty tz qx qy qz qw" lines.
func WriteTUM(w io.Writer, poses []StampedPose) error {
	bw := bufio.NewWriter(w)
	fmt.Fprintln(bw, "# timestamp tx ty tz qx qy qz qw")
	for _, p := range poses {
		fmt.Fprintf(bw, "%.9f %.9g %.9g %.9g %.9g %.9g %.9g %.9g\n", p.Time, p.T[0], p.T[1], p.T[2], p.Q[0], p.Q[1], p.Q[2], p.Q[3])
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("tum: %w", err)
	}
	return nil
}
