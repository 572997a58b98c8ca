package scale

import (
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/lingbotmap/lingbotmap/engine/geom"
)

// GroundConfig tunes the camera-height source.
type GroundConfig struct {
	// CameraHeight is the camera's known height above the ground, metres.
	CameraHeight float64
	// Up is the map's up direction (z in a REP 103 map).
	Up [3]float64
	// MaxTilt is the largest angle in radians between a plane's normal and
	// Up for the plane to be taken for the ground.
	MaxTilt float64
	// MinPoints is the number of points a frame's ground plane needs.
	MinPoints int
	// Iterations of the plane search (RANSAC) per frame.
	Iterations int
	// Tolerance is a point's largest distance from the plane, relative to
	// the camera's height above it, for the point to lie on it.
	Tolerance float64
	// Frames, InlierTolerance, MinInlierFraction, MaxSpread: as for depth,
	// over the per-frame estimates.
	Frames                                        int
	InlierTolerance, MinInlierFraction, MaxSpread float64
}

// DefaultGroundConfig suits a wheeled robot on a floor; CameraHeight must
// be set.
func DefaultGroundConfig() GroundConfig {
	return GroundConfig{Up: [3]float64{0, 0, 1}, MaxTilt: 15 * math.Pi / 180, MinPoints: 200,
		Iterations: 200, Tolerance: 0.03, Frames: 30, InlierTolerance: 0.1, MinInlierFraction: 0.6, MaxSpread: 0.1}
}

// Check rejects settings that cannot work.
func (c GroundConfig) Check() error {
	n := math.Sqrt(c.Up[0]*c.Up[0] + c.Up[1]*c.Up[1] + c.Up[2]*c.Up[2])
	switch {
	case !(c.CameraHeight > 0) || math.IsInf(c.CameraHeight, 0):
		return fmt.Errorf("scale: camera height %g m, need > 0", c.CameraHeight)
	case !(n > 0) || math.IsInf(n, 0):
		return fmt.Errorf("scale: up direction %v has no length", c.Up)
	case !(c.MaxTilt > 0 && c.MaxTilt < math.Pi/2):
		return fmt.Errorf("scale: maximum tilt %g rad, need (0, π/2)", c.MaxTilt)
	case c.MinPoints < 3 || c.Iterations < 1 || c.Frames < 1:
		return fmt.Errorf("scale: ground needs ≥ 3 points, ≥ 1 iteration and ≥ 1 frame (%d, %d, %d)", c.MinPoints, c.Iterations, c.Frames)
	case !(c.Tolerance > 0 && c.Tolerance < 1) || !(c.InlierTolerance > 0 && c.InlierTolerance < 1):
		return fmt.Errorf("scale: tolerances %g, %g, need (0, 1)", c.Tolerance, c.InlierTolerance)
	case !(c.MinInlierFraction > 0 && c.MinInlierFraction <= 1) || !(c.MaxSpread > 0):
		return fmt.Errorf("scale: inlier fraction %g or spread %g out of range", c.MinInlierFraction, c.MaxSpread)
	}
	return nil
}

// Ground fits the scale from the camera's known height above a flat ground:
// in each frame the ground plane is found among the points below the camera
// (a plane whose normal is near Up), and the camera's distance to it in model
// units is set against its height in metres.
type Ground struct {
	cfg    GroundConfig
	up     [3]float64
	rng    *rand.Rand
	ratios []float64
	// Rejected counts the frames without a usable ground plane, Reason the
	// last one's.
	Rejected int
	Reason   string
}

// NewGround makes a camera-height source. The plane search is seeded, so the
// same frames give the same answer.
func NewGround(cfg GroundConfig) (*Ground, error) {
	if err := cfg.Check(); err != nil {
		return nil, err
	}
	n := math.Sqrt(cfg.Up[0]*cfg.Up[0] + cfg.Up[1]*cfg.Up[1] + cfg.Up[2]*cfg.Up[2])
	up := [3]float64{cfg.Up[0] / n, cfg.Up[1] / n, cfg.Up[2] / n}
	return &Ground{cfg: cfg, up: up, rng: rand.New(rand.NewPCG(1, 2))}, nil
}

// Add looks for the ground in one frame's points (map frame, model units)
// seen from camera; a frame without a ground plane is refused with the reason.
func (g *Ground) Add(points [][3]float64, camera [3]float64) error {
	if !finite3(camera) {
		return fmt.Errorf("%w: camera %v", ErrNotFinite, camera)
	}
	var below [][3]float64
	var heights []float64
	for _, p := range points {
		if !finite3(p) {
			continue
		}
		if h := dot(g.up, sub(camera, p)); h > 0 {
			below = append(below, p)
			heights = append(heights, h)
		}
	}
	refuse := func(reason string) error {
		g.Rejected++
		g.Reason = reason
		return fmt.Errorf("scale: no ground in the frame: %s", reason)
	}
	if len(below) < g.cfg.MinPoints {
		return refuse(fmt.Sprintf("%d points below the camera, %d needed", len(below), g.cfg.MinPoints))
	}
	// the tolerance scales with the scene: a share of the typical height
	tol := g.cfg.Tolerance * median(heights)
	cosMax := math.Cos(g.cfg.MaxTilt)
	best, bestN := [4]float64{}, 0
	for it := 0; it < g.cfg.Iterations; it++ {
		a, b, c := below[g.rng.IntN(len(below))], below[g.rng.IntN(len(below))], below[g.rng.IntN(len(below))]
		n := cross(sub(b, a), sub(c, a))
		l := math.Sqrt(dot(n, n))
		if !(l > 0) {
			continue
		}
		n = [3]float64{n[0] / l, n[1] / l, n[2] / l}
		if dot(n, g.up) < 0 {
			n = [3]float64{-n[0], -n[1], -n[2]}
		}
		if dot(n, g.up) < cosMax {
			continue
		}
		d := -dot(n, a)
		cnt := 0
		for _, p := range below {
			if math.Abs(dot(n, p)+d) <= tol {
				cnt++
			}
		}
		// the lower of two equally supported planes is the floor
		if cnt > bestN || (cnt == bestN && cnt > 0 && dot(n, camera)+d > dot([3]float64{best[0], best[1], best[2]}, camera)+best[3]) {
			best, bestN = [4]float64{n[0], n[1], n[2], d}, cnt
		}
	}
	if bestN < g.cfg.MinPoints {
		return refuse(fmt.Sprintf("the best level plane holds %d points, %d needed", bestN, g.cfg.MinPoints))
	}
	// refine: least-squares offset over the plane's points, normal kept
	n := [3]float64{best[0], best[1], best[2]}
	var sum float64
	cnt := 0
	for _, p := range below {
		if math.Abs(dot(n, p)+best[3]) <= tol {
			sum += dot(n, p)
			cnt++
		}
	}
	d := -sum / float64(cnt)
	h := dot(n, camera) + d
	if !(h > 0) {
		return refuse("the camera is not above the plane found")
	}
	g.ratios = append(g.ratios, g.cfg.CameraHeight/h)
	if k := len(g.ratios) - g.cfg.Frames; k > 0 {
		g.ratios = append(g.ratios[:0], g.ratios[k:]...)
	}
	return nil
}

// Reset forgets every frame (a new map).
func (g *Ground) Reset() { g.ratios = g.ratios[:0] }

// Estimate pools the recent frames.
func (g *Ground) Estimate() Estimate {
	if len(g.ratios) == 0 {
		reason := "no frame with a ground plane yet"
		if g.Reason != "" {
			reason = "no ground plane: " + g.Reason
		}
		return Estimate{Reason: reason}
	}
	num := append([]float64(nil), g.ratios...)
	den := make([]float64, len(num))
	for i := range den {
		den[i] = 1
	}
	return decide(consensus(num, den, g.cfg.InlierTolerance), len(num), 1, g.cfg.MinInlierFraction, g.cfg.MaxSpread)
}

func sub(a, b [3]float64) [3]float64 { return [3]float64{a[0] - b[0], a[1] - b[1], a[2] - b[2]} }
func dot(a, b [3]float64) float64    { return a[0]*b[0] + a[1]*b[1] + a[2]*b[2] }
func cross(a, b [3]float64) [3]float64 {
	return [3]float64{a[1]*b[2] - a[2]*b[1], a[2]*b[0] - a[0]*b[2], a[0]*b[1] - a[1]*b[0]}
}

// FloorPoints lifts every step-th pixel of a depth map (w×h, model units)
// into the z-up map frame at scale 1 for the camera-height source:
// mapToWorld is the map frame's map_T_world, camToWorld the camera's pose
// in the engine's world, k its intrinsics. It returns the points and the
// camera's position in the same frame.
func FloorPoints(depth []float32, w, h, step int, k geom.Intrinsics, camToWorld, mapToWorld geom.Mat4) (pts [][3]float64, camera [3]float64) {
	if step < 1 {
		step = 1
	}
	if len(depth) == w*h {
		for v := 0; v < h; v += step {
			for u := 0; u < w; u += step {
				if d := float64(depth[v*w+u]); d > 0 && !math.IsInf(d, 0) {
					pts = append(pts, geom.Apply(mapToWorld, geom.Unproject(u, v, d, k, camToWorld)))
				}
			}
		}
	}
	return pts, geom.Apply(mapToWorld, geom.TranslationOf(camToWorld))
}
