package ros2

import (
	"errors"
	"testing"

	"github.com/lingbotmap/lingbotmap/msgs"
)

// FuzzSplitRequest feeds arbitrary service samples to the request-header
// reader: it must return a header and body or a *msgs.DecodeError, and a
// header it read must frame back to the same bytes.
func FuzzSplitRequest(f *testing.F) {
	f.Add([]byte{0, 1, 0, 0, 8, 7, 6, 5, 4, 3, 2, 1, 9, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 2})
	f.Add([]byte{0, 1, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		h, body, err := splitRequest(data)
		if err != nil {
			var de *msgs.DecodeError
			if !errors.As(err, &de) {
				t.Fatalf("error %v is not a *msgs.DecodeError", err)
			}
			return
		}
		if len(body) != len(data)-requestHeaderSize {
			t.Fatalf("body of %d bytes from %d", len(body), len(data))
		}
		if data[1] == 1 {
			back, err := joinRequest(h, body)
			if err != nil || string(back) != string(data) {
				t.Fatalf("reframed % x, want % x (%v)", back, data, err)
			}
		}
	})
}
