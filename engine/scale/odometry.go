package scale

import (
	"errors"
	"fmt"
)

// OdometryConfig tunes the odometry source.
type OdometryConfig struct {
	// Window is the number of keyframes kept (the newest).
	Window int
	// MinBaseline is the odometry distance in metres between two keyframes
	// below which their pair says nothing (standing still, turning in place).
	MinBaseline float64
	// MinPairs is the number of pairs with enough baseline needed.
	MinPairs int
	// InlierTolerance is how far (relative) a pair's ratio may lie from the
	// median and still count.
	InlierTolerance float64
	// MinInlierFraction of the pairs must agree.
	MinInlierFraction float64
	// MaxSpread is the largest relative spread (MAD / median) accepted.
	MaxSpread float64
}

// DefaultOdometryConfig suits a ground robot at walking speed.
func DefaultOdometryConfig() OdometryConfig {
	return OdometryConfig{Window: 40, MinBaseline: 0.1, MinPairs: 10,
		InlierTolerance: 0.1, MinInlierFraction: 0.6, MaxSpread: 0.15}
}

// Check rejects settings that cannot work.
func (c OdometryConfig) Check() error {
	switch {
	case c.Window < 2:
		return fmt.Errorf("scale: odometry window %d, need at least 2 keyframes", c.Window)
	case !(c.MinBaseline > 0):
		return fmt.Errorf("scale: odometry minimum baseline %g m, need > 0", c.MinBaseline)
	case c.MinPairs < 1:
		return fmt.Errorf("scale: odometry minimum pairs %d, need ≥ 1", c.MinPairs)
	case !(c.InlierTolerance > 0 && c.InlierTolerance < 1):
		return fmt.Errorf("scale: inlier tolerance %g, need (0, 1)", c.InlierTolerance)
	case !(c.MinInlierFraction > 0 && c.MinInlierFraction <= 1):
		return fmt.Errorf("scale: minimum inlier fraction %g, need (0, 1]", c.MinInlierFraction)
	case !(c.MaxSpread > 0):
		return fmt.Errorf("scale: maximum spread %g, need > 0", c.MaxSpread)
	}
	return nil
}

// Odometry fits the scale from the distances the camera travelled in the
// model's units and in the odometry's metres, over a sliding window of
// keyframes. Distances between pairs of keyframes are the same in any frame,
// so neither the odometry frame's origin nor its orientation matter; a pair
// spoiled by an odometry jump is an outlier of the consensus.
type Odometry struct {
	cfg   OdometryConfig
	model [][3]float64
	odom  [][3]float64
}

// NewOdometry makes an odometry source.
func NewOdometry(cfg OdometryConfig) (*Odometry, error) {
	if err := cfg.Check(); err != nil {
		return nil, err
	}
	return &Odometry{cfg: cfg}, nil
}

// Add records a keyframe: the camera's position in the model's map (model
// units) and the same camera's position in the odometry frame (metres: the
// odometry's base pose composed with the base → camera transform).
func (o *Odometry) Add(model, odom [3]float64) error {
	if !finite3(model) || !finite3(odom) {
		return errors.Join(ErrNotFinite, fmt.Errorf("model %v, odometry %v", model, odom))
	}
	o.model = append(o.model, model)
	o.odom = append(o.odom, odom)
	if n := len(o.model) - o.cfg.Window; n > 0 {
		o.model = append(o.model[:0], o.model[n:]...)
		o.odom = append(o.odom[:0], o.odom[n:]...)
	}
	return nil
}

// Reset forgets every keyframe (a new map).
func (o *Odometry) Reset() { o.model, o.odom = o.model[:0], o.odom[:0] }

// Len is the number of keyframes held.
func (o *Odometry) Len() int { return len(o.model) }

// Estimate fits the scale over the pairs of held keyframes with enough
// baseline.
func (o *Odometry) Estimate() Estimate {
	var num, den []float64
	for i := range o.model {
		for j := i + 1; j < len(o.model); j++ {
			dOdom := dist(o.odom[i], o.odom[j])
			if dOdom < o.cfg.MinBaseline {
				continue
			}
			dModel := dist(o.model[i], o.model[j])
			if !(dModel > 0) {
				// the model saw no motion where the odometry did: a pair
				// that can agree with no scale
				num = append(num, dOdom)
				den = append(den, 1e-300)
				continue
			}
			num = append(num, dOdom)
			den = append(den, dModel)
		}
	}
	if len(num) < o.cfg.MinPairs {
		e := Estimate{Samples: len(num)}
		e.Reason = fmt.Sprintf("not enough motion: %d keyframe pairs over %.2g m apart, %d needed (standing still or turning in place)",
			len(num), o.cfg.MinBaseline, o.cfg.MinPairs)
		return e
	}
	return decide(consensus(num, den, o.cfg.InlierTolerance), len(num), o.cfg.MinPairs, o.cfg.MinInlierFraction, o.cfg.MaxSpread)
}
