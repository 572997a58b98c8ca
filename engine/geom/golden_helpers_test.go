package geom

import (
	"testing"

	goldencase "github.com/lingbotmap/lingbotmap/engine/golden"
	"github.com/lingbotmap/lingbotmap/engine/golden/goldentest"
)

// golden opens a safetensors file under ../shared/golden and returns a reader
// of its tensors as float32 with their shapes.
func golden(t *testing.T, elem ...string) func(name string) ([]float32, []int) {
	t.Helper()
	st := goldentest.Open(t, elem...)
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
