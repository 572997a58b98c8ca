package weights

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"sort"
	"syscall"
)

// maxHeader bounds the JSON header so a corrupt length cannot ask for gigabytes.
const maxHeader = 100 << 20

type stEntry struct {
	info       Info
	begin, end int64 // byte range inside the data section
}

// SafeTensors is a memory-mapped .safetensors file.
type SafeTensors struct {
	path    string
	data    []byte // the mapped file
	base    int64  // offset of the data section
	entries map[string]stEntry
	keys    []string
}

// OpenSafeTensors maps a .safetensors file and validates its header against the file size.
func OpenSafeTensors(path string) (*SafeTensors, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("weights: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("weights: %w", err)
	}
	size := st.Size()
	if size < 8 {
		return nil, fmt.Errorf("weights: %s: file of %d bytes is too short for a safetensors header", path, size)
	}
	data, err := syscall.Mmap(int(f.Fd()), 0, int(size), syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("weights: mmap %s: %w", path, err)
	}
	s, err := parseSafeTensors(data)
	if err != nil {
		_ = syscall.Munmap(data)
		return nil, fmt.Errorf("weights: %s: %w", path, err)
	}
	s.path = path
	return s, nil
}

// ParseSafeTensors reads a safetensors image held in memory.
func ParseSafeTensors(b []byte) (*SafeTensors, error) { return parseSafeTensors(b) }

func parseSafeTensors(b []byte) (*SafeTensors, error) {
	if len(b) < 8 {
		return nil, errors.New("safetensors: truncated: no header length")
	}
	hlen := binary.LittleEndian.Uint64(b[:8])
	if hlen > maxHeader || hlen > uint64(len(b)-8) {
		return nil, fmt.Errorf("safetensors: header length %d exceeds the file (%d bytes): truncated or not a safetensors file", hlen, len(b))
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b[8:8+hlen], &raw); err != nil {
		return nil, fmt.Errorf("safetensors: bad header JSON: %w", err)
	}
	s := &SafeTensors{data: b, base: int64(8 + hlen), entries: map[string]stEntry{}}
	dataLen := int64(len(b)) - s.base
	for name, msg := range raw {
		if name == "__metadata__" {
			continue
		}
		var e struct {
			DType   string  `json:"dtype"`
			Shape   []int   `json:"shape"`
			Offsets []int64 `json:"data_offsets"`
		}
		if err := json.Unmarshal(msg, &e); err != nil {
			return nil, fmt.Errorf("safetensors: tensor %q: bad entry: %w", name, err)
		}
		es := dtypeSize(e.DType)
		if es == 0 {
			return nil, fmt.Errorf("safetensors: tensor %q: unsupported dtype %q", name, e.DType)
		}
		if len(e.Offsets) != 2 || e.Offsets[0] < 0 || e.Offsets[1] < e.Offsets[0] {
			return nil, fmt.Errorf("safetensors: tensor %q: bad data_offsets %v", name, e.Offsets)
		}
		n := int64(1)
		for _, d := range e.Shape {
			if d < 0 || (d > 0 && n > math.MaxInt64/int64(d)/8) {
				return nil, fmt.Errorf("safetensors: tensor %q: bad shape %v", name, e.Shape)
			}
			n *= int64(d)
		}
		if e.Offsets[1]-e.Offsets[0] != n*int64(es) {
			return nil, fmt.Errorf("safetensors: tensor %q: %d bytes for shape %v of %s", name, e.Offsets[1]-e.Offsets[0], e.Shape, e.DType)
		}
		if e.Offsets[1] > dataLen {
			return nil, fmt.Errorf("safetensors: tensor %q ends at byte %d but the data section has %d bytes: file truncated", name, e.Offsets[1], dataLen)
		}
		s.entries[name] = stEntry{info: Info{DType: e.DType, Shape: e.Shape}, begin: e.Offsets[0], end: e.Offsets[1]}
		s.keys = append(s.keys, name)
	}
	sort.Strings(s.keys)
	return s, nil
}

func dtypeSize(dt string) int {
	switch dt {
	case "F64", "I64", "U64":
		return 8
	case "F32", "I32", "U32":
		return 4
	case "F16", "BF16", "I16", "U16":
		return 2
	case "U8", "I8", "BOOL":
		return 1
	}
	return 0
}

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
	if !ok {
		return nil, false
	}
	return s.data[s.base+e.begin : s.base+e.end], true
}

// Float32 converts a tensor to float32.
func (s *SafeTensors) Float32(name string) ([]float32, error) {
	e, ok := s.entries[name]
	if !ok {
		return nil, fmt.Errorf("no tensor %q", name)
	}
	raw := s.data[s.base+e.begin : s.base+e.end]
	return DecodeFloat32(e.info.DType, raw)
}

// Close unmaps the file.
func (s *SafeTensors) Close() error {
	if s.path == "" || s.data == nil {
		return nil
	}
	err := syscall.Munmap(s.data)
	s.data = nil
	return err
}

// DecodeFloat32 converts little-endian raw tensor bytes of a dtype to float32.
func DecodeFloat32(dtype string, raw []byte) ([]float32, error) {
	switch dtype {
	case "F32":
		out := make([]float32, len(raw)/4)
		for i := range out {
			out[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
		}
		return out, nil
	case "F64":
		out := make([]float32, len(raw)/8)
		for i := range out {
			out[i] = float32(math.Float64frombits(binary.LittleEndian.Uint64(raw[8*i:])))
		}
		return out, nil
	case "BF16":
		out := make([]float32, len(raw)/2)
		for i := range out {
			out[i] = math.Float32frombits(uint32(binary.LittleEndian.Uint16(raw[2*i:])) << 16)
		}
		return out, nil
	case "F16":
		out := make([]float32, len(raw)/2)
		for i := range out {
			out[i] = halfToFloat(binary.LittleEndian.Uint16(raw[2*i:]))
		}
		return out, nil
	case "U8", "BOOL":
		out := make([]float32, len(raw))
		for i, v := range raw {
			out[i] = float32(v)
		}
		return out, nil
	case "I64":
		out := make([]float32, len(raw)/8)
		for i := range out {
			out[i] = float32(int64(binary.LittleEndian.Uint64(raw[8*i:])))
		}
		return out, nil
	case "I32":
		out := make([]float32, len(raw)/4)
		for i := range out {
			out[i] = float32(int32(binary.LittleEndian.Uint32(raw[4*i:])))
		}
		return out, nil
	}
	return nil, fmt.Errorf("cannot convert dtype %s to float32", dtype)
}

func halfToFloat(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h) & 0x3ff
	switch {
	case exp == 0 && mant == 0:
		return math.Float32frombits(sign)
	case exp == 0: // subnormal
		f := float32(mant) / 1024 / 16384
		if sign != 0 {
			return -f
		}
		return f
	case exp == 31:
		return math.Float32frombits(sign | 0x7f800000 | mant<<13)
	}
	return math.Float32frombits(sign | (exp+112)<<23 | mant<<13)
}
