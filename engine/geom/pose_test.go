package geom

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

const goldenH, goldenW = 42, 70

// relErr is |a−b| / max(|b|, floor): relative where values are large, absolute
// near zero (the floor keeps tiny components from dominating).
func relErr(a, b, floor float64) float64 {
	return math.Abs(a-b) / math.Max(math.Abs(b), floor)
}

// TestPoseEncodingMatchesGolden checks the c2w→w2c extrinsic and the FoV
// intrinsics against the reference's postprocessing of the same pose encodings.
func TestPoseEncodingMatchesGolden(t *testing.T) {
	for _, c := range []string{"stream_kf1", "windowed_kf2"} {
		out := golden(t, c, "outputs.safetensors")
		pe, _ := out("pose_enc")
		ext, _ := out("extrinsic")
		intr, _ := out("intrinsic")
		var worstE, worstK float64
		for f, enc := range poses(pe) {
			w2c := PoseEncToWorldToCam(enc)
			for i := range 3 {
				for j := range 4 {
					worstE = math.Max(worstE, relErr(w2c[i][j], float64(ext[12*f+4*i+j]), 1))
				}
			}
			k := IntrinsicsFromPoseEnc(enc, goldenW, goldenH)
			want := [4]float32{intr[9*f], intr[9*f+4], intr[9*f+2], intr[9*f+5]}
			for i := range 4 {
				worstK = math.Max(worstK, relErr(k[i], float64(want[i]), 1))
			}
			if intr[9*f+1] != 0 || intr[9*f+3] != 0 || intr[9*f+8] != 1 {
				t.Fatalf("%s frame %d: golden intrinsic is not [[fx 0 cx] [0 fy cy] [0 0 1]]", c, f)
			}
		}
		t.Logf("%s: extrinsic max rel err %.2g, intrinsic %.2g", c, worstE, worstK)
		if worstE > 1e-5 || worstK > 1e-5 {
			t.Errorf("%s: extrinsic err %g / intrinsic err %g exceed 1e-5", c, worstE, worstK)
		}
	}
}

// TestEncodePoseRoundTrip re-encodes the golden poses: centre and FoV come back,
// the quaternion comes back normalised with w ≥ 0.
func TestEncodePoseRoundTrip(t *testing.T) {
	out := golden(t, "stream_kf1", "outputs.safetensors")
	pe, _ := out("pose_enc")
	for f, enc := range poses(pe) {
		got := EncodePose(PoseEncToCamToWorld(enc), IntrinsicsFromPoseEnc(enc, goldenW, goldenH), goldenW, goldenH)
		q := encQuat(enc)
		n := math.Sqrt(q[0]*q[0] + q[1]*q[1] + q[2]*q[2] + q[3]*q[3])
		sign := 1.0
		if q[3] < 0 {
			sign = -1
		}
		want := enc
		for i := range 4 {
			want[3+i] = float32(sign * q[i] / n)
		}
		for i := range 9 {
			if relErr(float64(got[i]), float64(want[i]), 1) > 2e-6 {
				t.Fatalf("frame %d: re-encoded %v, want %v", f, got, want)
			}
		}
	}
}

func randomRotation(r *rand.Rand) Mat3 {
	q := [4]float64{r.NormFloat64(), r.NormFloat64(), r.NormFloat64(), r.NormFloat64()}
	return rotation(q)
}

func axisAngle(axis [3]float64, angle float64) Mat3 {
	s, c := math.Sin(angle/2), math.Cos(angle/2)
	n := math.Sqrt(axis[0]*axis[0] + axis[1]*axis[1] + axis[2]*axis[2])
	return rotation([4]float64{s * axis[0] / n, s * axis[1] / n, s * axis[2] / n, c})
}

// TestMatToQuat exercises every candidate branch (near-identity and 180° turns
// about each axis pick different candidates) and random rotations.
func TestMatToQuat(t *testing.T) {
	cases := map[string]Mat3{
		"identity": {{1, 0, 0}, {0, 1, 0}, {0, 0, 1}},
		"x 180°":   axisAngle([3]float64{1, 0, 0}, math.Pi),
		"y 180°":   axisAngle([3]float64{0, 1, 0}, math.Pi),
		"z 180°":   axisAngle([3]float64{0, 0, 1}, math.Pi),
		"x 179°":   axisAngle([3]float64{1, 0, 0}, math.Pi*179/180),
		"diag 3":   axisAngle([3]float64{1, -2, 0.5}, 3),
	}
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 200 {
		cases[fmt.Sprintf("random %d", i)] = randomRotation(r)
	}
	for name, m := range cases {
		q, err := MatToQuat(m)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if q[3] < 0 {
			t.Errorf("%s: w = %g < 0", name, q[3])
		}
		if n := q[0]*q[0] + q[1]*q[1] + q[2]*q[2] + q[3]*q[3]; math.Abs(n-1) > 1e-12 {
			t.Errorf("%s: |q|² = %.15g", name, n)
		}
		back := rotation(q)
		for i := range 3 {
			for j := range 3 {
				if math.Abs(back[i][j]-m[i][j]) > 1e-12 {
					t.Fatalf("%s: R(q(R)) = %v, want %v", name, back, m)
				}
			}
		}
	}
	// The unnormalised quaternion convention: scaling q changes nothing.
	a := rotation([4]float64{0.1, -0.3, 0.2, 0.9})
	b := rotation([4]float64{0.5, -1.5, 1, 4.5})
	for i := range 3 {
		for j := range 3 {
			if math.Abs(a[i][j]-b[i][j]) > 1e-15 {
				t.Fatalf("R(5q) ≠ R(q): %v vs %v", b, a)
			}
		}
	}
}

func TestInvertRigid(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	m := Rigid(randomRotation(r), [3]float64{1, -2, 3})
	inv := InvertRigid(m)
	for i := range 4 {
		for j := range 4 {
			var s float64
			for k := range 4 {
				s += m[i][k] * inv[k][j]
			}
			want := 0.0
			if i == j {
				want = 1
			}
			if math.Abs(s-want) > 1e-12 {
				t.Fatalf("M·M⁻¹[%d][%d] = %g", i, j, s)
			}
		}
	}
}

// TestUnprojectMatchesGolden reproduces the viewer-style world points of every
// golden frame from its depth and pose.
func TestUnprojectMatchesGolden(t *testing.T) {
	out := golden(t, "stream_kf1", "outputs.safetensors")
	pe, _ := out("pose_enc")
	depth, _ := out("depth")
	want, _ := out("world_points_from_depth")
	n := goldenH * goldenW
	var worst float64
	for f, enc := range poses(pe) {
		got, err := UnprojectMap(depth[f*n:(f+1)*n], goldenW, goldenH, IntrinsicsFromPoseEnc(enc, goldenW, goldenH), PoseEncToCamToWorld(enc))
		if err != nil {
			t.Fatal(err)
		}
		for i, g := range got {
			worst = math.Max(worst, relErr(float64(g), float64(want[3*f*n+i]), 1))
		}
	}
	t.Logf("world_points_from_depth: max rel err %.2g", worst)
	if worst > 1e-5 {
		t.Errorf("world points differ from golden by %g (> 1e-5)", worst)
	}
	if _, err := UnprojectMap(make([]float32, 5), 3, 2, Intrinsics{1, 1, 0, 0}, Rigid(Identity().R, [3]float64{})); err == nil {
		t.Error("a depth map of the wrong size was accepted")
	}
}
