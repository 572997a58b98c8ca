// Package weights reads model parameters from checkpoint files and hands
// them to the model by name, checking shapes as it goes.
//
// Open takes a .safetensors file, Hugging Face style shards (an index or a
// directory) or a zip-format torch.save .pt file, chosen by content; the
// .pt pickle is interpreted in Go (no Python). Files are memory-mapped and
// each tensor is read when asked for, so loading needs about one copy of the
// weights. Arch describes the network's sizes: Validate checks a checkpoint
// against it key by key (the reference loads with strict=False and would run
// a wrong file silently), InferArch reads the sizes from the shapes, and
// Random makes a checkpoint with sane random weights for tests and demos.
package weights

import (
	"fmt"
	"sort"
	"strings"
)

// Info describes one stored tensor.
type Info struct {
	DType string // "F32", "F16", "BF16", "F64", "U8", "I64", ...
	Shape []int
}

// Store is a read-only set of named tensors.
type Store interface {
	// Keys lists every tensor name, sorted.
	Keys() []string
	// Info describes a tensor; ok is false when the name is absent.
	Info(name string) (Info, bool)
	// Float32 reads a tensor converted to float32 into a new slice.
	Float32(name string) ([]float32, error)
	// Close releases the file.
	Close() error
}

// RawReader is implemented by stores that can hand out a tensor's bytes in
// its stored dtype (Info.DType), little-endian and row-major, without
// converting them. The bytes may alias a memory mapping: do not modify them,
// and do not use them after Close.
type RawReader interface {
	RawBytes(name string) ([]byte, error)
}

// Cursor walks a Store's key namespace like the module tree of the model and
// records which keys were used, so that unused (extra) keys can be reported.
type Cursor struct {
	store  Store
	prefix string
	used   map[string]bool
}

// NewCursor starts at the root of s.
func NewCursor(s Store) *Cursor {
	return &Cursor{store: s, used: map[string]bool{}}
}

// Sub descends into a child module ("blocks", "0", ...).
func (c *Cursor) Sub(name string) *Cursor {
	return &Cursor{store: c.store, prefix: c.prefix + name + ".", used: c.used}
}

// Key is the full name of a child tensor.
func (c *Cursor) Key(name string) string { return c.prefix + name }

// Has reports whether a child tensor exists.
func (c *Cursor) Has(name string) bool {
	_, ok := c.store.Info(c.prefix + name)
	return ok
}

// Shape returns a child tensor's shape, or an error naming the missing key.
func (c *Cursor) Shape(name string) ([]int, error) {
	inf, ok := c.store.Info(c.prefix + name)
	if !ok {
		return nil, fmt.Errorf("weights: missing tensor %q", c.prefix+name)
	}
	return inf.Shape, nil
}

// Get reads a child tensor and checks its shape (a -1 in shape matches any size).
func (c *Cursor) Get(name string, shape ...int) ([]float32, error) {
	key := c.prefix + name
	inf, ok := c.store.Info(key)
	if !ok {
		return nil, fmt.Errorf("weights: missing tensor %q (want shape %v)", key, shape)
	}
	if !shapeMatches(inf.Shape, shape) {
		return nil, fmt.Errorf("weights: tensor %q has shape %v, want %v", key, inf.Shape, shape)
	}
	c.used[key] = true
	data, err := c.store.Float32(key)
	if err != nil {
		return nil, fmt.Errorf("weights: reading %q: %w", key, err)
	}
	return data, nil
}

// Unused lists the store's keys under prefix that no Get has read.
func (c *Cursor) Unused(prefix string) []string {
	var out []string
	for _, k := range c.store.Keys() {
		if strings.HasPrefix(k, prefix) && !c.used[k] {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

func shapeMatches(have, want []int) bool {
	if len(have) != len(want) {
		return false
	}
	for i := range have {
		if want[i] >= 0 && have[i] != want[i] {
			return false
		}
	}
	return true
}
