// Package goldentest opens the golden safetensors files under
// ../shared/golden for tests.
package goldentest

import (
	"testing"

	"github.com/lingbotmap/lingbotmap/engine/weights"
	"github.com/lingbotmap/lingbotmap/internal/shared/sharedtest"
)

// Open opens ../shared/golden/elem... and closes it when the test ends; a
// missing or unreadable file ends the test.
func Open(t testing.TB, elem ...string) *weights.SafeTensors {
	t.Helper()
	st, err := weights.OpenSafeTensors(sharedtest.Path(t, append([]string{"golden"}, elem...)...))
	if err != nil {
		t.Fatalf("golden data: %v", err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// Output is the float32 tensor key of golden case c's outputs (a missing
// case or key ends the test).
func Output(t testing.TB, c, key string) []float32 {
	t.Helper()
	v, err := Open(t, c, "outputs.safetensors").Float32(key)
	if err != nil {
		t.Fatalf("golden data: %s: %v", c, err)
	}
	return v
}
