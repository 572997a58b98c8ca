package geom

import (
	"testing"

	"github.com/lingbotmap/lingbotmap/engine/weights"
	goldencase "github.com/lingbotmap/lingbotmap/internal/golden"
	"github.com/lingbotmap/lingbotmap/internal/shared"
)

// golden opens a safetensors file under ../shared/golden and returns a reader
// of its tensors as float32 with their shapes.
func golden(t *testing.T, elem ...string) func(name string) ([]float32, []int) {
	t.Helper()
	p, err := shared.Path(append([]string{"golden"}, elem...)...)
	if err != nil {
		t.Fatalf("golden data: %v", err)
	}
	st, err := weights.OpenSafeTensors(p)
	if err != nil {
		t.Fatalf("golden data: %v", err)
	}
	t.Cleanup(func() { st.Close() })
	return func(name string) ([]float32, []int) {
		t.Helper()
		data, shape, err := goldencase.Tensor(st, name)
		if err != nil {
			t.Fatal(err)
		}
		return data, shape
	}
}

func poses(data []float32) [][9]float32 {
	out := make([][9]float32, len(data)/9)
	for i := range out {
		copy(out[i][:], data[9*i:])
	}
	return out
}
