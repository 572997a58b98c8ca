// Package sharedtest gives tests the paths of the read-only ../shared folder
// (golden data, sample images), failing the test when the folder is missing.
package sharedtest

import (
	"testing"

	"github.com/lingbotmap/lingbotmap/internal/shared"
)

// Path is shared.Path(elem...), or the end of the test when ../shared cannot
// be found.
func Path(t testing.TB, elem ...string) string {
	t.Helper()
	p, err := shared.Path(elem...)
	if err != nil {
		t.Fatalf("shared data: %v", err)
	}
	return p
}
