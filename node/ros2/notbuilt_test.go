//go:build !ros2

package ros2

import (
	"errors"
	"strings"
	"testing"

	"github.com/lingbotmap/lingbotmap/node/ros2/dds"
)

// Without the ros2 build tag the transport says how to get it.
func TestNewWithoutROS2(t *testing.T) {
	a, _, err := ParseArgs(nil, func(string) string { return "" }, "lingbotmap")
	if err != nil {
		t.Fatal(err)
	}
	tr, err := New(a, nil)
	if tr != nil || !errors.Is(err, dds.ErrNotBuilt) || !strings.Contains(err.Error(), "-tags ros2") {
		t.Fatalf("New = %v, %v; want dds.ErrNotBuilt", tr, err)
	}
}
