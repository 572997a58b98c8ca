//go:build cuda

package cuda

import (
	"fmt"
	"slices"
	"unsafe"

	"gorgonia.org/cu"

	"github.com/lingbotmap/lingbotmap/engine/backend"
)

// kvStore is the paged KV cache on the device: per layer one K and one V
// array of [Pages, PageSize, Heads, HeadDim], bf16 in BF16 mode (as the
// reference's FlashInfer cache) and fp32 in FP32 mode.
type kvStore struct {
	spec backend.KVSpec
	bf   bool
	k, v []*buffer
	// The page table lives on the device; uploading is skipped when a block
	// asks for the same table as the previous one (all global blocks share it).
	pt     *buffer
	ptHost []int32
}

func (s *kvStore) Layers() int   { return s.spec.Layers }
func (s *kvStore) Pages() int    { return s.spec.Pages }
func (s *kvStore) PageSize() int { return s.spec.PageSize }

// Bytes is the device memory of the pages: 2 bytes an element in BF16 mode.
func (s *kvStore) Bytes() int64 {
	if s.bf {
		return s.spec.Bytes(2)
	}
	return s.spec.Bytes(4)
}

func (g *gpu) kv(s backend.KVStore) *kvStore {
	c, ok := s.(*kvStore)
	if !ok {
		panic(fmt.Sprintf("cuda: KV store %T is not a CUDA store", s))
	}
	return c
}

// NewKVStore allocates all pages of all layers at once, after checking that
// the device has the memory.
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
	st := &kvStore{spec: spec, bf: g.cfg.Precision == BF16}
	elem := int64(4)
	if st.bf {
		elem = 2
	}
	per := int64(spec.Pages) * int64(spec.PageSize) * int64(spec.Heads*spec.HeadDim) * elem
	err := g.own.do(func() error {
		free, total, err := memInfo()
		if err != nil {
			return err
		}
		need := spec.Bytes(int(elem))
		if need > free {
			return fmt.Errorf("the KV cache needs %s (%v, %d-byte elements) but the GPU has %s free of %s",
				human(need), spec, elem, human(free), human(total))
		}
		for l := 0; l < spec.Layers; l++ {
			for _, dst := range []*[]*buffer{&st.k, &st.v} {
				b, err := g.pool.getAs(per, catKV)
				if err != nil {
					return fmt.Errorf("the KV cache (%v) does not fit: %w", spec, err)
				}
				// Zero like the reference, so a stray read sees zeros, not garbage.
				if err := cu.MemsetD32(b.ptr, 0, b.size/4); err != nil {
					return err
				}
				*dst = append(*dst, b)
			}
		}
		st.pt, err = g.pool.getAs(int64(spec.Pages)*4, catKV)
		return err
	})
	if err != nil {
		_ = g.own.do(func() error {
			for _, b := range append(st.k, st.v...) {
				g.pool.put(b)
			}
			g.pool.trim()
			return nil
		})
		return nil, fmt.Errorf("cuda: %w", err)
	}
	return st, nil
}

// table uploads the page list unless it is the one already on the device (owner thread).
func (s *kvStore) table(pages []int32) (cu.DevicePtr, error) {
	if len(pages) > s.spec.Pages {
		return 0, fmt.Errorf("page table of %d pages for a store of %d", len(pages), s.spec.Pages)
	}
	if !slices.Equal(pages, s.ptHost) {
		if err := cu.MemcpyHtoD(s.pt.ptr, unsafe.Pointer(&pages[0]), int64(len(pages))*4); err != nil {
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
	g.run("WriteKV", func() error {
		elem := int64(4)
		kernel := "write_kv_f32"
		if st.bf {
			elem, kernel = 2, "write_kv_bf"
		}
		dst := cu.DevicePtr((int64(page)*int64(st.spec.PageSize) + int64(dstRow)) * int64(ld) * elem)
		src := cu.DevicePtr(int64(srcRow) * int64(ld) * 4)
		cnt := int64(n) * int64(ld)
		return g.launch1D("movement", kernel, cnt, st.k[layer].ptr+dst, st.v[layer].ptr+dst, kt.ptr()+src, vt.ptr()+src, cnt)
	})
}
