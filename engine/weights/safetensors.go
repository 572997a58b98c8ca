package weights

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
)

const (
	// maxHeader bounds the JSON header so a corrupt length cannot ask for gigabytes.
	maxHeader = 100 << 20
	// maxRank bounds tensor ranks; no real tensor comes near it.
	maxRank = 16
)

type stEntry struct {
	info       Info
	begin, end int64 // byte range inside the data section
}

// SafeTensors is a memory-mapped (or in-memory) .safetensors file.
type SafeTensors struct {
	path    string
	m       *mappedFile // nil for an in-memory image
	data    []byte      // the whole file image
	base    int64       // offset of the data section
	entries map[string]stEntry
	keys    []string
	meta    map[string]string
}

// OpenSafeTensors maps a .safetensors file and validates its header against the file size.
func OpenSafeTensors(path string) (*SafeTensors, error) {
	m, err := mapFile(path)
	if err != nil {
		return nil, fmt.Errorf("weights: %s: %w", path, err)
	}
	s, err := parseSafeTensors(m.data)
	if err != nil {
		_ = m.close()
		return nil, fmt.Errorf("weights: %s: %w", path, err)
	}
	s.path, s.m = path, m
	return s, nil
}

// ParseSafeTensors reads a safetensors image held in memory. The tensors
// alias b.
func ParseSafeTensors(b []byte) (*SafeTensors, error) { return parseSafeTensors(b) }

// stHeaderEntry is one tensor's header record; pointers tell absent fields
// from zero values.
type stHeaderEntry struct {
	DType   *string  `json:"dtype"`
	Shape   *[]int64 `json:"shape"`
	Offsets *[]int64 `json:"data_offsets"`
}

func parseSafeTensors(b []byte) (*SafeTensors, error) {
	if len(b) < 8 {
		return nil, fmt.Errorf("safetensors: only %d bytes, too short for the 8-byte header length: file truncated or not a safetensors file", len(b))
	}
	hlen := binary.LittleEndian.Uint64(b[:8])
	if hlen > maxHeader {
		return nil, fmt.Errorf("safetensors: header length %d is beyond the %d-byte limit: not a safetensors file or corrupt", hlen, maxHeader)
	}
	if hlen > uint64(len(b)-8) {
		return nil, fmt.Errorf("safetensors: header length %d exceeds the file (%d bytes): file truncated or not a safetensors file", hlen, len(b))
	}
	if hlen < 2 {
		return nil, fmt.Errorf("safetensors: header length %d is too short for a JSON object", hlen)
	}
	fields, err := jsonObjectFields(b[8 : 8+hlen])
	if err != nil {
		return nil, fmt.Errorf("safetensors: bad header JSON: %w", err)
	}
	s := &SafeTensors{data: b, base: int64(8 + hlen), entries: make(map[string]stEntry, len(fields))}
	dataLen := int64(len(b)) - s.base
	for _, f := range fields {
		if f.name == "__metadata__" {
			if err := json.Unmarshal(f.value, &s.meta); err != nil {
				return nil, fmt.Errorf("safetensors: __metadata__ must map strings to strings: %w", err)
			}
			continue
		}
		e, err := parseSTEntry(f.name, f.value, dataLen)
		if err != nil {
			return nil, err
		}
		s.entries[f.name] = e
		s.keys = append(s.keys, f.name)
	}
	if err := checkCoverage(s.entries, dataLen); err != nil {
		return nil, err
	}
	sort.Strings(s.keys)
	return s, nil
}

func parseSTEntry(name string, msg json.RawMessage, dataLen int64) (stEntry, error) {
	var h stHeaderEntry
	dec := json.NewDecoder(bytes.NewReader(msg))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&h); err != nil {
		return stEntry{}, fmt.Errorf("safetensors: tensor %q: bad header entry: %w", name, err)
	}
	switch {
	case h.DType == nil:
		return stEntry{}, fmt.Errorf("safetensors: tensor %q: header entry has no dtype", name)
	case h.Shape == nil:
		return stEntry{}, fmt.Errorf("safetensors: tensor %q: header entry has no shape", name)
	case h.Offsets == nil:
		return stEntry{}, fmt.Errorf("safetensors: tensor %q: header entry has no data_offsets", name)
	}
	dt, shape64, off := *h.DType, *h.Shape, *h.Offsets
	es := dtypeSize(dt)
	if es == 0 {
		return stEntry{}, fmt.Errorf("safetensors: tensor %q: unsupported dtype %q", name, dt)
	}
	if len(shape64) > maxRank {
		return stEntry{}, fmt.Errorf("safetensors: tensor %q: rank %d is beyond the limit of %d", name, len(shape64), maxRank)
	}
	n, err := elemCount(shape64)
	if err != nil {
		return stEntry{}, fmt.Errorf("safetensors: tensor %q: %w", name, err)
	}
	if n > math.MaxInt64/int64(es) {
		return stEntry{}, fmt.Errorf("safetensors: tensor %q: shape %v is too large", name, shape64)
	}
	if len(off) != 2 {
		return stEntry{}, fmt.Errorf("safetensors: tensor %q: data_offsets must be [begin, end], got %v", name, off)
	}
	if off[0] < 0 || off[1] < off[0] {
		return stEntry{}, fmt.Errorf("safetensors: tensor %q: bad data_offsets %v", name, off)
	}
	if off[1]-off[0] != n*int64(es) {
		return stEntry{}, fmt.Errorf("safetensors: tensor %q: data_offsets %v hold %d bytes but shape %v of %s needs %d",
			name, off, off[1]-off[0], shape64, dt, n*int64(es))
	}
	if off[1] > dataLen {
		return stEntry{}, fmt.Errorf("safetensors: tensor %q ends at byte %d but the data section has %d bytes: file truncated", name, off[1], dataLen)
	}
	shape := make([]int, len(shape64))
	for i, d := range shape64 {
		shape[i] = int(d)
	}
	return stEntry{info: Info{DType: dt, Shape: shape}, begin: off[0], end: off[1]}, nil
}

// elemCount multiplies out a shape, refusing negative sizes and overflow.
func elemCount(shape []int64) (int64, error) {
	n := int64(1)
	for _, d := range shape {
		if d < 0 {
			return 0, fmt.Errorf("negative dimension in shape %v", shape)
		}
		if d > 0 && n > math.MaxInt64/d {
			return 0, fmt.Errorf("shape %v is too large", shape)
		}
		n *= d
	}
	return n, nil
}

// checkCoverage enforces the safetensors rule that tensors tile the data
// section exactly: no overlaps (two names sharing bytes), no holes, nothing
// after the last tensor.
func checkCoverage(entries map[string]stEntry, dataLen int64) error {
	type span struct {
		name       string
		begin, end int64
	}
	spans := make([]span, 0, len(entries))
	for name, e := range entries {
		spans = append(spans, span{name, e.begin, e.end})
	}
	sort.Slice(spans, func(i, j int) bool {
		if spans[i].begin != spans[j].begin {
			return spans[i].begin < spans[j].begin
		}
		if spans[i].end != spans[j].end {
			return spans[i].end < spans[j].end
		}
		return spans[i].name < spans[j].name
	})
	var pos int64
	prev := ""
	for _, sp := range spans {
		switch {
		case sp.begin < pos:
			return fmt.Errorf("safetensors: tensors %q and %q overlap (bytes %d..%d and ..%d): corrupt header", prev, sp.name, sp.begin, sp.end, pos)
		case sp.begin > pos:
			return fmt.Errorf("safetensors: %d unused bytes before tensor %q at data offset %d: corrupt header", sp.begin-pos, sp.name, pos)
		}
		pos, prev = sp.end, sp.name
	}
	if pos != dataLen {
		return fmt.Errorf("safetensors: the tensors cover %d bytes but the data section has %d: file truncated, padded or corrupt", pos, dataLen)
	}
	return nil
}

type jsonField struct {
	name  string
	value json.RawMessage
}

// jsonObjectFields splits a JSON object into its fields in file order,
// rejecting duplicate names (encoding/json would silently keep the last) and
// anything after the closing brace.
func jsonObjectFields(b []byte) ([]jsonField, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, errors.New("the header is not a JSON object")
	}
	var out []jsonField
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		name, ok := tok.(string)
		if !ok {
			return nil, fmt.Errorf("expected a field name, got %v", tok)
		}
		if seen[name] {
			return nil, fmt.Errorf("field %q appears twice", name)
		}
		seen[name] = true
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, fmt.Errorf("field %q: %w", name, err)
		}
		out = append(out, jsonField{name, v})
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("data after the end of the header object")
	}
	return out, nil
}

// Path is the file the tensors come from ("" for an in-memory image).
func (s *SafeTensors) Path() string { return s.path }

// Metadata is the header's __metadata__ map (may be nil).
func (s *SafeTensors) Metadata() map[string]string { return s.meta }

// Keys lists the tensor names, sorted.
func (s *SafeTensors) Keys() []string { return s.keys }

// Info describes a tensor.
func (s *SafeTensors) Info(name string) (Info, bool) {
	e, ok := s.entries[name]
	return e.info, ok
}

// Raw returns a tensor's bytes (a view of the mapping, valid until Close).
func (s *SafeTensors) Raw(name string) ([]byte, bool) {
	e, ok := s.entries[name]
	if !ok || s.data == nil {
		return nil, false
	}
	return s.data[s.base+e.begin : s.base+e.end], true
}

// RawBytes returns a tensor's bytes in its stored dtype (a view of the
// mapping, valid until Close).
func (s *SafeTensors) RawBytes(name string) ([]byte, error) {
	if s.data == nil {
		return nil, errors.New("safetensors: file is closed")
	}
	b, ok := s.Raw(name)
	if !ok {
		return nil, fmt.Errorf("no tensor %q", name)
	}
	return b, nil
}

// Float32 converts a tensor to float32 in a new slice.
func (s *SafeTensors) Float32(name string) ([]float32, error) {
	e, ok := s.entries[name]
	if !ok {
		return nil, fmt.Errorf("no tensor %q", name)
	}
	if s.data == nil {
		return nil, errors.New("safetensors: file is closed")
	}
	out, err := readFloat32(s.m, s.data, e.info.DType, s.base+e.begin, e.end-e.begin)
	if err != nil {
		return nil, fmt.Errorf("tensor %q: %w", name, err)
	}
	return out, nil
}

// Close unmaps the file.
func (s *SafeTensors) Close() error {
	err := s.m.close()
	s.data = nil
	return err
}
