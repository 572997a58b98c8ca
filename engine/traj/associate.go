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
		// Reference stamps within (t_e + offset − maxDiff, t_e + offset + maxDiff).
		te := e.Time + offset
		lo := te - maxDiff
		j := sort.Search(len(ref), func(k int) bool { return ref[k].Time > lo })
		for ; j < len(ref); j++ {
			if ref[j].Time >= te+maxDiff {
				break
			}
			d := math.Abs(te - ref[j].Time)
			if d < maxDiff {
				cands = append(cands, cand{d, i, j})
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
