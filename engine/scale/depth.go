package scale

import (
	"fmt"
	"math"
)

// DepthConfig tunes the depth-sensor source.
type DepthConfig struct {
	// MinDepth and MaxDepth bound the sensor depths used, in metres (outside
	// them a sensor is unreliable).
	MinDepth, MaxDepth float64
	// MinPixels is the number of valid pixel pairs a frame needs.
	MinPixels int
	// Frames is the number of recent frames whose ratios are pooled.
	Frames int
	// InlierTolerance, MinInlierFraction, MaxSpread: as for odometry, over
	// the per-frame ratios.
	InlierTolerance, MinInlierFraction, MaxSpread float64
	// MaxFrameSpread is the largest spread of one frame's pixel ratios for
	// the frame to count (a misaligned or wrong depth image spreads).
	MaxFrameSpread float64
}

// DefaultDepthConfig suits an RGB-D camera.
func DefaultDepthConfig() DepthConfig {
	return DepthConfig{MinDepth: 0.2, MaxDepth: 10, MinPixels: 500, Frames: 30,
		InlierTolerance: 0.1, MinInlierFraction: 0.6, MaxSpread: 0.1, MaxFrameSpread: 0.3}
}

// Check rejects settings that cannot work.
func (c DepthConfig) Check() error {
	switch {
	case !(c.MinDepth >= 0 && c.MaxDepth > c.MinDepth) || math.IsInf(c.MaxDepth, 0):
		return fmt.Errorf("scale: depth range [%g, %g] m is empty", c.MinDepth, c.MaxDepth)
	case c.MinPixels < 1:
		return fmt.Errorf("scale: minimum pixels %d, need ≥ 1", c.MinPixels)
	case c.Frames < 1:
		return fmt.Errorf("scale: depth frames %d, need ≥ 1", c.Frames)
	case !(c.InlierTolerance > 0 && c.InlierTolerance < 1):
		return fmt.Errorf("scale: inlier tolerance %g, need (0, 1)", c.InlierTolerance)
	case !(c.MinInlierFraction > 0 && c.MinInlierFraction <= 1):
		return fmt.Errorf("scale: minimum inlier fraction %g, need (0, 1]", c.MinInlierFraction)
	case !(c.MaxSpread > 0) || !(c.MaxFrameSpread > 0):
		return fmt.Errorf("scale: maximum spreads %g, %g, need > 0", c.MaxSpread, c.MaxFrameSpread)
	}
	return nil
}

// PixelMap says where a pixel of the model's depth map lies in the sensor's
// depth image: sensor (x, y) = (X·ScaleX + OffsetX, Y·ScaleY + OffsetY), for
// pixel centres. It undoes the preprocessing's resize and crop.
type PixelMap struct {
	ScaleX, ScaleY, OffsetX, OffsetY float64
}

// Image is a depth image in metres (0 or NaN: no depth), row major.
type Image struct {
	W, H  int
	Depth []float32
}

// Depth fits the scale as the ratio of a depth sensor's metres to the
// model's depths, pixel by pixel, robustly within a frame and across frames.
type Depth struct {
	cfg    DepthConfig
	ratios []float64 // one per accepted frame, newest last
	// Rejected counts the frames refused, Reason the last refusal.
	Rejected int
	Reason   string
}

// NewDepth makes a depth source.
func NewDepth(cfg DepthConfig) (*Depth, error) {
	if err := cfg.Check(); err != nil {
		return nil, err
	}
	return &Depth{cfg: cfg}, nil
}

// Add compares one frame: pred is the model's depth map (w×h, model units),
// sensor the aligned sensor depth, m where a model pixel falls in it. A frame
// with too few valid pixels or ratios that spread too far is refused with the
// reason (and counted), not used.
func (d *Depth) Add(pred []float32, w, h int, sensor Image, m PixelMap) error {
	if len(pred) != w*h || w <= 0 || h <= 0 {
		return fmt.Errorf("scale: predicted depth has %d values for %d×%d", len(pred), w, h)
	}
	if sensor.W <= 0 || sensor.H <= 0 || len(sensor.Depth) != sensor.W*sensor.H {
		return fmt.Errorf("scale: sensor depth has %d values for %d×%d", len(sensor.Depth), sensor.W, sensor.H)
	}
	if !(m.ScaleX > 0 && m.ScaleY > 0) || math.IsNaN(m.OffsetX+m.OffsetY) || math.IsInf(m.OffsetX+m.OffsetY, 0) {
		return fmt.Errorf("scale: pixel map %+v is not usable", m)
	}
	var num, den []float64
	for y := 0; y < h; y++ {
		sy := int(math.Floor((float64(y)+0.5)*m.ScaleY + m.OffsetY))
		if sy < 0 || sy >= sensor.H {
			continue
		}
		for x := 0; x < w; x++ {
			sx := int(math.Floor((float64(x)+0.5)*m.ScaleX + m.OffsetX))
			if sx < 0 || sx >= sensor.W {
				continue
			}
			s := float64(sensor.Depth[sy*sensor.W+sx])
			p := float64(pred[y*w+x])
			if !(s >= d.cfg.MinDepth && s <= d.cfg.MaxDepth) || !(p > 0) || math.IsInf(p, 0) {
				continue
			}
			num = append(num, s)
			den = append(den, p)
		}
	}
	refuse := func(reason string) error {
		d.Rejected++
		d.Reason = reason
		return fmt.Errorf("scale: depth frame refused: %s", reason)
	}
	if len(num) < d.cfg.MinPixels {
		return refuse(fmt.Sprintf("%d valid pixels, %d needed", len(num), d.cfg.MinPixels))
	}
	r := consensus(num, den, d.cfg.InlierTolerance)
	if r.spread > d.cfg.MaxFrameSpread || !(r.value > 0) {
		return refuse(fmt.Sprintf("pixel ratios spread %.1f %% (at most %.1f %%): is the depth image aligned with the colour image?",
			100*r.spread, 100*d.cfg.MaxFrameSpread))
	}
	d.ratios = append(d.ratios, r.value)
	if n := len(d.ratios) - d.cfg.Frames; n > 0 {
		d.ratios = append(d.ratios[:0], d.ratios[n:]...)
	}
	return nil
}

// Reset forgets every frame (a new map).
func (d *Depth) Reset() { d.ratios = d.ratios[:0] }

// Estimate pools the recent frames' ratios.
func (d *Depth) Estimate() Estimate {
	if len(d.ratios) == 0 {
		reason := "no depth frame yet"
		if d.Reason != "" {
			reason = "no usable depth frame: " + d.Reason
		}
		return Estimate{Reason: reason}
	}
	num := append([]float64(nil), d.ratios...)
	den := make([]float64, len(num))
	for i := range den {
		den[i] = 1
	}
	return decide(consensus(num, den, d.cfg.InlierTolerance), len(num), 1, d.cfg.MinInlierFraction, d.cfg.MaxSpread)
}
