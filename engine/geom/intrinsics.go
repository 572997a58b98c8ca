package geom

import (
	"fmt"
	"math"
)

// Intrinsics is [fx, fy, cx, cy] in pixels.
type Intrinsics = [4]float64

// IntrinsicsFromPoseEnc gives [fx, fy, cx, cy] for a w×h image from the
// encoding's fields of view: f = (size/2)/tan(fov/2), principal point exactly
// (w/2, h/2), as the reference does. A zero field of view gives an infinite
// focal length, as in the reference; CheckIntrinsics rejects it.
func IntrinsicsFromPoseEnc(enc [9]float32, w, h int) Intrinsics {
	fovH, fovW := float64(enc[7]), float64(enc[8])
	return Intrinsics{
		(float64(w) / 2) / math.Tan(fovW/2),
		(float64(h) / 2) / math.Tan(fovH/2),
		float64(w) / 2,
		float64(h) / 2,
	}
}

// CheckIntrinsics says whether k can unproject: focal lengths finite and
// positive, principal point finite. Otherwise the error wraps ErrDegenerate.
func CheckIntrinsics(k Intrinsics) error {
	fx, fy, cx, cy := k[0], k[1], k[2], k[3]
	if !(fx > 0) || !(fy > 0) || math.IsInf(fx, 0) || math.IsInf(fy, 0) ||
		math.IsNaN(cx) || math.IsNaN(cy) || math.IsInf(cx, 0) || math.IsInf(cy, 0) {
		return fmt.Errorf("intrinsics fx=%g fy=%g cx=%g cy=%g cannot unproject: %w", fx, fy, cx, cy, ErrDegenerate)
	}
	return nil
}
