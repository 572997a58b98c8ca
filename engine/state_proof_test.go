package engine

import (
	"bytes"
	"context"
	"errors"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lingbotmap/lingbotmap/engine/binstate"
	"github.com/lingbotmap/lingbotmap/engine/weights"
)

// A resume relies on every byte of the state's header and of the weights:
// a flipped bit anywhere in the header is found before the header is used,
// weights that differ in one value in the middle of a tensor (not only at
// its ends) are refused, and a state of the previous format, whose header
// had no checksum, is refused as unprovable rather than read.
func TestResumeProvesHeaderAndWeights(t *testing.T) {
	cfg := goldenConfig(t)
	state := savedState(t, cfg)

	// one value in the middle of the largest tensor changed, by one ulp
	src, err := weights.OpenSafeTensors(cfg.Weights)
	if err != nil {
		t.Fatal(err)
	}
	biggest, size := "", 0
	for _, k := range src.Keys() {
		inf, _ := src.Info(k)
		n := 1
		for _, d := range inf.Shape {
			n *= d
		}
		if n > size {
			biggest, size = k, n
		}
	}
	if size < 64 {
		t.Fatalf("the largest tensor has %d values", size)
	}
	mem := weights.NewMemStore()
	for _, k := range src.Keys() {
		v, err := src.Float32(k)
		if err != nil {
			t.Fatal(err)
		}
		if k == biggest {
			v[len(v)/2] = nextUp(v[len(v)/2])
		}
		inf, _ := src.Info(k)
		if err := mem.Put(k, inf.Shape, v); err != nil {
			t.Fatal(err)
		}
	}
	src.Close()
	changed := filepath.Join(t.TempDir(), "changed.safetensors")
	if err := weights.WriteSafeTensorsFile(changed, mem); err != nil {
		t.Fatal(err)
	}
	c := cfg
	c.Weights = changed
	if st, err := Resume(context.Background(), c, cpuBackend, bytes.NewReader(state), nil); err == nil || !errors.Is(err, ErrStateMismatch) || !strings.Contains(err.Error(), "other weights") {
		if st != nil {
			st.Close()
		}
		t.Errorf("weights changed in the middle of %s: %v", biggest, err)
	}

	// every bit of the header, magic aside
	r := bytes.NewReader(state)
	if _, err := ReadStateHeader(r); err != nil {
		t.Fatal(err)
	}
	headerLen := len(state) - r.Len()
	for i := 8; i < headerLen; i++ {
		for bit := range 8 {
			bad := bytes.Clone(state)
			bad[i] ^= 1 << bit
			if _, err := ReadStateHeader(bytes.NewReader(bad)); err == nil {
				t.Fatalf("bit %d of header byte %d flipped: read", bit, i)
			} else if i >= 12 && !errors.Is(err, binstate.ErrCorrupt) {
				t.Fatalf("bit %d of header byte %d flipped: %v, want ErrCorrupt", bit, i, err)
			}
		}
	}

	// the previous format
	old := bytes.Clone(state)
	old[8] = StateVersion - 1
	_, err = ReadStateHeader(bytes.NewReader(old))
	if !errors.Is(err, ErrStateMismatch) || !errors.Is(err, binstate.ErrUnproven) || !strings.Contains(err.Error(), "older version") {
		t.Errorf("a version %d state: %v", StateVersion-1, err)
	}
}

// nextUp is the next float32 above v.
func nextUp(v float32) float32 { return math.Nextafter32(v, float32(math.Inf(1))) }
