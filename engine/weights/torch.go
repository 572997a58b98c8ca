package weights

import (
	"archive/zip"
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
)

// maxPickle bounds data.pkl; a 1342-tensor state dict pickles to ~200 KB.
const maxPickle = 256 << 20

// ptTensor is one state-dict entry: a strided view into a storage file of the zip.
type ptTensor struct {
	info       Info
	storage    []byte // the whole storage's bytes (a view of the file)
	fileOffset int64  // where storage starts in the file
	es         int64
	offset     int64 // in elements
	shape      []int64
	stride     []int64
	contiguous bool
}

// PTFile is a zip-format torch.save checkpoint read in place: the zip is
// memory-mapped and each tensor is decoded from its storage entry on demand.
type PTFile struct {
	path    string
	m       *mappedFile // nil for an in-memory image
	image   []byte      // the whole zip
	tensors map[string]*ptTensor
	keys    []string
}

// OpenPT maps a PyTorch checkpoint (torch.save zip format) whose pickle is a
// state dict (optionally wrapped as {"model": state_dict}).
func OpenPT(path string) (*PTFile, error) {
	m, err := mapFile(path)
	if err != nil {
		return nil, fmt.Errorf("weights: %s: %w", path, err)
	}
	// The zip directory and local headers are read with pread, not through
	// the mapping, so that opening faults in no pages of the 4.6 GB file.
	p, err := parsePT(m.f, m.data)
	if err != nil {
		_ = m.close()
		return nil, fmt.Errorf("weights: %s: %w", path, err)
	}
	p.path, p.m = path, m
	return p, nil
}

// ParsePT reads a torch.save zip image held in memory; tensors alias b.
func ParsePT(b []byte) (*PTFile, error) { return parsePT(bytes.NewReader(b), b) }

// parsePT reads the archive through r; b is the same bytes in memory (or mapped).
func parsePT(r io.ReaderAt, b []byte) (*PTFile, error) {
	zr, err := zip.NewReader(r, int64(len(b)))
	if err != nil && !errors.Is(err, zip.ErrInsecurePath) {
		return nil, fmt.Errorf("pt: not a readable zip archive (truncated or not a torch.save file): %w", err)
	}
	if zr == nil {
		return nil, fmt.Errorf("pt: not a readable zip archive: %w", err)
	}
	var pkl *zip.File
	entries := map[string]*zip.File{}
	for _, f := range zr.File {
		entries[f.Name] = f
		dir, base, ok := strings.Cut(f.Name, "/")
		if ok && base == "data.pkl" && dir != "" {
			if pkl != nil {
				return nil, fmt.Errorf("pt: two pickles in one archive (%s and %s)", pkl.Name, f.Name)
			}
			pkl = f
		}
	}
	if pkl == nil {
		return nil, errors.New("pt: the archive has no <name>/data.pkl: not a torch.save checkpoint")
	}
	prefix := strings.TrimSuffix(pkl.Name, "data.pkl")
	if bo, ok := entries[prefix+"byteorder"]; ok {
		order, err := readSmallEntry(bo, 64)
		if err != nil {
			return nil, fmt.Errorf("pt: reading %s: %w", bo.Name, err)
		}
		if s := strings.TrimSpace(string(order)); s != "little" {
			return nil, fmt.Errorf("pt: byte order %q is not supported (only little-endian checkpoints)", s)
		}
	}
	prog, err := readSmallEntry(pkl, maxPickle)
	if err != nil {
		return nil, fmt.Errorf("pt: reading %s: %w", pkl.Name, err)
	}
	root, err := unpickle(prog)
	if err != nil {
		return nil, fmt.Errorf("pt: %s: %w", pkl.Name, err)
	}
	sd, err := stateDict(root)
	if err != nil {
		return nil, fmt.Errorf("pt: %w", err)
	}
	p := &PTFile{image: b, tensors: make(map[string]*ptTensor, len(sd.keys))}
	storages := map[string]*zip.File{}
	for i, k := range sd.keys {
		name := k.(string) // checked by stateDict
		ref := sd.vals[i].(*tensorRef)
		f, ok := storages[ref.storage.key]
		if !ok {
			f, ok = entries[prefix+"data/"+ref.storage.key]
			if !ok {
				return nil, fmt.Errorf("pt: tensor %q: storage %sdata/%s is missing from the archive", name, prefix, ref.storage.key)
			}
			storages[ref.storage.key] = f
		}
		t, err := newPTTensor(b, f, ref)
		if err != nil {
			return nil, fmt.Errorf("pt: tensor %q: %w", name, err)
		}
		p.tensors[name] = t
		p.keys = append(p.keys, name)
	}
	sort.Strings(p.keys)
	return p, nil
}

// readSmallEntry reads a (possibly compressed) metadata entry of bounded size.
func readSmallEntry(f *zip.File, limit int64) ([]byte, error) {
	if f.UncompressedSize64 > uint64(limit) {
		return nil, fmt.Errorf("entry of %d bytes is larger than the %d-byte limit", f.UncompressedSize64, limit)
	}
	rc, err := f.Open()
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("entry is larger than the %d-byte limit", limit)
	}
	return b, nil
}

// stateDict finds the tensor dict: the root itself or root["model"] / root["state_dict"].
func stateDict(root any) (*pyDict, error) {
	d, ok := root.(*pyDict)
	if !ok {
		return nil, fmt.Errorf("the pickle holds %s, not a state dict", describe(root))
	}
	if len(d.keys) > 0 && !isTensorDict(d) {
		for _, wrap := range []string{"model", "state_dict"} {
			if inner, ok := d.get(wrap); ok {
				if id, ok := inner.(*pyDict); ok {
					d = id
					break
				}
				return nil, fmt.Errorf("the checkpoint's %q entry is %s, not a state dict", wrap, describe(inner))
			}
		}
	}
	for i, k := range d.keys {
		name, ok := k.(string)
		if !ok {
			return nil, fmt.Errorf("state dict key %d is %s, not a string", i, describe(k))
		}
		if _, ok := d.vals[i].(*tensorRef); !ok {
			return nil, fmt.Errorf("state dict entry %q is %s, not a tensor", name, describe(d.vals[i]))
		}
	}
	return d, nil
}

func isTensorDict(d *pyDict) bool {
	for _, v := range d.vals {
		if _, ok := v.(*tensorRef); ok {
			return true
		}
	}
	return false
}

func newPTTensor(file []byte, f *zip.File, ref *tensorRef) (*ptTensor, error) {
	if f.Method != zip.Store {
		return nil, fmt.Errorf("storage %s is compressed (zip method %d); torch.save writes storages uncompressed and they are read in place — re-save the checkpoint with torch.save", f.Name, f.Method)
	}
	if f.CompressedSize64 != f.UncompressedSize64 {
		return nil, fmt.Errorf("storage %s: stored entry with %d compressed but %d uncompressed bytes", f.Name, f.CompressedSize64, f.UncompressedSize64)
	}
	es := int64(dtypeSize(ref.storage.dtype))
	st := ref.storage
	if st.numel > math.MaxInt64/es || uint64(st.numel*es) != f.UncompressedSize64 {
		return nil, fmt.Errorf("storage %s has %d bytes, but the pickle says %d %s elements (%d bytes)", f.Name, f.UncompressedSize64, st.numel, st.dtype, st.numel*es)
	}
	off, err := f.DataOffset()
	if err != nil {
		return nil, fmt.Errorf("storage %s: %w", f.Name, err)
	}
	size := int64(f.UncompressedSize64)
	if off < 0 || off > int64(len(file)) || size > int64(len(file))-off {
		return nil, fmt.Errorf("storage %s (bytes %d..%d) lies beyond the end of the file (%d bytes): file truncated", f.Name, off, off+size, len(file))
	}
	n, err := elemCount(ref.shape)
	if err != nil {
		return nil, err
	}
	t := &ptTensor{
		storage: file[off : off+size], fileOffset: off, es: es,
		offset: ref.offset, shape: ref.shape, stride: ref.stride,
		contiguous: isContiguous(ref.shape, ref.stride),
	}
	if n > 0 {
		// The last element a strided view touches must lie inside the storage.
		last := ref.offset
		for i, d := range ref.shape {
			if ref.stride[i] > 0 && d-1 > (math.MaxInt64-last)/ref.stride[i] {
				return nil, fmt.Errorf("size %v with stride %v overflows", ref.shape, ref.stride)
			}
			last += (d - 1) * ref.stride[i]
		}
		if last >= st.numel {
			return nil, fmt.Errorf("view (offset %d, size %v, stride %v) reaches element %d of a storage of %d elements", ref.offset, ref.shape, ref.stride, last, st.numel)
		}
	}
	shape := make([]int, len(ref.shape))
	for i, d := range ref.shape {
		if int64(int(d)) != d {
			return nil, fmt.Errorf("dimension %d is too large", d)
		}
		shape[i] = int(d)
	}
	t.info = Info{DType: st.dtype, Shape: shape}
	return t, nil
}

// isContiguous reports row-major layout; strides of size-1 dimensions do not matter.
func isContiguous(shape, stride []int64) bool {
	want := int64(1)
	for i := len(shape) - 1; i >= 0; i-- {
		if shape[i] == 0 {
			return true
		}
		if shape[i] != 1 && stride[i] != want {
			return false
		}
		want *= shape[i]
	}
	return true
}

// bytes returns the tensor's elements in row-major order: a view for
// contiguous tensors, a gathered copy otherwise.
func (t *ptTensor) bytes() []byte {
	n, _ := elemCount(t.shape)
	if t.contiguous {
		return t.storage[t.offset*t.es : (t.offset+n)*t.es]
	}
	out := make([]byte, n*t.es)
	idx := make([]int64, len(t.shape))
	for i := int64(0); i < n; i++ {
		src := t.offset
		for d, j := range idx {
			src += j * t.stride[d]
		}
		copy(out[i*t.es:(i+1)*t.es], t.storage[src*t.es:(src+1)*t.es])
		for d := len(idx) - 1; d >= 0; d-- { // odometer increment
			idx[d]++
			if idx[d] < t.shape[d] {
				break
			}
			idx[d] = 0
		}
	}
	return out
}

// Path is the checkpoint file ("" for an in-memory image).
func (p *PTFile) Path() string { return p.path }

// Keys lists the tensor names, sorted.
func (p *PTFile) Keys() []string { return p.keys }

// Info describes a tensor.
func (p *PTFile) Info(name string) (Info, bool) {
	t, ok := p.tensors[name]
	if !ok {
		return Info{}, false
	}
	return t.info, true
}

// RawBytes returns a tensor's bytes in its stored dtype, row-major: a view of
// the mapping for contiguous tensors, a copy for strided ones.
func (p *PTFile) RawBytes(name string) ([]byte, error) {
	t, ok := p.tensors[name]
	if !ok {
		return nil, fmt.Errorf("no tensor %q", name)
	}
	if p.m.closed() {
		return nil, errors.New("pt: file is closed")
	}
	return t.bytes(), nil
}

// Float32 converts a tensor to float32 in a new slice.
func (p *PTFile) Float32(name string) ([]float32, error) {
	t, ok := p.tensors[name]
	if !ok {
		return nil, fmt.Errorf("no tensor %q", name)
	}
	if p.m.closed() {
		return nil, errors.New("pt: file is closed")
	}
	var out []float32
	var err error
	if t.contiguous {
		n, _ := elemCount(t.shape)
		out, err = readFloat32(p.m, p.image, t.info.DType, t.fileOffset+t.offset*t.es, n*t.es)
	} else {
		out, err = DecodeFloat32(t.info.DType, t.bytes())
	}
	if err != nil {
		return nil, fmt.Errorf("tensor %q: %w", name, err)
	}
	return out, nil
}

// Close unmaps the file.
func (p *PTFile) Close() error { return p.m.close() }
