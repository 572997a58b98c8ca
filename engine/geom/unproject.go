package geom

import (
	"fmt"
	"math"
)

// UnprojectDepth lifts an h×w depth map (row-major) to world points, three
// float32 per pixel (HWC xyz), as the reference's viewer does: pixel (u, v) with
// u = 0…w−1, v = 0…h−1 (pixel corners, no half-pixel shift) becomes
// X = ((u−cx)/fx·d, (v−cy)/fy·d, d) in the camera and camToWorld·X in the world.
// Non-finite depths give non-finite points, which callers filter.
func UnprojectDepth(depth []float32, h, w int, k Intrinsics, camToWorld Mat4) ([]float32, error) {
	if h <= 0 || w <= 0 {
		return nil, fmt.Errorf("geom: cannot unproject a %d×%d depth map: both sizes must be positive", h, w)
	}
	if len(depth) != h*w {
		return nil, fmt.Errorf("geom: depth map has %d values, want %d×%d = %d", len(depth), h, w, h*w)
	}
	if k[0] == 0 || k[1] == 0 || math.IsNaN(k[0]) || math.IsNaN(k[1]) {
		return nil, fmt.Errorf("geom: focal lengths fx=%g fy=%g cannot unproject", k[0], k[1])
	}
	out := make([]float32, 3*h*w)
	m := camToWorld
	for v := range h {
		y := (float64(v) - k[3]) / k[1]
		for u := range w {
			x := (float64(u) - k[2]) / k[0]
			d := float64(depth[v*w+u])
			cx, cy, cz := x*d, y*d, d
			o := out[3*(v*w+u):]
			o[0] = float32(m[0][0]*cx + m[0][1]*cy + m[0][2]*cz + m[0][3])
			o[1] = float32(m[1][0]*cx + m[1][1]*cy + m[1][2]*cz + m[1][3])
			o[2] = float32(m[2][0]*cx + m[2][1]*cy + m[2][2]*cz + m[2][3])
		}
	}
	return out, nil
}
