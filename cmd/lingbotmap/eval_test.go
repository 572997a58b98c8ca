package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lingbotmap/lingbotmap/engine/geom"
	"github.com/lingbotmap/lingbotmap/engine/render"
	"github.com/lingbotmap/lingbotmap/engine/traj"
)

// writeTUM writes a trajectory file for the eval command.
func writeTUM(t *testing.T, path string, tr traj.Trajectory) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := traj.WriteTUM(f, tr); err != nil {
		t.Fatal(err)
	}
}

// evalPair is a reference loop and an estimate in another frame, at scale
// 1/2.5, with 1 cm of noise per axis (in reference units) and its own clock
// jitter of a few milliseconds.
func evalPair(t *testing.T) (est, ref string) {
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(3, 4))
	var r, e traj.Trajectory
	rot, _ := geom.QuatToMat([4]float64{0.2, -0.3, 0.1, 0.9})
	for i := range 400 {
		a := float64(i) * 0.02
		p := traj.Pose{Time: 1000 + float64(i)/30, T: [3]float64{3 * math.Cos(a), 2 * math.Sin(a), 0.2 * a}, R: traj.Identity().R}
		r = append(r, p)
		// est = (1/2.5)·Rᵀ·(p + noise − t0)
		q := p
		for k := range 3 {
			q.T[k] += 0.01*rng.NormFloat64() - []float64{1, 2, 3}[k]
		}
		var x [3]float64
		for k := range 3 {
			x[k] = (rot[0][k]*q.T[0] + rot[1][k]*q.T[1] + rot[2][k]*q.T[2]) / 2.5
		}
		q.T = x
		for r := range 3 { // orientation in the estimate's frame: Rᵀ·I
			for c := range 3 {
				q.R[r][c] = rot[c][r]
			}
		}
		q.Time += 0.003 * math.Sin(float64(i))
		e = append(e, q)
	}
	est, ref = filepath.Join(dir, "est.tum"), filepath.Join(dir, "ref.tum")
	writeTUM(t, est, e)
	writeTUM(t, ref, r)
	return est, ref
}

func TestEvalCommand(t *testing.T) {
	est, ref := evalPair(t)
	dir := t.TempDir()
	jsonOut, plotOut := filepath.Join(dir, "ate.json"), filepath.Join(dir, "ate.png")
	root := newRootCmd()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetArgs([]string{"eval", est, ref, "--json", jsonOut, "--plot", plotOut})
	if err := root.ExecuteContext(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"associated: 400 pairs", "sim3, scale 2.49", "ATE [m]", "RPE(Δ=1) trans [m]", "RPE(Δ=1) rot [deg]"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	var got struct {
		Estimate string     `json:"estimate"`
		Pairs    int        `json:"associated_pairs"`
		ATE      traj.Stats `json:"ate"`
		RPE      traj.Stats `json:"rpe_trans"`
		Align    traj.Sim3  `json:"alignment"`
	}
	b, err := os.ReadFile(jsonOut)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	// 1 cm per axis: ATE RMSE ≈ √3 cm, RPE ≈ √6 cm; the scale is recovered.
	if got.Pairs != 400 || got.Estimate != est || math.Abs(got.ATE.RMSE-0.01*math.Sqrt(3)) > 0.002 ||
		math.Abs(got.RPE.RMSE-0.01*math.Sqrt(6)) > 0.003 || math.Abs(got.Align.S-2.5) > 0.01 {
		t.Errorf("JSON: %s", b)
	}
	img := decodePNG(t, plotOut)
	if bnd := img.Bounds(); bnd.Dx() != 1024 || bnd.Dy() != 960 || countColor(img, render.ReferenceColor()) < 500 {
		t.Errorf("plot %v with %d reference pixels", bnd, countColor(img, render.ReferenceColor()))
	}
}

func TestEvalErrors(t *testing.T) {
	est, ref := evalPair(t)
	dir := t.TempDir()
	nanFile := filepath.Join(dir, "nan.tum")
	if err := os.WriteFile(nanFile, []byte("# x\n1 0 0 0 0 0 0 1\n2 nan 0 0 0 0 0 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		args []string
		want string
		code int
	}{
		{[]string{"eval", est, ref, "--align", "affine"}, "sim3, se3 or none", exitUsage},
		{[]string{"eval", filepath.Join(dir, "none.tum"), ref}, "estimate: open trajectory", 0},
		{[]string{"eval", est, nanFile}, "reference: " + nanFile + ": line 3: value 2 (\"nan\") is not a finite number", 0},
		{[]string{"eval", est, ref, "--offset", "50"}, "only 0 of 400", 0},
		{[]string{"eval", est, ref, "--delta", "400"}, "RPE delta 400", 0},
		{[]string{"eval", est}, "accepts 2 arg", 0},
	}
	for _, c := range cases {
		root := newRootCmd()
		root.SetOut(&bytes.Buffer{})
		root.SetErr(&bytes.Buffer{})
		root.SetArgs(c.args)
		err := root.ExecuteContext(context.Background())
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: err = %v, want %q", c.args[1:], err, c.want)
			continue
		}
		var ec *exitCodeError
		if c.code != 0 && (!errors.As(err, &ec) || ec.code != c.code) {
			t.Errorf("%v: exit code not %d", c.args[1:], c.code)
		}
	}
}
