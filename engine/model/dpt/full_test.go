package dpt

import (
	"encoding/json"
	"os"
	"sort"
	"testing"

	"github.com/lingbotmap/lingbotmap/engine/backend"
	"github.com/lingbotmap/lingbotmap/engine/weights"
	"github.com/lingbotmap/lingbotmap/internal/shared"
)

// shapeStore serves the official checkpoint's key list with zero data.
type shapeStore struct {
	shapes map[string][]int
	zeros  []float32
}

func (s *shapeStore) Keys() []string {
	var ks []string
	for k := range s.shapes {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

func (s *shapeStore) Info(name string) (weights.Info, bool) {
	sh, ok := s.shapes[name]
	return weights.Info{DType: "F32", Shape: sh}, ok
}

func (s *shapeStore) Float32(name string) ([]float32, error) {
	n := backend.Numel(s.shapes[name])
	if n > len(s.zeros) {
		s.zeros = make([]float32, n)
	}
	return s.zeros[:n], nil
}

func (s *shapeStore) Close() error { return nil }

// shapeBackend records parameters by shape only; Load needs nothing else.
type shapeBackend struct{ backend.Backend }

type shapeTensor []int

func (s shapeTensor) Shape() []int { return s }

func (shapeBackend) Weight(_ string, _ []float32, _ backend.Precision, shape ...int) backend.Tensor {
	return shapeTensor(append([]int(nil), shape...))
}

// TestLoadFullCheckpointShapes loads the depth head from the official
// checkpoint's key and shape list and checks the sizes it infers (§17).
func TestLoadFullCheckpointShapes(t *testing.T) {
	p, err := shared.Path("golden", "full_state_dict_shapes.json")
	if err != nil {
		t.Fatalf("golden data: %v", err)
	}
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("golden data: %v", err)
	}
	st := &shapeStore{}
	if err := json.Unmarshal(b, &st.shapes); err != nil {
		t.Fatalf("%s: %v", p, err)
	}
	cur := weights.NewCursor(st)
	h, err := Load(shapeBackend{}, cur.Sub("depth_head"))
	if err != nil {
		t.Fatal(err)
	}
	if u := cur.Unused("depth_head."); len(u) > 0 {
		t.Errorf("checkpoint tensors not read: %v", u)
	}
	if h.dimIn != 2048 || h.outCh != [4]int{256, 512, 1024, 1024} || h.features != 256 || h.headCh != 128 || h.OutDim() != 2 {
		t.Errorf("inferred dim %d, channels %v, features %d, head %d, out %d; want 2048, [256 512 1024 1024], 256, 128, 2",
			h.dimIn, h.outCh, h.features, h.headCh, h.OutDim())
	}
}
