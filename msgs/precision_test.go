package msgs

import "testing"

func TestPrecisionLoss(t *testing.T) {
	for _, enc := range []string{"rgb8", "bgr8", "rgba8", "bgra8", "mono8", "32FC1", "yuv422"} {
		if loss, ok := PrecisionLoss(enc); ok || loss != "" {
			t.Errorf("%s: %q", enc, loss)
		}
	}
	for _, enc := range []string{"mono16", "rgb16", "bgr16", "rgba16", "bgra16"} {
		loss, ok := PrecisionLoss(enc)
		if want := enc + " images are reduced to 8 bits per sample (the high byte of each 16-bit sample is kept)"; !ok || loss != want {
			t.Errorf("%s: %q, want %q", enc, loss, want)
		}
	}
}
