//go:build cuda

package cuda

/*
#cgo LDFLAGS: -lcuda
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cuda.h>

static int lbm_module_load(const char *image, CUmodule *m) { return (int)cuModuleLoadData(m, image); }
static int lbm_module_function(CUmodule m, const char *name, CUfunction *f) { return (int)cuModuleGetFunction(f, m, name); }

// params points at the arguments: the slots of one C block that the backend
// reuses for every launch (launches are serialised by the owner), or C
// memory of their own (tensor maps). pdl launches with programmatic stream
// serialization (CUDA 12 and later; every kernel in kernels/ waits for its
// predecessor with griddepcontrol.wait before it touches memory).
static int lbm_launch(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                      unsigned shared, void **params, int pdl, CUstream stream) {
#if CUDA_VERSION >= 12000
	if (pdl) {
		CUlaunchAttribute attr;
		memset(&attr, 0, sizeof attr);
		attr.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
		attr.value.programmaticStreamSerializationAllowed = 1;
		CUlaunchConfig cfg;
		memset(&cfg, 0, sizeof cfg);
		cfg.gridDimX = gx; cfg.gridDimY = gy; cfg.gridDimZ = gz;
		cfg.blockDimX = bx; cfg.blockDimY = by; cfg.blockDimZ = bz;
		cfg.sharedMemBytes = shared;
		cfg.attrs = &attr;
		cfg.numAttrs = 1;
		cfg.hStream = stream;
		return (int)cuLaunchKernelEx(&cfg, f, params, 0);
	}
#endif
	return (int)cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shared, stream, params, 0);
}

static int lbm_pdl_supported(void) { return CUDA_VERSION >= 12000; }

static int lbm_max_dynamic_smem(CUfunction f, int bytes) {
	return (int)cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, bytes);
}

static const char *lbm_error_name(int r) {
	const char *s = 0;
	if (cuGetErrorName((CUresult)r, &s) != CUDA_SUCCESS || !s) return "unknown CUDA error";
	return s;
}
*/
import "C"

import (
	"fmt"
	"math"
	"unsafe"

	"gorgonia.org/cu"
)

// maxKernelArgs bounds the parameters of any kernel in kernels/.
const maxKernelArgs = 32

// driverError turns a CUresult into an error naming it.
func driverError(r C.int) error {
	if r == 0 {
		return nil
	}
	return fmt.Errorf("%s (CUDA error %d)", C.GoString(C.lbm_error_name(r)), int(r))
}

// launcher owns the C block of kernel parameters: gorgonia's Launch mallocs
// and frees two arrays per launch, which at ~1000 launches a frame is
// measurable host time.
type launcher struct {
	slots  *C.uint64_t
	params *unsafe.Pointer
	// pdl: launch with programmatic dependent launch, so that a kernel's
	// blocks are scheduled while its predecessor drains (Hopper and later;
	// see pdl_wait in kernels/common.cuh).
	pdl bool
	// q collects launches into CUDA graph segments (nil: every launch is
	// submitted as it comes).
	q *batch
	// stream is where submissions go: nil, the default stream, or the
	// side stream while a branch is open (branch.go).
	stream C.CUstream
}

// pdlBuilt reports whether this build's driver API header has
// programmatic dependent launch (CUDA 12 and later).
func pdlBuilt() bool { return C.lbm_pdl_supported() != 0 }

func newLauncher() *launcher {
	block := C.malloc(C.size_t(maxKernelArgs * 16))
	return &launcher{slots: (*C.uint64_t)(block), params: (*unsafe.Pointer)(unsafe.Add(block, maxKernelArgs*8))}
}

func (l *launcher) free() {
	if l != nil && l.slots != nil {
		C.free(unsafe.Pointer(l.slots))
		l.slots = nil
	}
}

// kernelFunc is a loaded kernel.
type kernelFunc struct{ fn C.CUfunction }

// kernelModule is a loaded PTX module.
type kernelModule struct{ m C.CUmodule }

func loadModule(image string) (kernelModule, error) {
	cs := C.CString(image)
	defer C.free(unsafe.Pointer(cs))
	var m C.CUmodule
	if err := driverError(C.lbm_module_load(cs, &m)); err != nil {
		return kernelModule{}, err
	}
	return kernelModule{m}, nil
}

func (m kernelModule) function(name string) (kernelFunc, error) {
	cs := C.CString(name)
	defer C.free(unsafe.Pointer(cs))
	var f C.CUfunction
	if err := driverError(C.lbm_module_function(m.m, cs, &f)); err != nil {
		return kernelFunc{}, err
	}
	return kernelFunc{f}, nil
}

// allowSharedMemory lets f use more than 48 KB of dynamic shared memory.
func (f kernelFunc) allowSharedMemory(bytes int) error {
	return driverError(C.lbm_max_dynamic_smem(f.fn, C.int(bytes)))
}

// launch runs f on the launcher's stream, or queues it for the next CUDA
// graph segment (batch) when one is collecting. Every argument takes an
// 8-byte slot: pointers and int64 as they are, int as int64 (the kernel
// reads the low 4 bytes of an int parameter), float32 in the low 4 bytes,
// float64 whole; a tensor map is passed where it lies, so a launch with one
// is never queued (its C memory may be rewritten before the batch runs).
func (l *launcher) launch(f kernelFunc, name string, grid, block [3]int, shared int, args []any) error {
	if len(args) > maxKernelArgs {
		return fmt.Errorf("kernel %s: %d arguments, at most %d supported", name, len(args), maxKernelArgs)
	}
	for i := range 3 {
		if grid[i] <= 0 || grid[i] > math.MaxInt32 || block[i] <= 0 || block[i] > 1024 {
			return fmt.Errorf("kernel %s: bad launch shape grid %v block %v", name, grid, block)
		}
	}
	if l.q != nil {
		if l.q.collecting() {
			return l.q.kernel(f, name, grid, block, shared, l.pdl, args)
		}
		if err := l.q.flush(); err != nil {
			return err
		}
	}
	slots := unsafe.Slice((*uint64)(unsafe.Pointer(l.slots)), maxKernelArgs)
	if err := encodeArgs(name, slots, args); err != nil {
		return err
	}
	// Addresses of C memory, stored as integers: no write barriers.
	params := unsafe.Slice((*uintptr)(unsafe.Pointer(l.params)), maxKernelArgs)
	for i, a := range args {
		params[i] = uintptr(unsafe.Pointer(&slots[i]))
		if t, ok := a.(tensorMap); ok {
			params[i] = uintptr(t.p)
		}
	}
	return l.run(f.fn, name, grid, block, shared, l.pdl, l.stream)
}

// run launches f with the arguments l.params points at on stream (nil: the
// default stream).
func (l *launcher) run(f C.CUfunction, name string, grid, block [3]int, shared int, pdl bool, stream C.CUstream) error {
	p := C.int(0)
	if pdl {
		p = 1
	}
	r := C.lbm_launch(f, C.uint(grid[0]), C.uint(grid[1]), C.uint(grid[2]), C.uint(block[0]), C.uint(block[1]), C.uint(block[2]),
		C.uint(shared), l.params, p, stream)
	if err := driverError(r); err != nil {
		return fmt.Errorf("launching %s (grid %v, block %v): %w", name, grid, block, err)
	}
	return nil
}

// runSlots launches f with its arguments in slots (C memory, one 8-byte
// slot an argument) on stream; the arguments that maps marks are tensor
// maps whose slots hold the offset of their copy in arena (batch.kernel).
func (l *launcher) runSlots(f C.CUfunction, name string, grid, block [3]int, shared int, pdl bool, slots []uint64, maps uint32, arena []uint64, stream C.CUstream) error {
	params := unsafe.Slice((*uintptr)(unsafe.Pointer(l.params)), maxKernelArgs)
	for i := range slots {
		params[i] = uintptr(unsafe.Pointer(&slots[i]))
		if maps&(1<<i) != 0 {
			params[i] = uintptr(unsafe.Pointer(&arena[slots[i]]))
		}
	}
	return l.run(f, name, grid, block, shared, pdl, stream)
}

// encodeArgs writes each argument into its 8-byte slot (a tensor map's slot
// is left alone: it is passed by address).
func encodeArgs(name string, slots []uint64, args []any) error {
	for i, a := range args {
		switch v := a.(type) {
		case tensorMap:
		case cu.DevicePtr:
			slots[i] = uint64(v)
		case int:
			slots[i] = uint64(int64(v))
		case int64:
			slots[i] = uint64(v)
		case int32:
			slots[i] = uint64(uint32(v))
		case float32:
			slots[i] = uint64(math.Float32bits(v))
		case float64:
			slots[i] = math.Float64bits(v)
		default:
			return fmt.Errorf("kernel %s: argument %d has unsupported type %T", name, i, a)
		}
	}
	return nil
}
