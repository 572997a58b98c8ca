package node

import "fmt"

// Policy says what the frame path does when the model is slower than the
// camera (engine/pipeline's Block and DropOldest).
type Policy int

const (
	// PolicyLatest drops the oldest waiting frame (counted) to keep latency low.
	PolicyLatest Policy = iota
	// PolicyAll blocks the subscriber so that every frame reaches the model.
	PolicyAll
)

func (p Policy) String() string {
	if p == PolicyAll {
		return "all"
	}
	return "latest"
}

// ParsePolicy reads "latest" or "all".
func ParsePolicy(s string) (Policy, error) {
	switch s {
	case "latest":
		return PolicyLatest, nil
	case "all":
		return PolicyAll, nil
	}
	return 0, fmt.Errorf("unknown queue policy %q (want latest or all)", s)
}
