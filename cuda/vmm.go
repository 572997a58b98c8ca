//go:build cuda

package cuda

/*
#include <string.h>
#include <cuda.h>

static void lbm_vmm_props(CUmemAllocationProp *p, CUdevice dev) {
	memset(p, 0, sizeof(*p));
	p->type = CU_MEM_ALLOCATION_TYPE_PINNED;
	p->location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	p->location.id = dev;
}

// Returns 0 and the granularity when the current context's device supports
// virtual memory management, -1 when it does not, a CUresult on failure.
static int lbm_vmm_granularity(size_t *gran) {
	CUdevice dev;
	int ok = 0;
	CUresult r = cuCtxGetDevice(&dev);
	if (r) return (int)r;
	r = cuDeviceGetAttribute(&ok, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, dev);
	if (r) return (int)r;
	if (!ok) return -1;
	CUmemAllocationProp p;
	lbm_vmm_props(&p, dev);
	return (int)cuMemGetAllocationGranularity(gran, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
}

static int lbm_vmm_reserve(CUdeviceptr *ptr, size_t size, size_t align) {
	return (int)cuMemAddressReserve(ptr, size, align, 0, 0);
}

// Backs [ptr, ptr+size) with new physical memory, readable and writable.
static int lbm_vmm_map(CUdeviceptr ptr, size_t size, CUmemGenericAllocationHandle *h) {
	CUdevice dev;
	CUresult r = cuCtxGetDevice(&dev);
	if (r) return (int)r;
	CUmemAllocationProp p;
	lbm_vmm_props(&p, dev);
	r = cuMemCreate(h, size, &p, 0);
	if (r) return (int)r;
	r = cuMemMap(ptr, size, 0, *h, 0);
	if (r) { cuMemRelease(*h); return (int)r; }
	CUmemAccessDesc a;
	memset(&a, 0, sizeof(a));
	a.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	a.location.id = dev;
	a.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
	r = cuMemSetAccess(ptr, size, &a, 1);
	if (r) { cuMemUnmap(ptr, size); cuMemRelease(*h); return (int)r; }
	return 0;
}

static int lbm_vmm_unmap(CUdeviceptr ptr, size_t size, CUmemGenericAllocationHandle h) {
	CUresult r = cuMemUnmap(ptr, size);
	CUresult r2 = cuMemRelease(h);
	return (int)(r ? r : r2);
}

static int lbm_vmm_free(CUdeviceptr ptr, size_t size) { return (int)cuMemAddressFree(ptr, size); }
*/
import "C"

import (
	"errors"
	"fmt"

	"gorgonia.org/cu"
)

// errNoVMM means the device lacks virtual memory management.
var errNoVMM = errors.New("the device does not support virtual memory management")

// vmSpace is a set of equally sized device address ranges ("regions": the K
// and V arrays of every layer of the KV cache) that get physical memory only
// where something is written. The KV cache is sized for every page the
// bookkeeping may hand out (headroom pages, special-token pages for
// MaxFrames), but a stream touches only scale + window + one or two patch
// pages and one special page per ~166 frames; the rest costs address space,
// not memory. Owner thread only.
type vmSpace struct {
	base    cu.DevicePtr
	size    int64 // whole reservation
	stride  int64 // bytes between regions
	regions int
	gran    int64
	mapped  []bool // per granule of a region, the same in every region
	chunks  []vmChunk
	bytes   int64 // physical bytes mapped, all regions
}

type vmChunk struct {
	ptr  cu.DevicePtr
	size int64
	h    C.CUmemGenericAllocationHandle
}

func cuErr(what string, st C.int) error {
	return fmt.Errorf("%s failed (CUresult %d)", what, int(st))
}

// newVMSpace reserves address space for `regions` regions of regionBytes.
func newVMSpace(regions int, regionBytes int64) (*vmSpace, error) {
	var g C.size_t
	switch st := C.lbm_vmm_granularity(&g); {
	case st == -1:
		return nil, errNoVMM
	case st != 0:
		return nil, cuErr("cuMemGetAllocationGranularity", st)
	}
	gran := int64(g)
	stride := (regionBytes + gran - 1) / gran * gran
	s := &vmSpace{stride: stride, regions: regions, gran: gran, size: stride * int64(regions),
		mapped: make([]bool, stride/gran)}
	var ptr C.CUdeviceptr
	if st := C.lbm_vmm_reserve(&ptr, C.size_t(s.size), C.size_t(gran)); st != 0 {
		return nil, cuErr(fmt.Sprintf("reserving %s of device address space", human(s.size)), st)
	}
	s.base = cu.DevicePtr(ptr)
	return s, nil
}

func (s *vmSpace) region(i int) cu.DevicePtr { return s.base + cu.DevicePtr(int64(i)*s.stride) }

// ensure backs bytes [off, off+n) of every region with zeroed memory and
// returns how many physical bytes it added.
func (s *vmSpace) ensure(off, n int64) (int64, error) {
	if n <= 0 {
		return 0, nil
	}
	g0, g1 := off/s.gran, (off+n+s.gran-1)/s.gran
	var added int64
	for a := g0; a < g1; {
		if s.mapped[a] {
			a++
			continue
		}
		b := a
		for b < g1 && !s.mapped[b] {
			b++
		}
		size := (b - a) * s.gran
		start := len(s.chunks)
		for r := 0; r < s.regions; r++ {
			ptr := s.region(r) + cu.DevicePtr(a*s.gran)
			var h C.CUmemGenericAllocationHandle
			if st := C.lbm_vmm_map(C.CUdeviceptr(ptr), C.size_t(size), &h); st != 0 {
				s.unmap(start)
				return added, cuErr(fmt.Sprintf("mapping %s of device memory", human(size)), st)
			}
			s.chunks = append(s.chunks, vmChunk{ptr: ptr, size: size, h: h})
			// Zero like a fresh allocation, so a stray read sees zeros.
			if err := cu.MemsetD32(ptr, 0, size/4); err != nil {
				s.unmap(start)
				return added, err
			}
		}
		for i := a; i < b; i++ {
			s.mapped[i] = true
		}
		added += size * int64(s.regions)
		s.bytes += size * int64(s.regions)
		a = b
	}
	return added, nil
}

// unmap releases the chunks from index `from` on.
func (s *vmSpace) unmap(from int) {
	for _, c := range s.chunks[from:] {
		_ = C.lbm_vmm_unmap(C.CUdeviceptr(c.ptr), C.size_t(c.size), c.h)
	}
	s.chunks = s.chunks[:from]
}

// unmapAll gives all physical memory back and keeps the address space, so
// that later writes map memory again at the same addresses.
func (s *vmSpace) unmapAll() {
	s.unmap(0)
	s.bytes = 0
	clear(s.mapped)
}

// release unmaps everything and frees the address space.
func (s *vmSpace) release() {
	if s == nil || s.base == 0 {
		return
	}
	s.unmapAll()
	_ = C.lbm_vmm_free(C.CUdeviceptr(s.base), C.size_t(s.size))
	s.base = 0
}
