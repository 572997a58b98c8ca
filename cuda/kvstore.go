//go:build cuda

package cuda

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"unsafe"

	"gorgonia.org/cu"

	"github.com/lingbotmap/lingbotmap/engine/backend"
)

// kvStore is the paged KV cache on the device: per layer one K and one V
// array of [Pages, PageSize, Heads, HeadDim], bf16 in BF16 mode (as the
// reference's FlashInfer cache) and fp32 in FP32 mode. In FP8 mode both are
// e4m3 with a scale per layer, head and K or V (kernels/kvfp8.cu), pages
// are rows() = PageSize rounded up to 16 rows long, and V is stored
// transposed, [Pages, Heads·HeadDim, rows()]. The arrays are regions
// of one reserved address range (vmSpace) that gets memory a page at a time,
// when a page is first written; without virtual memory management every page
// is allocated up front.
type kvStore struct {
	spec backend.KVSpec
	bf   bool // bf16 elements
	fp8  bool // e4m3 elements (FP8 mode)
	elem int64
	// FP8: the scales on the device, [Layers][2][Heads] (K's, then V's),
	// set from each layer's first write (calibrated[l]) after the store is
	// made or released.
	scales     *buffer
	calibrated []bool
	// FP8: sat counts, on the device (after the scales), the values that
	// saturated since the scales were set. satHost receives it
	// asynchronously after every write of layer 0 (once a frame), and the
	// next such write warns when it has grown, so that watching it costs no
	// synchronisation; satWarned is the count last warned about.
	sat       cu.DevicePtr
	satHost   *hostWord
	satWarned uint64
	// k[l] and v[l] are the layer's arrays.
	k, v []cu.DevicePtr
	vm   *vmSpace  // nil: eager buffers in bufs
	bufs []*buffer // eager storage, or nil
	// backed[p] says page p has memory (always true with eager storage).
	backed []bool
	g      *gpu
	// The page table lives on the device; uploading is skipped when a block
	// asks for the same table as the previous one (all global blocks share it).
	pt     *buffer
	ptHost []int32
	// maps: the TMA descriptors of every layer's K (2l) and V (2l+1) for
	// attn_tma3_paged_bf, made when first needed; the arrays never move.
	maps *tensorMaps
}

// The capabilities the model asks of a KV store (backend.Capabilities).
var (
	_ backend.KVReleaser = (*kvStore)(nil)
	_ backend.KVSizer    = (*kvStore)(nil)
	_ io.Closer          = (*kvStore)(nil)
)

// tensorMaps returns the layers' K and V tensor maps for the TMA paged
// kernel, encoding them on first use (owner thread).
func (s *kvStore) tensorMaps() (*tensorMaps, error) {
	if s.maps != nil {
		return s.maps, nil
	}
	m, err := newTensorMaps(2 * s.spec.Layers)
	if err != nil {
		return nil, err
	}
	cols := s.spec.Heads * s.spec.HeadDim
	for l := 0; l < s.spec.Layers; l++ {
		for i, base := range []cu.DevicePtr{s.k[l], s.v[l]} {
			var err error
			switch {
			case s.fp8 && i == 0:
				err = m.encodeFP8KPages(2*l, base, cols, s.spec.PageSize, s.rows(), s.spec.Pages, s.spec.HeadDim, f8Kernel.tk)
			case s.fp8:
				err = m.encodeFP8VtPages(2*l+1, base, cols, s.rows(), s.spec.Pages, f8Kernel.tk, s.spec.HeadDim)
			default:
				err = m.encodeBF16Pages(2*l+i, base, cols, s.spec.PageSize, s.spec.Pages, s.spec.HeadDim, tma3Kernel.tk)
			}
			if err != nil {
				m.free()
				return nil, err
			}
		}
	}
	s.maps = m
	return m, nil
}

func (s *kvStore) Layers() int   { return s.spec.Layers }
func (s *kvStore) Pages() int    { return s.spec.Pages }
func (s *kvStore) PageSize() int { return s.spec.PageSize }

// Bytes is the device memory the pages hold now (2 bytes an element in BF16
// mode): with lazily backed pages, only the pages written so far.
func (s *kvStore) Bytes() int64 {
	if s.vm != nil {
		return s.vm.bytes
	}
	return s.spec.Bytes(int(s.elem))
}

func (s *kvStore) pageBytes() int64 {
	return int64(s.rows()) * int64(s.spec.Heads*s.spec.HeadDim) * s.elem
}

// rows is the rows a page is allocated: the page size, rounded up to 16 in
// FP8 mode (the transposed V's rows must be 16-byte multiples for the TMA).
func (s *kvStore) rows() int {
	if s.fp8 {
		return fp8Rows(s.spec.PageSize)
	}
	return s.spec.PageSize
}

// back gives page p memory in every layer if it has none yet (owner thread).
func (s *kvStore) back(p int) error {
	if s.backed[p] {
		return nil
	}
	pb := s.pageBytes()
	added, err := s.vm.ensure(int64(p)*pb, pb)
	s.g.pool.external(added, catKV)
	if err != nil {
		free, total, _ := memInfo()
		return fmt.Errorf("the KV cache could not get memory for page %d (%s for %d layers; the GPU has %s free of %s): %w",
			p, human(2*pb*int64(s.spec.Layers)), s.spec.Layers, human(free), human(total), err)
	}
	s.backed[p] = true
	return nil
}

func (g *gpu) kv(s backend.KVStore) *kvStore {
	c, ok := s.(*kvStore)
	if !ok {
		panic(fmt.Sprintf("cuda: KV store %T is not a CUDA store", s))
	}
	return c
}

// NewKVStore reserves the pages of all layers after checking that the device
// has the memory for the pages the stream will write (all of them without
// lazily backed pages) and, with Config.Window, for the camera head's cache
// and a frame's activations too, so that a stream does not run out later
// (unless something else takes the memory meanwhile). The error says which
// smaller window or image width fits (kvPlan.check).
func (g *gpu) NewKVStore(spec backend.KVSpec) (backend.KVStore, error) {
	if spec.Layers <= 0 || spec.Pages <= 0 || spec.PageSize <= 0 || spec.Heads <= 0 || spec.HeadDim <= 0 {
		return nil, fmt.Errorf("cuda: invalid KV store size %v", spec)
	}
	if d := spec.HeadDim; d != 64 && d != 128 {
		return nil, fmt.Errorf("cuda: the paged attention kernel supports head dims 64 and 128, not %d", d)
	}
	if err := g.Err(); err != nil {
		return nil, err
	}
	st := &kvStore{spec: spec, bf: g.cfg.Precision == BF16, fp8: g.cfg.Precision == FP8, elem: 4, g: g, backed: make([]bool, spec.Pages)}
	switch {
	case st.bf:
		st.elem = 2
	case st.fp8:
		if spec.HeadDim != 64 {
			return nil, fmt.Errorf("cuda: the FP8 cache's kernel takes heads of 64, not %d: use precision bf16", spec.HeadDim)
		}
		st.elem = 1
		st.calibrated = make([]bool, spec.Layers)
	}
	per := int64(spec.Pages) * st.pageBytes()
	plan := kvPlan{win: g.cfg.Window, layers: spec.Layers, heads: spec.Heads, headDim: spec.HeadDim,
		pageSize: spec.PageSize, pages: spec.Pages, elem: st.elem, lazy: !g.cfg.EagerKV}
	err := g.own.do(func() error {
		if err := g.flush(); err != nil {
			return err
		}
		free, total, err := memInfo()
		if err != nil {
			return err
		}
		if err := plan.check(free, total); err != nil {
			return err
		}
		if st.pt, err = g.pool.getAs(int64(spec.Pages)*4, catKV); err != nil {
			return err
		}
		if st.fp8 {
			at := (int64(spec.Layers)*2*int64(spec.Heads)*4 + 7) &^ 7
			if st.scales, err = g.pool.getAs(at+8, catKV); err != nil {
				return err
			}
			st.sat = st.scales.ptr + cu.DevicePtr(at)
			if err := cu.MemsetD32(st.sat, 0, 2); err != nil {
				return err
			}
			if st.satHost, err = newHostWord(); err != nil {
				return err
			}
		}
		if !g.cfg.EagerKV {
			st.vm, err = newVMSpace(2*spec.Layers, per)
			if err == nil {
				for l := 0; l < spec.Layers; l++ {
					st.k = append(st.k, st.vm.region(2*l))
					st.v = append(st.v, st.vm.region(2*l+1))
				}
				return nil
			}
			if !errors.Is(err, errNoVMM) {
				return err
			}
			g.log.Info("cuda: no virtual memory management; the whole KV cache is allocated now")
			plan.lazy = false
			if err := plan.check(free, total); err != nil {
				return err
			}
		}
		for range 2 * spec.Layers {
			b, err := g.pool.getAs(per, catKV)
			if err != nil {
				return fmt.Errorf("the KV cache (%v) does not fit: %w", spec, err)
			}
			// Zero like the reference, so a stray read sees zeros, not garbage.
			if err := cu.MemsetD32(b.ptr, 0, b.size/4); err != nil {
				return err
			}
			st.bufs = append(st.bufs, b)
		}
		for l := 0; l < spec.Layers; l++ {
			st.k = append(st.k, st.bufs[2*l].ptr)
			st.v = append(st.v, st.bufs[2*l+1].ptr)
		}
		for i := range st.backed {
			st.backed[i] = true
		}
		return nil
	})
	if err != nil {
		_ = g.own.do(func() error {
			st.free()
			g.pool.trim()
			return nil
		})
		return nil, fmt.Errorf("cuda: %w", err)
	}
	return st, nil
}

// free gives the store's memory back (owner thread).
func (s *kvStore) free() {
	for _, b := range s.bufs {
		s.g.pool.put(b)
	}
	s.bufs = nil
	if s.vm != nil {
		s.g.pool.external(-s.vm.bytes, catKV)
		s.vm.release()
		s.vm = nil
	}
	s.g.pool.put(s.pt)
	s.pt = nil
	if s.scales != nil {
		s.g.pool.put(s.scales)
		s.scales = nil
	}
	s.satHost.free()
	s.satHost = nil
	s.maps.free()
	s.maps = nil
	s.k, s.v = nil, nil
	clear(s.backed)
}

// Release gives the physical memory of every page back while the cache holds
// no frames (a reset); pages get memory again, zeroed, when next written or
// attended. Only a lazily backed store shrinks.
func (s *kvStore) Release() error {
	return s.g.own.do(func() error {
		// The next stream's first writes set the FP8 scales, in a lazily
		// backed store or not.
		clear(s.calibrated)
		lazy := s.vm != nil && s.vm.bytes > 0
		if !lazy && !s.fp8 {
			return nil
		}
		// Kernels still queued may read the pages (and count clipped
		// values, and copy the count).
		if err := s.g.flush(); err != nil {
			return err
		}
		if err := cu.Synchronize(); err != nil {
			return err
		}
		if s.fp8 {
			if err := cu.MemsetD32(s.sat, 0, 2); err != nil {
				return err
			}
			s.satHost.store(0)
			s.satWarned = 0
		}
		if !lazy {
			return nil
		}
		s.g.pool.external(-s.vm.bytes, catKV)
		s.vm.unmapAll()
		clear(s.backed)
		// The next page table is checked (and its pages backed) even if it
		// is the one on the device now.
		s.ptHost = s.ptHost[:0]
		return nil
	})
}

// Close gives the store's device memory back; the store must not be used
// afterwards.
func (s *kvStore) Close() error {
	err := s.g.own.do(func() error {
		// Queued kernels may still use the pages.
		ferr := s.g.flush()
		s.free()
		return ferr
	})
	if errors.Is(err, errClosed) {
		return nil // the context and all its memory are gone already
	}
	return err
}

// table uploads the page list unless it is the one already on the device (owner thread).
func (s *kvStore) table(pages []int32) (cu.DevicePtr, error) {
	if len(pages) > s.spec.Pages {
		return 0, fmt.Errorf("page table of %d pages for a store of %d", len(pages), s.spec.Pages)
	}
	if !slices.Equal(pages, s.ptHost) {
		// The queued attention may still read the old table.
		if err := s.g.flush(); err != nil {
			return 0, err
		}
		// Pages are normally written, so backed, before they are attended;
		// checked once per new table, not per layer.
		for _, p := range pages {
			if err := s.back(int(p)); err != nil {
				return 0, err
			}
		}
		if s.g.cfg.AsyncPageTable {
			// the copy runs after the work queued before it, which reads
			// the old table; the int32 entries travel as their bits
			if err := s.g.toDevice(s.pt.ptr, unsafe.Slice((*float32)(unsafe.Pointer(&pages[0])), len(pages))); err != nil {
				return 0, err
			}
		} else if err := cu.MemcpyHtoD(s.pt.ptr, unsafe.Pointer(&pages[0]), int64(len(pages))*4); err != nil {
			return 0, err
		}
		s.ptHost = append(s.ptHost[:0], pages...)
	}
	return s.pt.ptr, nil
}

// WriteKV copies n rows of k and v into rows [dstRow, dstRow+n) of a page.
func (g *gpu) WriteKV(s backend.KVStore, layer, page, dstRow int, k, v backend.Tensor, srcRow, n int) {
	st := g.kv(s)
	kt, vt := g.tensor(k), g.tensor(v)
	ld := st.spec.Heads * st.spec.HeadDim
	if layer < 0 || layer >= st.spec.Layers || page < 0 || page >= st.spec.Pages || dstRow < 0 || n < 0 || dstRow+n > st.spec.PageSize ||
		srcRow < 0 || (srcRow+n)*ld > kt.numel() || kt.numel() != vt.numel() || kt.numel()%ld != 0 {
		panic(fmt.Sprintf("cuda: WriteKV layer %d page %d rows [%d,+%d) from [%d,+%d) of %v (store %v)", layer, page, dstRow, n, srcRow, n, kt.shape, st.spec))
	}
	if n == 0 {
		return
	}
	// The destination moves every frame: submitted directly, outside the
	// graph segments.
	g.run("WriteKV", func() error {
		return g.batch.direct(func() error {
			if err := st.back(page); err != nil {
				return err
			}
			if st.fp8 {
				return g.writeKVFP8(st, layer, page, dstRow, kt.ptr()+cu.DevicePtr(int64(srcRow)*int64(ld)*4), vt.ptr()+cu.DevicePtr(int64(srcRow)*int64(ld)*4), n)
			}
			elem := int64(4)
			kernel := "write_kv_f32"
			if st.bf {
				elem, kernel = 2, "write_kv_bf"
			}
			dst := cu.DevicePtr((int64(page)*int64(st.spec.PageSize) + int64(dstRow)) * int64(ld) * elem)
			src := cu.DevicePtr(int64(srcRow) * int64(ld) * 4)
			cnt := int64(n) * int64(ld)
			kd, vd, ks, vs := st.k[layer]+dst, st.v[layer]+dst, kt.ptr()+src, vt.ptr()+src
			if st.bf && fits4(cnt) && aligned(16, ks, vs) && aligned(8, kd, vd) {
				return g.launch1D("elementwise", "write_kv_bf_v4", cnt/4, kd, vd, ks, vs, int(cnt/4))
			}
			return g.launch1D("movement", kernel, cnt, st.k[layer]+dst, st.v[layer]+dst, kt.ptr()+src, vt.ptr()+src, cnt)
		})
	})
}

// writeKVFP8 quantizes n rows (fp32 at ks and vs) into rows [dstRow,
// dstRow+n) of a page, first setting the layer's scales from them if this
// is its first write (owner thread).
func (g *gpu) writeKVFP8(st *kvStore, layer, page, dstRow int, ks, vs cu.DevicePtr, n int) error {
	h := st.spec.Heads
	scales := st.layerScales(layer)
	if !st.calibrated[layer] {
		if err := g.launch("kvfp8", "kv_fp8_calibrate", [3]int{h, 2, 1}, [3]int{256, 1, 1}, 0, ks, vs, n, h, scales); err != nil {
			return err
		}
		st.calibrated[layer] = true
	}
	off := cu.DevicePtr(int64(page) * st.pageBytes())
	if err := g.launch("kvfp8", "write_kv_fp8", [3]int{(n + 63) / 64, h, 1}, [3]int{256, 1, 1}, 0,
		st.k[layer]+off, st.v[layer]+off, ks, vs, n, h, dstRow, st.rows(), scales, st.sat); err != nil {
		return err
	}
	if layer != 0 {
		return nil
	}
	st.warnSaturation()
	return st.satHost.fetch(st.sat)
}

// warnSaturation logs the saturated count copied at layer 0's previous
// write when it is the first or has doubled since the last warning: values
// more than 16 times the first frame's largest (a scene far brighter or
// nearer than the one the map began with) are clipped, and the attention
// over them is wrong (owner thread).
func (s *kvStore) warnSaturation() {
	n := s.satHost.load()
	if n == 0 || n < 2*s.satWarned {
		return
	}
	s.satWarned = n
	s.g.log.Warn("cuda: the FP8 KV cache clipped keys or values beyond ±448 times their scale, which its first frame set; "+
		"its attention is less accurate from here (precision bf16 keeps them; a reset sets new scales)", "clipped", n)
}

// layerScales is the device address of a layer's FP8 scales.
func (s *kvStore) layerScales(layer int) cu.DevicePtr {
	return s.scales.ptr + cu.DevicePtr(int64(layer)*2*int64(s.spec.Heads)*4)
}
