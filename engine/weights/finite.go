package weights

import (
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"runtime"
	"sort"
	"sync"
	"syscall"
	"unsafe"
)

// NonFiniteError reports a checkpoint whose float tensors hold NaN or ±Inf.
// A single NaN weight turns every output of the model into NaN, so such a
// file is refused at load instead of producing a NaN trajectory.
type NonFiniteError struct {
	Key     string // the first affected tensor in key order
	DType   string
	NaN     int64 // its NaN values
	Inf     int64 // its ±Inf values
	Index   int64 // flat (row-major) index of its first NaN or ±Inf
	Values  int64 // values in the tensor
	Tensors int   // affected tensors in the whole checkpoint
}

func (e *NonFiniteError) Error() string {
	msg := fmt.Sprintf("weights: tensor %q (%s) holds %d NaN and %d ±Inf of its %d values, the first at flat index %d",
		e.Key, e.DType, e.NaN, e.Inf, e.Values, e.Index)
	if e.Tensors > 1 {
		msg += fmt.Sprintf("; %d tensors in all hold non-finite values", e.Tensors)
	}
	return msg + ": the checkpoint is corrupt"
}

// tensorView locates a tensor's bytes, stored row-major and contiguous, in
// a file image.
type tensorView struct {
	image  []byte // the whole file image (a mapping when mapped)
	off, n int64
	mapped bool
}

// viewer is implemented by stores whose tensors are views of a file image;
// ok is false for a tensor that is not (a strided view, a closed file).
type viewer interface {
	tensorView(name string) (v tensorView, ok bool)
}

func (s *SafeTensors) tensorView(name string) (tensorView, bool) {
	e, ok := s.entries[name]
	if !ok || s.data == nil {
		return tensorView{}, false
	}
	return tensorView{image: s.data, off: s.base + e.begin, n: e.end - e.begin, mapped: s.m != nil}, true
}

func (p *PTFile) tensorView(name string) (tensorView, bool) {
	t, ok := p.tensors[name]
	if !ok || !t.contiguous || p.m.closed() {
		return tensorView{}, false
	}
	n, _ := elemCount(t.shape)
	return tensorView{image: p.image, off: t.fileOffset + t.offset*t.es, n: n * t.es, mapped: p.m != nil}, true
}

func (s *Sharded) tensorView(name string) (tensorView, bool) {
	i, ok := s.owner[name]
	if !ok {
		return tensorView{}, false
	}
	v, ok := s.shards[i].(viewer)
	if !ok {
		return tensorView{}, false
	}
	return v.tensorView(name)
}

// scanChunk is the piece of a tensor one worker scans at a time: large
// enough to amortise the hand-off, small enough that one big tensor is
// spread over every core and that the pages it faults in are released soon.
const scanChunk = 4 << 20

// scanJob is one piece of work: a chunk of a viewed tensor, or (view.image
// == nil) a whole tensor read through the Store.
type scanJob struct {
	tensor int // index into the scan's key list
	view   tensorView
	first  int64 // element index of the chunk's first value
}

type tensorFinding struct {
	nan, inf int64
	first    int64
}

// ScanFinite reads every float tensor once and reports the first one in key
// order that holds NaN or ±Inf as a *NonFiniteError. Tensors of a
// memory-mapped file are scanned in place, in chunks spread over
// GOMAXPROCS goroutines, and each chunk's pages are dropped from this
// process's mapping once scanned (they stay in the page cache for the load
// that follows), so the scan adds no resident memory. Non-float tensors are
// skipped: Validate reports them.
func ScanFinite(s Store) error {
	keys := s.Keys()
	vw, _ := s.(viewer)
	var jobs []scanJob
	for i, k := range keys {
		inf, ok := s.Info(k)
		if !ok || !isFloatDType(inf.DType) {
			continue
		}
		var v tensorView
		if vw != nil {
			v, ok = vw.tensorView(k)
		}
		if vw == nil || !ok {
			jobs = append(jobs, scanJob{tensor: i})
			continue
		}
		es := int64(dtypeSize(inf.DType))
		for lo := int64(0); lo < v.n; lo += scanChunk {
			c := v
			c.off, c.n = v.off+lo, min(scanChunk, v.n-lo)
			jobs = append(jobs, scanJob{tensor: i, view: c, first: lo / es})
		}
	}

	var (
		mu       sync.Mutex
		found    = map[int]*tensorFinding{}
		firstErr error
		errAt    = len(keys)
		next     int
		wg       sync.WaitGroup
	)
	record := func(t int, nan, inf, first int64) {
		mu.Lock()
		defer mu.Unlock()
		f := found[t]
		if f == nil {
			f = &tensorFinding{first: first}
			found[t] = f
		}
		f.nan += nan
		f.inf += inf
		f.first = min(f.first, first)
	}
	take := func() (scanJob, bool) {
		mu.Lock()
		defer mu.Unlock()
		if next == len(jobs) {
			return scanJob{}, false
		}
		next++
		return jobs[next-1], true
	}
	page := int64(os.Getpagesize())
	for range min(runtime.GOMAXPROCS(0), max(len(jobs), 1)) {
		wg.Go(func() {
			for {
				j, ok := take()
				if !ok {
					return
				}
				dt := mustInfo(s, keys[j.tensor]).DType
				var b []byte
				if j.view.image != nil {
					b = j.view.image[j.view.off : j.view.off+j.view.n]
				} else {
					var err error
					if b, err = tensorBytes(s, keys[j.tensor], dt); err != nil {
						mu.Lock()
						if j.tensor < errAt {
							errAt, firstErr = j.tensor, fmt.Errorf("weights: scanning %q for NaN and Inf: %w", keys[j.tensor], err)
						}
						mu.Unlock()
						continue
					}
				}
				if anyNonFinite(dt, b) {
					nan, inf, first := countNonFinite(dt, b)
					record(j.tensor, nan, inf, j.first+first)
				}
				if j.view.mapped {
					releasePages(j.view.image, j.view.off, j.view.n, page)
				}
			}
		})
	}
	wg.Wait()
	// Fault-around maps pages beyond the chunk being read, some after their
	// own chunk was released: one last pass gives back what is left.
	released := map[*byte]bool{}
	for _, j := range jobs {
		if j.view.mapped && !released[&j.view.image[0]] {
			released[&j.view.image[0]] = true
			releasePages(j.view.image, 0, int64(len(j.view.image)), page)
		}
	}

	if len(found) == 0 {
		return firstErr
	}
	bad := make([]int, 0, len(found))
	for t := range found {
		bad = append(bad, t)
	}
	sort.Ints(bad)
	if firstErr != nil && errAt < bad[0] {
		return firstErr
	}
	t := bad[0]
	inf := mustInfo(s, keys[t])
	n := int64(1)
	for _, d := range inf.Shape {
		n *= int64(d)
	}
	f := found[t]
	return &NonFiniteError{Key: keys[t], DType: inf.DType, NaN: f.nan, Inf: f.inf, Index: f.first, Values: n, Tensors: len(bad)}
}

func mustInfo(s Store, k string) Info {
	inf, _ := s.Info(k)
	return inf
}

// tensorBytes reads a tensor that is not a view of a file image: its stored
// bytes when the store hands them out, else its float32 values as F32
// bytes (the stores of this package without RawReader hold F32 only).
func tensorBytes(s Store, k, dt string) ([]byte, error) {
	if r, ok := s.(RawReader); ok {
		return r.RawBytes(k)
	}
	f, err := s.Float32(k)
	if err != nil {
		return nil, err
	}
	if dt != "F32" {
		return nil, fmt.Errorf("the store converts %s to float32 and hands out no raw bytes", dt)
	}
	b := make([]byte, 4*len(f))
	encodeFloat32(b, f)
	return b, nil
}

// releasePages drops the pages of image[off:off+n] from this process's
// mapping. MADV_DONTNEED on a shared read-only file mapping only unmaps the
// pages: their contents stay in the page cache and the file is untouched.
// Pages shared with a neighbouring chunk may be released early; a later
// read faults them in again.
func releasePages(image []byte, off, n, page int64) {
	lo := off / page * page
	hi := min((off+n+page-1)/page*page, int64(len(image)))
	if hi > lo {
		_ = syscall.Madvise(image[lo:hi], syscall.MADV_DONTNEED) // only an optimisation
	}
}

// lanes describes how a dtype's exponent field repeats in a 64-bit word:
// (w & mask) + one carries into a lane's top bit exactly when the lane's
// exponent is all ones, i.e. the value is NaN or ±Inf.
type lanes struct {
	es        int // element size in bytes
	mask, one uint64
	exp, man  uint64 // one element's exponent and mantissa bits
}

func dtypeLanes(dt string) (lanes, bool) {
	switch dt {
	case "F32":
		return lanes{4, 0x7f800000_7f800000, 0x00800000_00800000, 0x7f800000, 0x007fffff}, true
	case "BF16":
		return lanes{2, 0x7f80_7f80_7f80_7f80, 0x0080_0080_0080_0080, 0x7f80, 0x007f}, true
	case "F16":
		return lanes{2, 0x7c00_7c00_7c00_7c00, 0x0400_0400_0400_0400, 0x7c00, 0x03ff}, true
	}
	return lanes{}, false
}

// anyNonFinite reports whether b, little-endian values of dt, holds a NaN
// or ±Inf (for F64: a value that is not finite once converted to float32). It tests a 64-bit word (2 to 4 values) per step, without a
// branch per value; aligned data is read in place as words.
func anyNonFinite(dt string, b []byte) bool {
	if dt == "F64" {
		nan, inf, _ := countNonFinite(dt, b)
		return nan+inf > 0
	}
	l, ok := dtypeLanes(dt)
	if !ok {
		return false
	}
	addr := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	if littleEndianHost() && addr%uintptr(l.es) == 0 {
		// values up to the first 8-byte boundary, then whole words in place
		for ; len(b) >= l.es && addr%8 != 0; addr += uintptr(l.es) {
			if elemNonFinite(l, b) {
				return true
			}
			b = b[l.es:]
		}
		if len(b) >= 8 {
			w := unsafe.Slice((*uint64)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/8)
			var acc uint64
			for _, x := range w {
				acc |= x&l.mask + l.one
			}
			if acc&(l.mask+l.one) != 0 {
				return true
			}
			b = b[8*len(w):]
		}
	} else {
		var acc uint64
		for ; len(b) >= 8; b = b[8:] {
			acc |= binary.LittleEndian.Uint64(b)&l.mask + l.one
		}
		if acc&(l.mask+l.one) != 0 {
			return true
		}
	}
	for ; len(b) >= l.es; b = b[l.es:] {
		if elemNonFinite(l, b) {
			return true
		}
	}
	return false
}

// elemNonFinite tests the first value of b.
func elemNonFinite(l lanes, b []byte) bool {
	return elemBits(l, b)&l.exp == l.exp
}

func elemBits(l lanes, b []byte) uint64 {
	var v uint64
	for k := l.es - 1; k >= 0; k-- {
		v = v<<8 | uint64(b[k])
	}
	return v
}

// countNonFinite counts the NaN and ±Inf values of b and finds the first
// one's element index (-1 when there is none).
func countNonFinite(dt string, b []byte) (nan, inf, first int64) {
	first = -1
	if dt == "F64" {
		// Loading converts to float32: a finite F64 beyond its range
		// becomes ±Inf, so the test is on the converted value.
		for i := int64(0); len(b) >= 8; i, b = i+1, b[8:] {
			v := float64(float32(math.Float64frombits(binary.LittleEndian.Uint64(b))))
			switch {
			case math.IsNaN(v):
				nan++
			case math.IsInf(v, 0):
				inf++
			default:
				continue
			}
			if first < 0 {
				first = i
			}
		}
		return nan, inf, first
	}
	l, ok := dtypeLanes(dt)
	if !ok {
		return 0, 0, -1
	}
	for i := int64(0); len(b) >= l.es; i, b = i+1, b[l.es:] {
		v := elemBits(l, b)
		if v&l.exp != l.exp {
			continue
		}
		if v&l.man != 0 {
			nan++
		} else {
			inf++
		}
		if first < 0 {
			first = i
		}
	}
	return nan, inf, first
}
