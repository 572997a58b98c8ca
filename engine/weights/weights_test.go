package weights

import (
	"testing"

	"github.com/lingbotmap/lingbotmap/internal/shared"
)

func TestGoldenSafeTensorsOpens(t *testing.T) {
	s, err := OpenSafeTensors(mustShared(t, "golden", "weights.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if n := len(s.Keys()); n != 384 {
		t.Fatalf("golden weights: %d tensors, want 384", n)
	}
	c := NewCursor(s)
	tok, err := c.Sub("aggregator").Get("camera_token", 1, 2, 1, 128)
	if err != nil {
		t.Fatal(err)
	}
	if len(tok) != 256 {
		t.Fatalf("camera_token has %d values", len(tok))
	}
	if _, err := c.Get("aggregator.camera_token", 1, 2, 1, 64); err == nil {
		t.Fatal("a wrong shape was accepted")
	}
}

func mustShared(t *testing.T, elem ...string) string {
	t.Helper()
	p, err := shared.Path(elem...)
	if err != nil {
		t.Fatal(err)
	}
	return p
}
