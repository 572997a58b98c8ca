package geom

import (
	"fmt"
	"math"
)

// DefaultFlowStride is the pixel subsampling of the reference's flow measure.
const DefaultFlowStride = 8

// MeanFlow is the mean optical flow, in pixels, that the camera motion from
// the keyframe pose kf to the current pose cur induces on the current frame's
// depth map (w×h, row-major), sampled every stride pixels from (0, 0). Each sample
// (u, v, d) is lifted with the current camera, moved into the keyframe camera and
// projected there; the flow is the distance to (u, v). Samples with d ≤ 1e-6 or
// behind the keyframe camera (z ≤ 1e-6) are left out; with none left the flow is
// 0.
//
// It runs in float32, step by step as the reference does (its depth dtype),
// because its value is compared against a threshold to choose keyframes and the
// decisions must match the reference's.
func MeanFlow(cur, kf [9]float32, depth []float32, w, h, stride int) (float32, error) {
	if h <= 0 || w <= 0 || stride <= 0 {
		return 0, fmt.Errorf("geom: flow needs positive sizes and stride, got %d×%d stride %d", w, h, stride)
	}
	if len(depth) != h*w {
		return 0, fmt.Errorf("geom: depth map has %d values, want %d×%d = %d", len(depth), w, h, w*h)
	}
	rc, tc := quatToMat32(cur)
	rk, tk := quatToMat32(kf)
	fxc, fyc, cxc, cyc := intrinsics32(cur, w, h)
	fxk, fyk, cxk, cyk := intrinsics32(kf, w, h)
	// K⁻¹ of the current camera; the keyframe camera's world→camera is
	// [Rᵀ | −Rᵀt] in closed form.
	ix, iy := 1/fxc, 1/fyc
	ox, oy := -cxc/fxc, -cyc/fyc
	var rkT [3][3]float32
	for i := range 3 {
		for j := range 3 {
			rkT[i][j] = rk[j][i]
		}
	}
	var tkInv [3]float32
	for i := range 3 {
		tkInv[i] = -(rkT[i][0]*tk[0] + rkT[i][1]*tk[1] + rkT[i][2]*tk[2])
	}

	var sum float64
	count := 0
	for v := 0; v < h; v += stride {
		fv := float32(v)
		for u := 0; u < w; u += stride {
			fu := float32(u)
			d := depth[v*w+u]
			cam := [3]float32{(ix*fu + ox) * d, (iy*fv + oy) * d, d}
			var wp, kp [3]float32
			for i := range 3 {
				wp[i] = rc[i][0]*cam[0] + rc[i][1]*cam[1] + rc[i][2]*cam[2] + tc[i]
			}
			for i := range 3 {
				kp[i] = rkT[i][0]*wp[0] + rkT[i][1]*wp[1] + rkT[i][2]*wp[2] + tkInv[i]
			}
			z := kp[2]
			if !(d > 1e-6 && z > 1e-6) {
				continue
			}
			px := fxk*(kp[0]/z) + cxk
			py := fyk*(kp[1]/z) + cyk
			dx, dy := px-fu, py-fv
			sum += float64(float32(math.Sqrt(float64(dx*dx + dy*dy))))
			count++
		}
	}
	if count == 0 {
		return 0, nil
	}
	return float32(sum / float64(count)), nil
}

// quatToMat32 is QuatToMat's float32 twin for MeanFlow, whose arithmetic
// follows the reference's; a quaternion without a direction gives NaNs here too.
func quatToMat32(enc [9]float32) ([3][3]float32, [3]float32) {
	i, j, k, r := enc[3], enc[4], enc[5], enc[6]
	s := 2 / (i*i + j*j + k*k + r*r)
	return [3][3]float32{
		{1 - s*(j*j+k*k), s * (i*j - k*r), s * (i*k + j*r)},
		{s * (i*j + k*r), 1 - s*(i*i+k*k), s * (j*k - i*r)},
		{s * (i*k - j*r), s * (j*k + i*r), 1 - s*(i*i+j*j)},
	}, [3]float32{enc[0], enc[1], enc[2]}
}

func intrinsics32(enc [9]float32, w, h int) (fx, fy, cx, cy float32) {
	hw, ww := float32(h)/2, float32(w)/2
	fy = hw / float32(math.Tan(float64(enc[7]/2)))
	fx = ww / float32(math.Tan(float64(enc[8]/2)))
	return fx, fy, ww, hw
}

// FlowKeyframes is the reference's flow-based keyframe rule (§12) for one
// stream or window: the first streaming frame is a keyframe; after that a frame
// is a keyframe when its flow against the last keyframe exceeds Threshold or
// when MaxGap frames have passed since the last keyframe.
type FlowKeyframes struct {
	Threshold float32 // pixels; the reference's flow_threshold (> 0)
	MaxGap    int     // the reference's max_non_keyframe_gap (30)
	Stride    int     // sampling stride; 0 means DefaultFlowStride

	lastPose  [9]float32
	lastIndex int
	first     int
}

// NewFlowKeyframes starts the rule after the scale frames: the last scale frame
// (index numScale−1, pose lastScalePose) is the initial keyframe and frame
// numScale is the first streaming frame.
func NewFlowKeyframes(threshold float32, maxGap, numScale int, lastScalePose [9]float32) *FlowKeyframes {
	return &FlowKeyframes{Threshold: threshold, MaxGap: maxGap, lastPose: lastScalePose, lastIndex: numScale - 1, first: numScale}
}

// Decide measures frame index's flow and says whether it is a keyframe; a
// keyframe becomes the new reference pose. Frames must be offered in order. With
// no depth map (nil) the flow counts as above the threshold, as in the reference.
func (f *FlowKeyframes) Decide(index int, pose [9]float32, depth []float32, w, h int) (keyframe bool, flow float32, err error) {
	if depth == nil {
		flow = f.Threshold + 1
	} else {
		stride := f.Stride
		if stride == 0 {
			stride = DefaultFlowStride
		}
		flow, err = MeanFlow(pose, f.lastPose, depth, w, h, stride)
		if err != nil {
			return false, 0, fmt.Errorf("flow keyframe decision for frame %d: %w", index, err)
		}
	}
	keyframe = index == f.first || flow > f.Threshold || index-f.lastIndex >= f.MaxGap
	if keyframe {
		f.lastPose = pose
		f.lastIndex = index
	}
	return keyframe, flow, nil
}
