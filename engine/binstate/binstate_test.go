package binstate

import (
	"bytes"
	"errors"
	"io"
	"math"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// TestRoundTrip: every field comes back as written, nil slices stay nil.
func TestRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	w := NewWriter(&buf)
	w.U32(7)
	w.Int(-3)
	w.Bool(true)
	w.F64(math.Pi)
	w.F32s([]float32{1.5, float32(math.Inf(-1))})
	w.F32s(nil)
	w.I32s([]int32{-1, 2})
	w.Bytes([]byte("ab"))
	if w.Err() != nil {
		t.Fatal(w.Err())
	}
	r := NewReader(&buf)
	if r.U32() != 7 || r.Int("i", -5, 5) != -3 || !r.Bool("b") || r.F64() != math.Pi {
		t.Fatal("scalars differ")
	}
	if f := r.F32s("f", 2); !slices.Equal(f, []float32{1.5, float32(math.Inf(-1))}) {
		t.Fatalf("floats %v", f)
	}
	if f := r.F32s("nil", 2); f != nil {
		t.Fatalf("nil slice came back as %v", f)
	}
	if v := r.I32s("i32", 2); !slices.Equal(v, []int32{-1, 2}) {
		t.Fatalf("ints %v", v)
	}
	if b := r.Bytes("b", 2); string(b) != "ab" || r.Err() != nil {
		t.Fatalf("bytes %q, %v", b, r.Err())
	}
	r.U32()
	if !errors.Is(r.Err(), io.ErrUnexpectedEOF) {
		t.Fatalf("reading past the end: %v", r.Err())
	}
}

// TestBounds: a length over its bound is refused naming the field, and a
// length the data does not back fails without allocating it.
func TestBounds(t *testing.T) {
	var buf bytes.Buffer
	w := NewWriter(&buf)
	w.Int(1 << 40)
	r := NewReader(bytes.NewReader(buf.Bytes()))
	if v := r.F32s("depth", 100); v != nil || !errors.Is(r.Err(), ErrCorrupt) || !strings.Contains(r.Err().Error(), "depth length") {
		t.Fatalf("over the bound: %v %v", len(v), r.Err())
	}
	buf.Reset()
	w = NewWriter(&buf)
	w.Int(1 << 30) // a GiB·4 claimed, 8 bytes there
	w.F32Raw([]float32{1, 2})
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	r = NewReader(bytes.NewReader(buf.Bytes()))
	r.F32s("pixels", 1<<30)
	runtime.ReadMemStats(&after)
	if grew := after.TotalAlloc - before.TotalAlloc; !errors.Is(r.Err(), io.ErrUnexpectedEOF) || grew > 64<<20 {
		t.Fatalf("unbacked length: %v after allocating %d bytes", r.Err(), grew)
	}
}
