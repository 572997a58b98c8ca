package msgs

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/bluenviron/goroslib/v2/pkg/msgs/geometry_msgs"
)

// randomRotation draws a uniformly random unit quaternion and its matrix,
// built independently of the code under test (axis-angle Rodrigues formula).
func randomRotation(rng *rand.Rand) (q [4]float64, m [4][4]float64) {
	axis := [3]float64{rng.NormFloat64(), rng.NormFloat64(), rng.NormFloat64()}
	n := math.Sqrt(axis[0]*axis[0] + axis[1]*axis[1] + axis[2]*axis[2])
	for i := range axis {
		axis[i] /= n
	}
	angle := rng.Float64() * math.Pi // w = cos(angle/2) ≥ 0
	s, c := math.Sin(angle), math.Cos(angle)
	kx, ky, kz := axis[0], axis[1], axis[2]
	m = [4][4]float64{
		{c + kx*kx*(1-c), kx*ky*(1-c) - kz*s, kx*kz*(1-c) + ky*s, rng.NormFloat64()},
		{ky*kx*(1-c) + kz*s, c + ky*ky*(1-c), ky*kz*(1-c) - kx*s, rng.NormFloat64()},
		{kz*kx*(1-c) - ky*s, kz*ky*(1-c) + kx*s, c + kz*kz*(1-c), rng.NormFloat64()},
		{0, 0, 0, 1},
	}
	h := math.Sin(angle / 2)
	q = [4]float64{kx * h, ky * h, kz * h, math.Cos(angle / 2)}
	return q, m
}

func maxDiff(a, b [4][4]float64) float64 {
	d := 0.0
	for i := range 4 {
		for j := range 4 {
			d = max(d, math.Abs(a[i][j]-b[i][j]))
		}
	}
	return d
}

func TestPoseQuaternionRandomRotations(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 2000 {
		q, m := randomRotation(rng)
		p := PoseFromMatrix(m)
		o := p.Orientation
		got := [4]float64{o.X, o.Y, o.Z, o.W}
		for k := range 4 {
			if math.Abs(got[k]-q[k]) > 1e-9 {
				t.Fatalf("rotation %d: quaternion %v, want %v", i, got, q)
			}
		}
		if p.Position.X != m[0][3] || p.Position.Y != m[1][3] || p.Position.Z != m[2][3] {
			t.Fatalf("rotation %d: position %+v, want the last column of %v", i, p.Position, m)
		}
		if d := maxDiff(MatrixFromPose(p), m); d > 1e-12 {
			t.Fatalf("rotation %d: matrix round trip differs by %g", i, d)
		}
		tf := TransformFromMatrix(m)
		if tf.Rotation != o || tf.Translation.X != m[0][3] || tf.Translation.Z != m[2][3] {
			t.Fatalf("rotation %d: transform %+v disagrees with pose %+v", i, tf, p)
		}
	}
}

// A rotation perturbed as float32 model outputs are still yields a unit
// quaternion close to the true one, and a scaled matrix yields the same one.
func TestPoseFromNoisyMatrix(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range 500 {
		q, m := randomRotation(rng)
		noisy := m
		for r := range 3 {
			for c := range 3 {
				noisy[r][c] = float64(float32(m[r][c])) + 1e-4*rng.NormFloat64()
			}
		}
		o := PoseFromMatrix(noisy).Orientation
		if n := math.Sqrt(o.X*o.X + o.Y*o.Y + o.Z*o.Z + o.W*o.W); math.Abs(n-1) > 1e-12 {
			t.Fatalf("case %d: |q| = %v", i, n)
		}
		dot := math.Abs(o.X*q[0] + o.Y*q[1] + o.Z*q[2] + o.W*q[3])
		if angle := 2 * math.Acos(min(dot, 1)); angle > 1e-3 {
			t.Fatalf("case %d: noisy rotation is %g rad from the truth", i, angle)
		}
		scaled := m
		for r := range 3 {
			for c := range 3 {
				scaled[r][c] *= 3.5
			}
		}
		if s := PoseFromMatrix(scaled).Orientation; math.Abs(s.X-q[0])+math.Abs(s.Y-q[1])+math.Abs(s.Z-q[2])+math.Abs(s.W-q[3]) > 1e-9 {
			t.Fatalf("case %d: scaled matrix gave %+v, want %v", i, s, q)
		}
	}
}

func TestPoseDegenerate(t *testing.T) {
	identity := geometry_msgs.Quaternion{W: 1}
	mirror := [4][4]float64{{-1, 0, 0, 0}, {0, 1, 0, 0}, {0, 0, 1, 0}, {0, 0, 0, 1}}
	for name, m := range map[string][4][4]float64{
		"zero":   {},
		"mirror": mirror,
		"nan":    {{math.NaN(), 0, 0, 0}, {0, 1, 0, 0}, {0, 0, 1, 0}},
		"rank 1": {{1, 1, 1, 0}, {1, 1, 1, 0}, {1, 1, 1, 0}},
	} {
		if o := PoseFromMatrix(m).Orientation; o != identity {
			t.Errorf("%s: orientation %+v, want identity", name, o)
		}
	}
	// 180° turns (trace -1) go through the non-trace branches.
	for axis := range 3 {
		m := [4][4]float64{{-1, 0, 0, 0}, {0, -1, 0, 0}, {0, 0, -1, 0}, {0, 0, 0, 1}}
		m[axis][axis] = 1
		o := PoseFromMatrix(m).Orientation
		got := [4]float64{o.X, o.Y, o.Z, o.W}
		want := [4]float64{}
		want[axis] = 1
		if got != want {
			t.Errorf("180° about axis %d: %v, want %v", axis, got, want)
		}
	}
	if m := MatrixFromPose(geometry_msgs.Pose{}); m != [4][4]float64{{1, 0, 0, 0}, {0, 1, 0, 0}, {0, 0, 1, 0}, {0, 0, 0, 1}} {
		t.Errorf("zero quaternion gave %v, want identity", m)
	}
}
