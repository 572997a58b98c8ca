//go:build cudadev

package cuda

import (
	"slices"
	"testing"
)

// TestLabVariants: a cudadev build takes every retired variant.
func TestLabVariants(t *testing.T) {
	for _, k := range retiredPagedKernels {
		if !slices.Contains(labPagedKernels(), k) {
			t.Errorf("the lab lacks %q", k)
		}
	}
}
