package traj

import (
	"cmp"
	"errors"
	"math"
	"slices"
	"sort"
)

// Pair is an associated pair of poses: indices into the estimate and the reference.
type Pair struct{ Est, Ref int }

// maxCandidates bounds the association's work; a max difference so large that
// it exceeds this is not a timestamp tolerance any more.
const maxCandidates = 50_000_000

// Associate matches poses of est and ref whose stamps differ by less than
// maxDiff after adding offset to the estimate's stamps, one-to-one, taking
// the closest candidates first (TUM's associate.py). Both trajectories must be
// sorted by time (ReadTUM sorts). The pairs come back ordered by time.
//
// Stamps that differ by no more than their float64 resolution (see
// stampResolution) count as equal and are always candidates: a --max-diff
// below that resolution (1e-9 s for stamps near 1.7e9 s, whose spacing is
// 2.4e-7 s) must not lose exact matches, as TUM's and evo's tools find them.
func Associate(est, ref Trajectory, maxDiff, offset float64) ([]Pair, error) {
	if !(maxDiff > 0) || math.IsInf(maxDiff, 0) {
		return nil, errors.New("association: max difference must be a positive number of seconds")
	}
	type cand struct {
		d        float64
		est, ref int
	}
	var cands []cand
	for i, e := range est {
		te := e.Time + offset
		res := stampResolution(te, offset)
		tol := max(maxDiff, res)
		// The window is found on the differences themselves, not on te ± tol,
		// whose rounding can step over a stamp equal to te. fl(r − te) is
		// monotonic in r, so the search is valid.
		j := sort.Search(len(ref), func(k int) bool { return ref[k].Time-te >= -tol })
		for ; j < len(ref); j++ {
			d := ref[j].Time - te
			if d > tol {
				break
			}
			if ad := math.Abs(d); ad < maxDiff || ad <= res {
				cands = append(cands, cand{ad, i, j})
			}
			if len(cands) > maxCandidates {
				return nil, errors.New("association: the max difference matches too many timestamp pairs; use a tolerance near the frame period")
			}
		}
	}
	slices.SortFunc(cands, func(a, b cand) int {
		if c := cmp.Compare(a.d, b.d); c != 0 {
			return c
		}
		if c := cmp.Compare(a.est, b.est); c != 0 {
			return c
		}
		return cmp.Compare(a.ref, b.ref)
	})
	usedE := make([]bool, len(est))
	usedR := make([]bool, len(ref))
	var pairs []Pair
	for _, c := range cands {
		if usedE[c.est] || usedR[c.ref] {
			continue
		}
		usedE[c.est], usedR[c.ref] = true, true
		pairs = append(pairs, Pair{c.est, c.ref})
	}
	slices.SortFunc(pairs, func(a, b Pair) int { return cmp.Compare(a.Est, b.Est) })
	return pairs, nil
}

// stampResolution bounds how far apart two float64 stamps near t can be
// when the decimal stamps they were parsed from, with offset added to one,
// are equal: each parsed value and the sum est + offset is rounded once
// (half a unit in the last place each), and a reference stamp may sit in the
// next binade. For stamps near 1.7e9 s this is 0.48 µs, below the 1 µs step
// of microsecond stamps, so distinct stamps stay distinct.
func stampResolution(t, offset float64) float64 {
	return 2*ulp(t) + ulp(offset)
}

// ulp is the spacing of float64 values at |x|.
func ulp(x float64) float64 {
	x = math.Abs(x)
	if math.IsInf(x, 0) || math.IsNaN(x) {
		return 0
	}
	return math.Nextafter(x, math.Inf(1)) - x
}
