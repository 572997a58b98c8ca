// Package scale estimates the metric scale of the model's geometry: metres
// per model unit. The model reconstructs a scene only up to a scale fixed by
// its first frames; a robot needs metres. Three sources fix it: the robot's
// odometry (distances travelled), an aligned depth sensor (depths), and a
// known camera height above a flat ground (the ground plane's distance).
//
// Every estimator withholds the scale rather than guess: too little motion,
// too few valid pixels, no ground plane, or samples that disagree give an
// Estimate that is not Known, with the reason.
package scale

import (
	"errors"
	"fmt"
	"math"
	"slices"
)

// Estimate is one source's current answer.
type Estimate struct {
	// Scale is metres per model unit; 0 unless Known.
	Scale float64
	// Known says the scale can be used.
	Known bool
	// Confidence in [0, 1]: the share of samples that agree with Scale,
	// lowered by their spread.
	Confidence float64
	// Samples is the number of samples behind the estimate (pairs of
	// keyframes, pixels, planes); Inliers of them agree.
	Samples, Inliers int
	// Spread is the samples' relative dispersion (MAD / median).
	Spread float64
	// Reason says why the scale is withheld; empty when Known.
	Reason string
}

// String is the estimate for logs and diagnostics.
func (e Estimate) String() string {
	if !e.Known {
		return "unknown (" + e.Reason + ")"
	}
	return fmt.Sprintf("%.6g m/unit (confidence %.2f, %d of %d samples)", e.Scale, e.Confidence, e.Inliers, e.Samples)
}

// Source is something that estimates the scale.
type Source interface {
	Estimate() Estimate
}

// ErrNotFinite marks a sample with a NaN or infinite value.
var ErrNotFinite = errors.New("scale: sample is not finite")

// robust is the consensus of ratio samples: the median, the samples within
// tol (relative) of it, and the weighted least-squares value over those.
type robust struct {
	median, value, spread float64
	inliers               int
}

// consensus finds the scale that most samples agree on. num[i]/den[i] is a
// sample's ratio; the final value is Σ num·den / Σ den² over the inliers (the
// least-squares scale), which weighs long baselines and far depths more.
func consensus(num, den []float64, tol float64) robust {
	ratios := make([]float64, len(num))
	for i := range num {
		ratios[i] = num[i] / den[i]
	}
	med := median(ratios)
	dev := make([]float64, len(ratios))
	for i, r := range ratios {
		dev[i] = math.Abs(r - med)
	}
	mad := median(dev)
	var sxy, sxx float64
	n := 0
	for i, r := range ratios {
		if math.Abs(r/med-1) <= tol {
			sxy += num[i] * den[i]
			sxx += den[i] * den[i]
			n++
		}
	}
	out := robust{median: med, inliers: n, spread: mad / med}
	if n > 0 && sxx > 0 {
		out.value = sxy / sxx
	}
	return out
}

// median of xs (xs is reordered).
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	slices.Sort(xs)
	m := len(xs) / 2
	if len(xs)%2 == 1 {
		return xs[m]
	}
	return (xs[m-1] + xs[m]) / 2
}

// decide turns a consensus into an Estimate, withholding it when too few
// samples agree or they spread too far.
func decide(r robust, samples, minSamples int, minInlierFraction, maxSpread float64) Estimate {
	e := Estimate{Samples: samples, Inliers: r.inliers, Spread: r.spread}
	switch {
	case samples < minSamples:
		e.Reason = fmt.Sprintf("%d samples, %d needed", samples, minSamples)
	case !(r.median > 0) || math.IsInf(r.median, 0):
		e.Reason = "the samples give no positive scale"
	case float64(r.inliers) < minInlierFraction*float64(samples):
		e.Reason = fmt.Sprintf("samples disagree: %d of %d agree with the median", r.inliers, samples)
	case r.spread > maxSpread:
		e.Reason = fmt.Sprintf("samples spread %.1f %% around the median (at most %.1f %%)", 100*r.spread, 100*maxSpread)
	case !(r.value > 0) || math.IsInf(r.value, 0):
		e.Reason = "the agreeing samples give no positive scale"
	default:
		e.Known = true
		e.Scale = r.value
		frac := float64(r.inliers) / float64(samples)
		e.Confidence = frac * math.Max(0, 1-r.spread/maxSpread*0.5)
	}
	return e
}

func finite3(p [3]float64) bool {
	for _, v := range p {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return false
		}
	}
	return true
}

func dist(a, b [3]float64) float64 {
	dx, dy, dz := a[0]-b[0], a[1]-b[1], a[2]-b[2]
	return math.Sqrt(dx*dx + dy*dy + dz*dz)
}
