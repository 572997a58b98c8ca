package geom

// EffectiveOverlap is the number of actual frames two consecutive windows share
// (reference §13): overlapKeyframes ≥ 0 wins and becomes
// max(ws, overlapKeyframes·kf); otherwise overlapSize ≥ 0; otherwise ws, where
// ws = min(numScale, total). A negative value means "not given". The result is at
// most total−1 (0 for a single frame).
func EffectiveOverlap(total, numScale, kf, overlapSize, overlapKeyframes int) int {
	ws := min(numScale, total)
	var ov int
	switch {
	case overlapKeyframes >= 0:
		ov = max(ws, overlapKeyframes*max(kf, 1))
	case overlapSize >= 0:
		ov = overlapSize
	default:
		ov = ws
	}
	if total <= 1 {
		return 0
	}
	return min(ov, total-1)
}

// Windows is the reference's fixed-interval window schedule (§13) for total
// frames: each window holds windowSize KV slots, i.e. ws = min(numScale, total)
// scale frames plus (windowSize−ws) keyframes, which at keyframe interval kf
// span ws + (windowSize−ws)·kf actual frames; consecutive windows share overlap
// frames (see EffectiveOverlap). Each entry is a half-open frame range
// [start, end). A trailing window shorter than the overlap is dropped unless it
// reaches the end.
func Windows(total, numScale, windowSize, overlap, kf int) [][2]int {
	if total <= 0 {
		return nil
	}
	ws := min(numScale, total)
	actual := ws + max(windowSize-ws, 0)*max(kf, 1)
	eff := min(actual, total)
	if eff >= total {
		return [][2]int{{0, total}}
	}
	step := max(eff-overlap, 1)
	var out [][2]int
	for start := 0; start < total; start += step {
		end := min(start+eff, total)
		if end-start >= overlap || end == total {
			out = append(out, [2]int{start, end})
		}
		if end == total {
			break
		}
	}
	return out
}

// Contribution is the part [0, n) of window index (of count windows, length
// frames) that goes into the stitched sequence: every window but the last drops
// its final overlap frames, because the next window re-runs them as its scale
// frames and its copy wins.
func Contribution(index, count, length, overlap int) int {
	if index == count-1 {
		return length
	}
	return max(length-overlap, 0)
}
