package node

import (
	"fmt"

	"github.com/lingbotmap/lingbotmap/engine/pipeline"
)

// ParsePolicy reads queue_policy: "latest" drops the oldest waiting frame
// (counted) to keep the latency low, "all" blocks the subscriber so that
// every frame reaches the model.
func ParsePolicy(s string) (pipeline.Policy, error) {
	switch s {
	case "latest":
		return pipeline.DropOldest, nil
	case "all":
		return pipeline.Block, nil
	}
	return 0, fmt.Errorf("unknown queue policy %q (want latest or all)", s)
}
