//go:build cuda

package cuda

/*
#include <stdint.h>
#include <cuda.h>

static int lbm_host_alloc(void **p, size_t n) { return (int)cuMemHostAlloc(p, n, 0); }
static int lbm_host_free(void *p) { return (int)cuMemFreeHost(p); }
static int lbm_fetch_word(void *p, CUdeviceptr d) { return (int)cuMemcpyDtoHAsync(p, d, 8, 0); }
static int lbm_dtoh_async(void *p, CUdeviceptr d, size_t n) { return (int)cuMemcpyDtoHAsync(p, d, n, 0); }
static int lbm_htod_async(CUdeviceptr d, void *p, size_t n) { return (int)cuMemcpyHtoDAsync(d, p, n, 0); }
static int lbm_stream_sync(void) { return (int)cuStreamSynchronize(0); }
static int lbm_stream_idle(void) { return cuStreamQuery(0) == CUDA_SUCCESS; }
static int lbm_event_new(CUevent *e) { return (int)cuEventCreate(e, CU_EVENT_DISABLE_TIMING); }
static int lbm_event_record(CUevent e) { return (int)cuEventRecord(e, 0); }
static int lbm_event_wait(CUevent e) { return (int)cuEventSynchronize(e); }
static void lbm_event_free(CUevent e) { cuEventDestroy(e); }
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

// pinned is page-locked host memory that grows in powers of two: the
// staging buffer and the upload and download rings' slots.
type pinned struct {
	p unsafe.Pointer
	n int64
}

// reserve makes the buffer at least need bytes (least, doubled as often as
// needed) and returns it, or nil when the driver refuses page-locked
// memory. The old contents are not kept.
func (b *pinned) reserve(need, least int64) unsafe.Pointer {
	if need <= b.n {
		return b.p
	}
	b.free()
	size := least
	for size < need {
		size *= 2
	}
	var p unsafe.Pointer
	if C.lbm_host_alloc(&p, C.size_t(size)) != 0 {
		return nil
	}
	b.p, b.n = p, size
	return p
}

func (b *pinned) free() {
	if b.p != nil {
		C.lbm_host_free(b.p)
		b.p, b.n = nil, 0
	}
}

type staging struct{ pinned }

// get returns at least n bytes of pinned memory, or nil when n is above
// stagingMax or the driver refuses (the caller then copies directly).
// Owner thread only.
func (s *staging) get(n int64) unsafe.Pointer {
	if n > stagingMax {
		return nil
	}
	return s.reserve(n, stagingMin)
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
	defer g.batch.restart()
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

// toHostMany copies each of srcs (n[i] floats at srcs[i]; 0 for none)
// into a new slice with one wait for the device. The copies are queued
// first; the host then allocates the slices and touches their pages while
// the device finishes the work before them, so that the page faults of
// fresh Go memory are not added to the time the device waits for the next
// frame. Owner thread only.
func (g *gpu) toHostMany(srcs []cu.DevicePtr, n []int) ([][]float32, error) {
	outs := make([][]float32, len(srcs))
	if err := g.flush(); err != nil {
		return outs, err
	}
	offs := make([]int64, len(srcs))
	var total int64
	for i := range srcs {
		offs[i] = total
		total += (int64(n[i])*4 + 255) &^ 255
	}
	p := g.stage.get(total)
	if p == nil {
		for i := range srcs {
			outs[i] = make([]float32, n[i])
			if n[i] > 0 && srcs[i] != 0 {
				if err := g.toHost(outs[i], srcs[i]); err != nil {
					return outs, err
				}
			}
		}
		return outs, nil
	}
	for i := range srcs {
		if n[i] > 0 && srcs[i] != 0 {
			if err := driverError(C.lbm_dtoh_async(unsafe.Add(p, offs[i]), C.CUdeviceptr(srcs[i]), C.size_t(n[i]*4))); err != nil {
				return outs, fmt.Errorf("copy to the host: %w", err)
			}
		}
	}
	for i := range srcs {
		outs[i] = make([]float32, n[i])
		touchPages(outs[i])
	}
	err := driverError(C.lbm_stream_sync())
	g.batch.restart()
	if err != nil {
		return outs, err
	}
	for i := range srcs {
		if n[i] > 0 && srcs[i] != 0 {
			copy(outs[i], unsafe.Slice((*float32)(unsafe.Add(p, offs[i])), n[i]))
		}
	}
	return outs, nil
}

// touchPages writes one value a 4 KiB page, so that the kernel maps the
// pages of a fresh slice now.
func touchPages(s []float32) {
	for i := 0; i < len(s); i += 1024 {
		s[i] = 0
	}
}

// toDevice copies src into device memory at dst. Owner thread only. Copies
// up to upMax bytes are queued without waiting: src goes into a slot of
// the upload ring first, so the caller may reuse it at once.
func (g *gpu) toDevice(dst cu.DevicePtr, src []float32) error {
	bytes := int64(len(src)) * 4
	if bytes == 0 {
		return nil
	}
	if err := g.flush(); err != nil {
		return err
	}
	if bytes <= upMax {
		p, err := g.up.take(bytes)
		if err != nil {
			return err
		}
		if p != nil {
			copy(unsafe.Slice((*float32)(p), len(src)), src)
			return g.up.send(dst, bytes)
		}
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

// The upload ring: page-locked slots that host-to-device copies are queued
// from on the default stream, each with an event recorded after its copy.
// A slot is written again only once its event has passed, so a frame's
// uploads (the image, the RoPE tables) never wait for the kernels queued
// before them, and the host queues the kernels after them at once.
const (
	upSlots = 4
	upMin   = 1 << 20
	upMax   = 16 << 20
)

type upRing struct {
	slot [upSlots]upSlot
	next int
}

type upSlot struct {
	pinned
	ev   C.CUevent
	busy bool // a copy from it was queued after the last wait
}

// take returns the next slot's memory (at least n bytes) once the copy
// last queued from it has finished, or nil if no page-locked memory can be
// had (the caller copies synchronously). Owner thread only.
func (r *upRing) take(n int64) (unsafe.Pointer, error) {
	s := &r.slot[r.next]
	if s.ev == nil {
		if err := driverError(C.lbm_event_new(&s.ev)); err != nil {
			return nil, fmt.Errorf("upload event: %w", err)
		}
	}
	if s.busy {
		if err := driverError(C.lbm_event_wait(s.ev)); err != nil {
			return nil, err
		}
		s.busy = false
	}
	return s.reserve(n, upMin), nil
}

// send queues the copy of the slot take returned to dst and moves on.
func (r *upRing) send(dst cu.DevicePtr, n int64) error {
	s := &r.slot[r.next]
	if err := driverError(C.lbm_htod_async(C.CUdeviceptr(dst), s.p, C.size_t(n))); err != nil {
		return fmt.Errorf("copy to the device: %w", err)
	}
	if err := driverError(C.lbm_event_record(s.ev)); err != nil {
		return err
	}
	s.busy = true
	r.next = (r.next + 1) % upSlots
	return nil
}

// free releases the slots; the device must be idle (Close synchronises).
func (r *upRing) free() {
	for i := range r.slot {
		s := &r.slot[i]
		s.free()
		if s.ev != nil {
			C.lbm_event_free(s.ev)
		}
		*s = upSlot{}
	}
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

// The download slots: page-locked areas that a batch of copies to the
// host is queued into without waiting (backend.AsyncDownloader), each with
// an event recorded after its copies. A slot stays in use until its batch
// has been waited for and copied out, so the next frame's batch, queued
// before that, takes another; with none free, a batch is copied at Wait.
const downSlots = 3

type downRing struct {
	slot [downSlots]downSlot
}

type downSlot struct {
	pinned
	ev    C.CUevent
	inUse bool // its batch was queued and not yet copied out
}

// take returns a free slot of at least n bytes, or nil when none is free
// or no page-locked memory can be had. Owner thread only.
func (r *downRing) take(n int64) (*downSlot, error) {
	if n > stagingMax {
		return nil, nil
	}
	for i := range r.slot {
		s := &r.slot[i]
		if s.inUse {
			continue
		}
		if s.ev == nil {
			if err := driverError(C.lbm_event_new(&s.ev)); err != nil {
				return nil, fmt.Errorf("download event: %w", err)
			}
		}
		if s.reserve(n, stagingMin) == nil {
			return nil, nil
		}
		s.inUse = true
		return s, nil
	}
	return nil, nil
}

// free releases the slots; the device must be idle (Close synchronises).
func (r *downRing) free() {
	for i := range r.slot {
		s := &r.slot[i]
		s.free()
		if s.ev != nil {
			C.lbm_event_free(s.ev)
		}
		*s = downSlot{}
	}
}

// startDownload queues the copies of srcs (n[i] floats at srcs[i]; 0 for
// none) into a download slot after the work queued so far and records the
// slot's event; nil means no slot (the caller copies at the wait). Owner
// thread only.
func (g *gpu) startDownload(srcs []cu.DevicePtr, n []int) (*downSlot, []int64, error) {
	offs := make([]int64, len(srcs))
	var total int64
	for i := range srcs {
		offs[i] = total
		total += (int64(n[i])*4 + 255) &^ 255
	}
	s, err := g.down.take(max(total, 1))
	if s == nil || err != nil {
		return nil, nil, err
	}
	if err := g.flush(); err != nil {
		s.inUse = false
		return nil, nil, err
	}
	for i := range srcs {
		if n[i] > 0 && srcs[i] != 0 {
			if err := driverError(C.lbm_dtoh_async(unsafe.Add(s.p, offs[i]), C.CUdeviceptr(srcs[i]), C.size_t(n[i]*4))); err != nil {
				s.inUse = false
				return nil, nil, fmt.Errorf("copy to the host: %w", err)
			}
		}
	}
	if err := driverError(C.lbm_event_record(s.ev)); err != nil {
		s.inUse = false
		return nil, nil, err
	}
	return s, offs, nil
}

// waitDownload submits what was queued after s's copies (the next frame's
// last segment), so that the device has it while the host waits, then
// waits for s's event alone and copies the batch out into new slices,
// whose pages are touched before the wait. The slot is free again after.
// Owner thread only.
func (g *gpu) waitDownload(s *downSlot, offs []int64, srcs []cu.DevicePtr, n []int) ([][]float32, error) {
	defer func() { s.inUse = false }()
	outs := make([][]float32, len(srcs))
	if err := g.flush(); err != nil {
		return outs, err
	}
	for i := range srcs {
		outs[i] = make([]float32, n[i])
		touchPages(outs[i])
	}
	if err := driverError(C.lbm_event_wait(s.ev)); err != nil {
		return outs, err
	}
	if C.lbm_stream_idle() != 0 {
		// nothing was queued behind the copies: the device idles until
		// the next submission, so the next segments start short
		g.batch.restart()
	}
	for i := range srcs {
		if n[i] > 0 && srcs[i] != 0 {
			copy(outs[i], unsafe.Slice((*float32)(unsafe.Add(s.p, offs[i])), n[i]))
		}
	}
	return outs, nil
}
