// Package binstate writes and reads the little-endian binary fields of a
// session state file (engine.SaveState). The Writer and Reader keep the first
// error, so a caller writes or reads a whole section and checks once. Every
// length the Reader takes from the file is checked against a bound the caller
// gives before anything is allocated, so a corrupt or hostile file cannot
// make it allocate more than the state it claims to restore.
package binstate

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
)

// ErrCorrupt marks a file whose content contradicts itself or its bounds.
var ErrCorrupt = errors.New("corrupt state")

// Writer writes fields to w and remembers the first error.
type Writer struct {
	w   io.Writer
	err error
	buf [8]byte
}

// NewWriter writes to w.
func NewWriter(w io.Writer) *Writer { return &Writer{w: w} }

// Err is the first write error.
func (w *Writer) Err() error { return w.err }

func (w *Writer) write(b []byte) {
	if w.err == nil {
		_, w.err = w.w.Write(b)
	}
}

// U32 writes a uint32.
func (w *Writer) U32(v uint32) {
	binary.LittleEndian.PutUint32(w.buf[:4], v)
	w.write(w.buf[:4])
}

// I64 writes an int64.
func (w *Writer) I64(v int64) {
	binary.LittleEndian.PutUint64(w.buf[:8], uint64(v))
	w.write(w.buf[:8])
}

// Int writes an int as an int64.
func (w *Writer) Int(v int) { w.I64(int64(v)) }

// Bool writes a byte, 0 or 1.
func (w *Writer) Bool(v bool) {
	b := byte(0)
	if v {
		b = 1
	}
	w.write([]byte{b})
}

// F64 writes a float64.
func (w *Writer) F64(v float64) { w.I64(int64(math.Float64bits(v))) }

// Len writes the length of a slice that may be nil: −1 for nil.
func (w *Writer) Len(n int, isNil bool) {
	if isNil {
		n = -1
	}
	w.Int(n)
}

// F32s writes a float32 slice with its length (nil stays nil).
func (w *Writer) F32s(v []float32) {
	w.Len(len(v), v == nil)
	w.F32Raw(v)
}

// F32Raw writes float32 values without a length.
func (w *Writer) F32Raw(v []float32) {
	const chunk = 1 << 14
	var b [4 * chunk]byte
	for len(v) > 0 && w.err == nil {
		n := min(len(v), chunk)
		for i, x := range v[:n] {
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
		}
		w.write(b[:4*n])
		v = v[n:]
	}
}

// I32s writes an int32 slice with its length.
func (w *Writer) I32s(v []int32) {
	w.Len(len(v), v == nil)
	for _, x := range v {
		w.U32(uint32(x))
	}
}

// Bytes writes a byte slice with its length.
func (w *Writer) Bytes(v []byte) {
	w.Len(len(v), v == nil)
	w.write(v)
}

// Reader reads fields from r and remembers the first error.
type Reader struct {
	r   io.Reader
	err error
	buf [8]byte
}

// NewReader reads from r.
func NewReader(r io.Reader) *Reader { return &Reader{r: r} }

// Err is the first read or bound error; a file that ends early gives
// io.ErrUnexpectedEOF.
func (r *Reader) Err() error { return r.err }

// Fail records err unless an error is already recorded.
func (r *Reader) Fail(err error) {
	if r.err == nil {
		r.err = err
	}
}

func (r *Reader) read(b []byte) bool {
	if r.err != nil {
		return false
	}
	if _, err := io.ReadFull(r.r, b); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		r.err = fmt.Errorf("state file ends early: %w", err)
		return false
	}
	return true
}

// U32 reads a uint32.
func (r *Reader) U32() uint32 {
	if !r.read(r.buf[:4]) {
		return 0
	}
	return binary.LittleEndian.Uint32(r.buf[:4])
}

// I64 reads an int64.
func (r *Reader) I64() int64 {
	if !r.read(r.buf[:8]) {
		return 0
	}
	return int64(binary.LittleEndian.Uint64(r.buf[:8]))
}

// Int reads an int in lo..hi, naming what in the error otherwise.
func (r *Reader) Int(what string, lo, hi int) int {
	v := r.I64()
	if r.err == nil && (v < int64(lo) || v > int64(hi)) {
		r.err = fmt.Errorf("%w: %s is %d, want %d..%d", ErrCorrupt, what, v, lo, hi)
		return lo
	}
	return int(v)
}

// Bool reads a byte that must be 0 or 1.
func (r *Reader) Bool(what string) bool {
	var b [1]byte
	if !r.read(b[:]) {
		return false
	}
	if b[0] > 1 {
		r.err = fmt.Errorf("%w: %s is %d, want 0 or 1", ErrCorrupt, what, b[0])
	}
	return b[0] == 1
}

// F64 reads a float64.
func (r *Reader) F64() float64 { return math.Float64frombits(uint64(r.I64())) }

// F32s reads a float32 slice of at most max values (nil stays nil).
func (r *Reader) F32s(what string, max int) []float32 {
	n := r.Int(what+" length", -1, max)
	if n < 0 || r.err != nil {
		return nil
	}
	// grow as the data arrives: a length that the file does not back
	// costs no more than the bytes that are really there
	const step = 1 << 20
	v := make([]float32, 0, min(n, step))
	for len(v) < n && r.err == nil {
		k := min(n-len(v), step)
		v = append(v, make([]float32, k)...)
		r.F32Raw(v[len(v)-k:])
	}
	return v
}

// F32Raw fills v.
func (r *Reader) F32Raw(v []float32) {
	const chunk = 1 << 14
	var b [4 * chunk]byte
	for len(v) > 0 && r.err == nil {
		n := min(len(v), chunk)
		if !r.read(b[:4*n]) {
			return
		}
		for i := range v[:n] {
			v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
		}
		v = v[n:]
	}
}

// I32s reads an int32 slice of at most max values.
func (r *Reader) I32s(what string, max int) []int32 {
	n := r.Int(what+" length", -1, max)
	if n < 0 || r.err != nil {
		return nil
	}
	v := make([]int32, n)
	for i := range v {
		v[i] = int32(r.U32())
	}
	return v
}

// Bytes reads a byte slice of at most max bytes.
func (r *Reader) Bytes(what string, max int) []byte {
	n := r.Int(what+" length", -1, max)
	if n < 0 || r.err != nil {
		return nil
	}
	v := make([]byte, n)
	r.read(v)
	return v
}
