package scale

import "time"

// Nearest is the index of the item whose stamp is nearest at, no more than
// tol either side (the first of equally near ones), or -1 when none is:
// how a depth image is matched to a colour image.
func Nearest[T any](items []T, stamp func(T) time.Time, at time.Time, tol time.Duration) int {
	best, bestGap := -1, time.Duration(0)
	for i, it := range items {
		gap := stamp(it).Sub(at)
		if gap < 0 {
			gap = -gap
		}
		if gap <= tol && (best < 0 || gap < bestGap) {
			best, bestGap = i, gap
		}
	}
	return best
}
