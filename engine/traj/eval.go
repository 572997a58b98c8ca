package traj

import (
	"errors"
	"fmt"
	"math"
	"slices"
)

// Options set up an evaluation. Start from DefaultOptions.
type Options struct {
	// MaxDiff is the largest stamp difference in seconds for two poses to be
	// associated. It defaults to 0.02.
	MaxDiff float64 `json:"max_diff"`
	// Offset is added to the estimate's stamps before association (as the
	// TUM tools' and evo's time offset of the second, estimated, trajectory).
	Offset float64 `json:"offset"`
	// Align is the transform fitted before the errors are measured. It
	// defaults to sim3.
	Align Alignment `json:"align"`
	// Delta is the RPE step in associated poses. It defaults to 1.
	Delta int `json:"delta"`
}

// DefaultOptions are the TUM benchmark's association tolerance, Sim(3)
// alignment (monocular) and RPE between consecutive poses.
func DefaultOptions() Options {
	return Options{MaxDiff: 0.02, Align: AlignSim3, Delta: 1}
}

// Stats summarises a list of errors.
type Stats struct {
	N      int     `json:"n"`
	RMSE   float64 `json:"rmse"`
	Mean   float64 `json:"mean"`
	Median float64 `json:"median"`
	Std    float64 `json:"std"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
}

// Summarise computes the statistics of errs (population standard deviation;
// the median of an even count is the mean of the two middle values).
func Summarise(errs []float64) Stats {
	s := Stats{N: len(errs)}
	if len(errs) == 0 {
		return s
	}
	sorted := slices.Clone(errs)
	slices.Sort(sorted)
	var sum, sq float64
	for _, e := range sorted {
		sum += e
		sq += e * e
	}
	n := float64(len(errs))
	s.Mean = sum / n
	s.RMSE = math.Sqrt(sq / n)
	var v float64
	for _, e := range sorted {
		v += (e - s.Mean) * (e - s.Mean)
	}
	s.Std = math.Sqrt(v / n)
	s.Min, s.Max = sorted[0], sorted[len(sorted)-1]
	if m := len(sorted); m%2 == 1 {
		s.Median = sorted[m/2]
	} else {
		s.Median = (sorted[m/2-1] + sorted[m/2]) / 2
	}
	return s
}

// Report is the outcome of Evaluate.
type Report struct {
	Options   Options `json:"options"`
	EstPoses  int     `json:"est_poses"`
	RefPoses  int     `json:"ref_poses"`
	Pairs     int     `json:"associated_pairs"`
	Alignment Sim3    `json:"alignment"`
	// ATE is the absolute trajectory error in the reference's units.
	ATE Stats `json:"ate"`
	// RPETrans and RPERot are the relative pose errors (translation in the
	// reference's units, rotation in degrees) at Options.Delta.
	RPETrans Stats `json:"rpe_trans"`
	RPERot   Stats `json:"rpe_rot_deg"`

	// The associated poses: the estimate after alignment and the reference,
	// pair by pair, and each pair's ATE error (for plots).
	Aligned   Trajectory `json:"-"`
	Reference Trajectory `json:"-"`
	ATEErrors []float64  `json:"-"`
}

// Evaluate associates est with ref, aligns est onto ref and measures ATE and
// RPE as described in the package comment.
func Evaluate(est, ref Trajectory, opt Options) (*Report, error) {
	if _, err := ParseAlignment(string(opt.Align)); err != nil {
		return nil, err
	}
	if opt.Delta < 1 {
		return nil, fmt.Errorf("RPE delta must be at least 1 pose, not %d", opt.Delta)
	}
	if len(est) == 0 || len(ref) == 0 {
		return nil, errors.New("evaluation needs poses in both trajectories")
	}
	pairs, err := Associate(est, ref, opt.MaxDiff, opt.Offset)
	if err != nil {
		return nil, err
	}
	rep := &Report{Options: opt, EstPoses: len(est), RefPoses: len(ref), Pairs: len(pairs)}
	if len(pairs) < 3 {
		return nil, fmt.Errorf("only %d of %d estimated poses have a reference pose within %g s (need at least 3): check that both files use the same clock, or raise the max difference / set the time offset",
			len(pairs), len(est), opt.MaxDiff)
	}
	if len(pairs) <= opt.Delta {
		return nil, fmt.Errorf("RPE delta %d needs more than %d associated poses, have %d", opt.Delta, opt.Delta, len(pairs))
	}
	e := make(Trajectory, len(pairs))
	r := make(Trajectory, len(pairs))
	for i, p := range pairs {
		e[i], r[i] = est[p.Est], ref[p.Ref]
	}
	g := Identity()
	if opt.Align != AlignNone {
		g, err = Umeyama(e.Positions(), r.Positions(), opt.Align == AlignSim3)
		if err != nil {
			return nil, err
		}
	}
	rep.Alignment = g
	for i := range e {
		e[i] = g.ApplyPose(e[i])
	}
	rep.Aligned, rep.Reference = e, r

	ate := make([]float64, len(e))
	for i := range e {
		ate[i] = dist(e[i].T, r[i].T)
	}
	rep.ATEErrors = ate
	rep.ATE = Summarise(ate)

	var rt, rr []float64
	for i := 0; i+opt.Delta < len(e); i++ {
		j := i + opt.Delta
		qRel := relative(r[i], r[j])
		pRel := relative(e[i], e[j])
		d := relative(qRel, pRel)
		rt = append(rt, math.Sqrt(d.T[0]*d.T[0]+d.T[1]*d.T[1]+d.T[2]*d.T[2]))
		rr = append(rr, rotationAngle(d.R)*180/math.Pi)
	}
	rep.RPETrans = Summarise(rt)
	rep.RPERot = Summarise(rr)
	return rep, nil
}

// relative returns a⁻¹·b.
func relative(a, b Pose) Pose {
	rt := transpose(a.R)
	d := [3]float64{b.T[0] - a.T[0], b.T[1] - a.T[1], b.T[2] - a.T[2]}
	return Pose{R: mulMat(rt, b.R), T: mulVec(rt, d)}
}

func dist(a, b [3]float64) float64 {
	dx, dy, dz := a[0]-b[0], a[1]-b[1], a[2]-b[2]
	return math.Sqrt(dx*dx + dy*dy + dz*dz)
}
