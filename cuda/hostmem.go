//go:build cuda

package cuda

/*
#include <stdint.h>
#include <cuda.h>

static int lbm_host_alloc(void **p, size_t n) { return (int)cuMemHostAlloc(p, n, 0); }
static int lbm_host_free(void *p) { return (int)cuMemFreeHost(p); }
static int lbm_fetch_word(void *p, CUdeviceptr d) { return (int)cuMemcpyDtoHAsync(p, d, 8, 0); }
*/
import "C"

import (
	"fmt"
	"sync/atomic"
	"unsafe"

	"gorgonia.org/cu"
)

// Copies between Go memory and the device go through one page-locked
// staging buffer: from pageable memory the driver stages in small pieces
// itself, which made a frame's depth map slow to come back. The
// buffer grows to the largest copy up to stagingMax; larger copies (weights
// at load) go directly.
const (
	stagingMin = 4 << 20
	stagingMax = 64 << 20
)

type staging struct {
	p unsafe.Pointer
	n int64
}

// get returns at least n bytes of pinned memory, or nil when n is above
// stagingMax or the driver refuses (the caller then copies directly).
// Owner thread only.
func (s *staging) get(n int64) unsafe.Pointer {
	if n > stagingMax {
		return nil
	}
	if n <= s.n {
		return s.p
	}
	s.free()
	size := int64(stagingMin)
	for size < n {
		size *= 2
	}
	var p unsafe.Pointer
	if C.lbm_host_alloc(&p, C.size_t(size)) != 0 {
		return nil
	}
	s.p, s.n = p, size
	return p
}

func (s *staging) free() {
	if s.p != nil {
		C.lbm_host_free(s.p)
		s.p, s.n = nil, 0
	}
}

// toHost copies n floats from the device into dst. Owner thread only.
func (g *gpu) toHost(dst []float32, src cu.DevicePtr) error {
	bytes := int64(len(dst)) * 4
	if bytes == 0 {
		return nil
	}
	if err := g.flush(); err != nil {
		return err
	}
	p := g.stage.get(bytes)
	if p == nil {
		return cu.MemcpyDtoH(unsafe.Pointer(&dst[0]), src, bytes)
	}
	if err := cu.MemcpyDtoH(p, src, bytes); err != nil {
		return err
	}
	copy(dst, unsafe.Slice((*float32)(p), len(dst)))
	return nil
}

// toDevice copies src into device memory at dst. Owner thread only.
func (g *gpu) toDevice(dst cu.DevicePtr, src []float32) error {
	bytes := int64(len(src)) * 4
	if bytes == 0 {
		return nil
	}
	if err := g.flush(); err != nil {
		return err
	}
	p := g.stage.get(bytes)
	if p == nil {
		return cu.MemcpyHtoD(dst, unsafe.Pointer(&src[0]), bytes)
	}
	copy(unsafe.Slice((*float32)(p), len(src)), src)
	if err := cu.MemcpyHtoD(dst, p, bytes); err != nil {
		return fmt.Errorf("copy to the device: %w", err)
	}
	return nil
}

// hostWord is 8 bytes of page-locked memory that a device counter is
// copied into without waiting for the copy (owner thread).
type hostWord struct{ p unsafe.Pointer }

func newHostWord() (*hostWord, error) {
	var p unsafe.Pointer
	if err := driverError(C.lbm_host_alloc(&p, 8)); err != nil {
		return nil, fmt.Errorf("page-locked host word: %w", err)
	}
	w := &hostWord{p}
	w.store(0)
	return w, nil
}

// fetch queues the copy of the 8 bytes at d into the word on the default
// stream, after the work queued before it.
func (w *hostWord) fetch(d cu.DevicePtr) error {
	return driverError(C.lbm_fetch_word(w.p, C.CUdeviceptr(d)))
}

// load is the last value a finished copy left (the DMA writes it whole).
func (w *hostWord) load() uint64 { return atomic.LoadUint64((*uint64)(w.p)) }

func (w *hostWord) store(v uint64) { atomic.StoreUint64((*uint64)(w.p), v) }

func (w *hostWord) free() {
	if w != nil && w.p != nil {
		C.lbm_host_free(w.p)
		w.p = nil
	}
}
