package geom

import (
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

func allNaN(vals ...float64) bool {
	for _, v := range vals {
		if !math.IsNaN(v) {
			return false
		}
	}
	return true
}

func mat3Vals(m Mat3) []float64 { return append(append(m[0][:], m[1][:]...), m[2][:]...) }

func maxDiff3(a, b Mat3) float64 {
	d := 0.0
	for i := range 3 {
		for j := range 3 {
			d = math.Max(d, math.Abs(a[i][j]-b[i][j]))
		}
	}
	return d
}

// A quaternion without a direction is an error and NaNs everywhere, never the
// identity (one of the old copies read it as the identity, another as NaN).
func TestQuatToMatDegenerate(t *testing.T) {
	inf, nan := math.Inf(1), math.NaN()
	for _, q := range []Quat{{0, 0, 0, 0}, {1e-13, 0, 0, 0}, {nan, 0, 0, 1}, {0, inf, 0, 1}, {0, 0, -inf, 0}} {
		m, err := QuatToMat(q)
		if !errors.Is(err, ErrDegenerate) {
			t.Errorf("%v: error %v, want ErrDegenerate", q, err)
		}
		if !allNaN(mat3Vals(m)...) {
			t.Errorf("%v: matrix %v, want NaNs", q, m)
		}
		if _, err := Compose([3]float64{1, 2, 3}, q); !errors.Is(err, ErrDegenerate) {
			t.Errorf("Compose with %v: %v", q, err)
		}
	}
	c2w := PoseEncToCamToWorld([9]float32{1, 2, 3, 0, 0, 0, 0, 1, 1})
	if !allNaN(c2w[0][0], c2w[1][1], c2w[2][2], c2w[0][1]) || c2w[0][3] != 1 {
		t.Errorf("zero quaternion in a pose encoding gave %v, want a NaN rotation", c2w)
	}
	// The smallest quaternions still read as directions give the same rotation as unit ones.
	a, errA := QuatToMat(Quat{1e-12, 0, 0, 1e-12})
	b, errB := QuatToMat(Quat{1, 0, 0, 1})
	if errA != nil || errB != nil || maxDiff3(a, b) > 1e-12 {
		t.Errorf("tiny quaternion: %v %v, %v vs %v", errA, errB, a, b)
	}
}

// NearestRotation recovers R from R·S for any symmetric positive definite S
// (the polar decomposition), so a scaled or sheared model output gives the
// rotation it was meant to be.
func TestNearestRotationPolarFactor(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for i := range 100 {
		rot := randomRotation(r)
		var b Mat3
		for i := range 3 {
			for j := range 3 {
				b[i][j] = r.NormFloat64() * 0.3
			}
		}
		s := MulMat3(Transpose3(b), b) // symmetric positive semi-definite
		for i := range 3 {
			s[i][i] += 0.5 + r.Float64()
		}
		got, err := NearestRotation(MulMat3(rot, s))
		if err != nil {
			t.Fatal(err)
		}
		if d := maxDiff3(got, rot); d > 1e-10 {
			t.Fatalf("case %d: polar factor off by %g", i, d)
		}
	}
	inf := math.Inf(1)
	for name, m := range map[string]Mat3{
		"zero":      {},
		"singular":  {{1, 0, 0}, {0, 1, 0}, {0, 0, 0}},
		"mirroring": {{1, 0, 0}, {0, 1, 0}, {0, 0, -1}},
		"NaN":       {{math.NaN(), 0, 0}, {0, 1, 0}, {0, 0, 1}},
		"Inf":       {{inf, 0, 0}, {0, 1, 0}, {0, 0, 1}},
	} {
		got, err := NearestRotation(m)
		if !errors.Is(err, ErrDegenerate) || !allNaN(mat3Vals(got)...) {
			t.Errorf("%s: %v, %v; want ErrDegenerate and NaNs", name, got, err)
		}
		q, err := MatToQuat(m)
		if !errors.Is(err, ErrDegenerate) || !allNaN(q[:]...) {
			t.Errorf("MatToQuat %s: %v, %v; want ErrDegenerate and NaNs", name, q, err)
		}
	}
}

// A noisy rotation (a float32 round trip, a model output) gives the unit
// quaternion of its nearest rotation; a scaled one gives exactly the same.
func TestMatToQuatNoisyAndScaled(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for range 100 {
		q := Quat{r.NormFloat64(), r.NormFloat64(), r.NormFloat64(), r.NormFloat64()}
		n := math.Sqrt(q[0]*q[0] + q[1]*q[1] + q[2]*q[2] + q[3]*q[3])
		if q[3] < 0 {
			n = -n
		}
		for i := range q {
			q[i] /= n
		}
		m := rotation(q)
		noisy, scaled := m, m
		for i := range 3 {
			for j := range 3 {
				noisy[i][j] += 1e-4 * r.NormFloat64()
				scaled[i][j] *= 3.5
			}
		}
		gn, err := MatToQuat(noisy)
		if err != nil {
			t.Fatal(err)
		}
		gs, _ := MatToQuat(scaled)
		for i := range 4 {
			if math.Abs(gn[i]-q[i]) > 1e-3 || math.Abs(gs[i]-q[i]) > 1e-12 {
				t.Fatalf("q %v: noisy gave %v, scaled %v", q, gn, gs)
			}
		}
		if nn := gn[0]*gn[0] + gn[1]*gn[1] + gn[2]*gn[2] + gn[3]*gn[3]; math.Abs(nn-1) > 1e-12 {
			t.Fatalf("noisy: |q|² = %.15g", nn)
		}
	}
}

func TestComposeDecomposeAndParse(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	for range 50 {
		m := Rigid(randomRotation(r), [3]float64{r.NormFloat64(), r.NormFloat64(), r.NormFloat64()})
		tr, q, err := Decompose(m)
		if err != nil {
			t.Fatal(err)
		}
		back, err := Compose(tr, q)
		if err != nil {
			t.Fatal(err)
		}
		for i := range 4 {
			for j := range 4 {
				if math.Abs(back[i][j]-m[i][j]) > 1e-12 {
					t.Fatalf("Compose(Decompose(m)) = %v, want %v", back, m)
				}
			}
		}
		id := Mul4(m, InvertRigid(m))
		for i := range 4 {
			for j := range 4 {
				want := 0.0
				if i == j {
					want = 1
				}
				if math.Abs(id[i][j]-want) > 1e-12 {
					t.Fatalf("m·m⁻¹ = %v", id)
				}
			}
		}
	}
	if _, _, err := Decompose(Mat4{{1, 0, 0, math.NaN()}, {0, 1, 0, 0}, {0, 0, 1, 0}, {0, 0, 0, 1}}); !errors.Is(err, ErrDegenerate) {
		t.Errorf("NaN translation: %v", err)
	}
	if _, _, err := Decompose(Mat4{{1, 0, 0, 0}, {0, 1, 0, 0}, {0, 0, 0, 0}, {0, 0, 0, 1}}); !errors.Is(err, ErrDegenerate) {
		t.Errorf("singular rotation: %v", err)
	}

	// A quarter turn about z, unnormalised, 1 m along x.
	m, err := ParseTransform(" 1 0 0  0 0 2 2 ")
	if err != nil {
		t.Fatal(err)
	}
	if p := Apply(m, [3]float64{1, 0, 0}); math.Abs(p[0]-1) > 1e-15 || math.Abs(p[1]-1) > 1e-15 || math.Abs(p[2]) > 1e-15 {
		t.Errorf("x axis went to %v, want (1, 1, 0)", p)
	}
	for _, c := range []struct{ in, want string }{
		{"1 2 3", "want 7 numbers"},
		{"1 2 3 0 0 0 x", `"x" is not a finite number`},
		{"1 2 3 0 0 0 NaN", `"NaN" is not a finite number`},
		{"1 2 3 0 0 0 0", "no direction"},
	} {
		if _, err := ParseTransform(c.in); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParseTransform(%q): %v, want %q", c.in, err, c.want)
		}
	}
}

// Width comes before height: a 100×50 image with 90° fields of view has
// fx = 50, fy = 25 and its principal point at (50, 25).
func TestIntrinsicsWidthFirst(t *testing.T) {
	q := float32(math.Pi / 2)
	k := IntrinsicsFromPoseEnc([9]float32{0, 0, 0, 0, 0, 0, 1, q, q}, 100, 50)
	want := Intrinsics{50, 25, 50, 25}
	for i := range 4 {
		if math.Abs(k[i]-want[i]) > 1e-5 {
			t.Fatalf("intrinsics %v, want %v", k, want)
		}
	}
	enc := EncodePose(Rigid(rotation(Quat{0, 0, 0, 1}), [3]float64{}), k, 100, 50)
	if math.Abs(float64(enc[7]-q)) > 1e-6 || math.Abs(float64(enc[8]-q)) > 1e-6 {
		t.Errorf("fields of view came back as %v, %v", enc[7], enc[8])
	}
	for _, bad := range []Intrinsics{{0, 1, 0, 0}, {1, -1, 0, 0}, {math.Inf(1), 1, 0, 0}, {1, 1, math.NaN(), 0}, {1, 1, 0, math.Inf(-1)}} {
		if err := CheckIntrinsics(bad); !errors.Is(err, ErrDegenerate) {
			t.Errorf("CheckIntrinsics(%v) = %v", bad, err)
		}
	}
	if err := CheckIntrinsics(k); err != nil {
		t.Error(err)
	}
}

// Decompose against rotations built independently of this package (axis and
// angle by Rodrigues' formula), including the 180° turns that take the
// non-trace branches.
func TestDecomposeIndependentRotations(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	check := func(name string, axis [3]float64, angle float64) {
		n := math.Sqrt(axis[0]*axis[0] + axis[1]*axis[1] + axis[2]*axis[2])
		kx, ky, kz := axis[0]/n, axis[1]/n, axis[2]/n
		s, c := math.Sin(angle), math.Cos(angle)
		m := Mat4{
			{c + kx*kx*(1-c), kx*ky*(1-c) - kz*s, kx*kz*(1-c) + ky*s, 1},
			{ky*kx*(1-c) + kz*s, c + ky*ky*(1-c), ky*kz*(1-c) - kx*s, -2},
			{kz*kx*(1-c) - ky*s, kz*ky*(1-c) + kx*s, c + kz*kz*(1-c), 3},
			{0, 0, 0, 1},
		}
		h := math.Sin(angle / 2)
		want := Quat{kx * h, ky * h, kz * h, math.Cos(angle / 2)} // angle ∈ [0, π]: w ≥ 0
		tr, q, err := Decompose(m)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if tr != [3]float64{1, -2, 3} {
			t.Fatalf("%s: translation %v", name, tr)
		}
		for i := range 4 {
			if math.Abs(q[i]-want[i]) > 1e-9 {
				t.Fatalf("%s: quaternion %v, want %v", name, q, want)
			}
		}
	}
	for range 2000 {
		check("random", [3]float64{rng.NormFloat64(), rng.NormFloat64(), rng.NormFloat64()}, rng.Float64()*math.Pi)
	}
	for axis := range 3 {
		a := [3]float64{}
		a[axis] = 1
		check("180°", a, math.Pi)
	}
}

// ParseTransform reads configuration text: whatever it is given, it returns
// an error or a rigid transform with a proper rotation, never NaNs.
func FuzzParseTransform(f *testing.F) {
	for _, s := range []string{"0 0 0 0 0 0 1", "1 2 3 0 0 2 2", "1 2 3 0 0 0 0", "1e308 0 0 1e300 1e300 0 0", "1 2 3", "x y z 0 0 0 1", "0 0 0 1e-13 0 0 0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		m, err := ParseTransform(s)
		if err != nil {
			return
		}
		r := RotationOf(m)
		if p := MulMat3(r, Transpose3(r)); maxDiff3(p, Mat3{{1, 0, 0}, {0, 1, 0}, {0, 0, 1}}) > 1e-9 || !finite3(TranslationOf(m)) {
			t.Fatalf("%q gave %v", s, m)
		}
	})
}
