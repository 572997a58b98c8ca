package weights

import (
	"fmt"
	"slices"
	"sort"
)

type memTensor struct {
	shape []int
	data  []float32
}

// MemStore is an in-memory Store of float32 tensors. Put is not safe to call
// concurrently with anything else; reads are safe concurrently.
type MemStore struct {
	tensors map[string]memTensor
	keys    []string
}

// NewMemStore returns an empty store.
func NewMemStore() *MemStore { return &MemStore{tensors: map[string]memTensor{}} }

// Put stores (or replaces) a tensor; data is kept, not copied.
func (m *MemStore) Put(name string, shape []int, data []float32) error {
	n := 1
	for _, d := range shape {
		if d < 0 {
			return fmt.Errorf("weights: tensor %q: negative dimension in shape %v", name, shape)
		}
		n *= d
	}
	if n != len(data) {
		return fmt.Errorf("weights: tensor %q: shape %v needs %d values, got %d", name, shape, n, len(data))
	}
	if _, ok := m.tensors[name]; !ok {
		i := sort.SearchStrings(m.keys, name)
		m.keys = slices.Insert(m.keys, i, name)
	}
	m.tensors[name] = memTensor{shape: slices.Clone(shape), data: data}
	return nil
}

// Delete removes a tensor if present.
func (m *MemStore) Delete(name string) {
	if _, ok := m.tensors[name]; !ok {
		return
	}
	delete(m.tensors, name)
	i := sort.SearchStrings(m.keys, name)
	m.keys = slices.Delete(m.keys, i, i+1)
}

// Keys lists the tensor names, sorted.
func (m *MemStore) Keys() []string { return m.keys }

// Info describes a tensor (always F32).
func (m *MemStore) Info(name string) (Info, bool) {
	t, ok := m.tensors[name]
	if !ok {
		return Info{}, false
	}
	return Info{DType: "F32", Shape: t.shape}, true
}

// Float32 returns a copy of a tensor.
func (m *MemStore) Float32(name string) ([]float32, error) {
	t, ok := m.tensors[name]
	if !ok {
		return nil, fmt.Errorf("no tensor %q", name)
	}
	return slices.Clone(t.data), nil
}

// Close does nothing; the tensors stay readable.
func (m *MemStore) Close() error { return nil }

// Copy reads every tensor of s into a new MemStore (converted to float32).
func Copy(s Store) (*MemStore, error) {
	m := NewMemStore()
	for _, k := range s.Keys() {
		inf, _ := s.Info(k)
		d, err := s.Float32(k)
		if err != nil {
			return nil, fmt.Errorf("weights: copying %q: %w", k, err)
		}
		if err := m.Put(k, inf.Shape, d); err != nil {
			return nil, err
		}
	}
	return m, nil
}
