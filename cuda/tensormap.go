//go:build cuda

package cuda

/*
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cuda.h>

// Encodes the tensor map of a [d2][d1][d0] bf16 array (d0 contiguous) read in
// b0 × b1 × 1 boxes through the 128-byte swizzle, zeros outside the array,
// into out (128 bytes). Older headers lack the call; the driver then says
// it is not supported.
static int lbm_tensor_map_bf16_3d(void *out, CUdeviceptr base, uint64_t d0, uint64_t d1, uint64_t d2, uint32_t b0, uint32_t b1) {
#if CUDA_VERSION >= 12000
	CUtensorMap m;
	cuuint64_t dims[3] = {d0, d1, d2};
	cuuint64_t strides[2] = {d0 * 2, d0 * d1 * 2};
	cuuint32_t box[3] = {b0, b1, 1}, es[3] = {1, 1, 1};
	CUresult r = cuTensorMapEncodeTiled(&m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, (void *)base, dims, strides, box, es,
		CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
		CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
	if (r == CUDA_SUCCESS) memcpy(out, &m, sizeof m);
	return (int)r;
#else
	return (int)CUDA_ERROR_NOT_SUPPORTED;
#endif
}

// The same for a byte array (e4m3) with explicit byte strides s1 (between
// rows) and s2 (between pages), through the 64-byte (swizzle64) or the
// 128-byte swizzle.
static int lbm_tensor_map_u8_3d(void *out, CUdeviceptr base, uint64_t d0, uint64_t d1, uint64_t d2, uint64_t s1, uint64_t s2,
	uint32_t b0, uint32_t b1, int swizzle64) {
#if CUDA_VERSION >= 12000
	CUtensorMap m;
	cuuint64_t dims[3] = {d0, d1, d2};
	cuuint64_t strides[2] = {s1, s2};
	cuuint32_t box[3] = {b0, b1, 1}, es[3] = {1, 1, 1};
	CUresult r = cuTensorMapEncodeTiled(&m, CU_TENSOR_MAP_DATA_TYPE_UINT8, 3, (void *)base, dims, strides, box, es,
		CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle64 ? CU_TENSOR_MAP_SWIZZLE_64B : CU_TENSOR_MAP_SWIZZLE_128B,
		CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
	if (r == CUDA_SUCCESS) memcpy(out, &m, sizeof m);
	return (int)r;
#else
	return (int)CUDA_ERROR_NOT_SUPPORTED;
#endif
}
*/
import "C"

import (
	"fmt"
	"unsafe"

	"gorgonia.org/cu"
)

// tensorMapBytes is sizeof(CUtensorMap).
const tensorMapBytes = 128

// tensorMap is a kernel argument passed by reference: a CUtensorMap in C
// memory (the launcher's parameter block is C memory and may not point into
// Go's).
type tensorMap struct{ p unsafe.Pointer }

// tensorMaps is a block of n tensor maps in C memory, 64-byte aligned as
// the driver wants them.
type tensorMaps struct {
	p unsafe.Pointer
	n int
}

func newTensorMaps(n int) (*tensorMaps, error) {
	p := C.aligned_alloc(64, C.size_t(n*tensorMapBytes))
	if p == nil {
		return nil, fmt.Errorf("no host memory for %d tensor maps", n)
	}
	return &tensorMaps{p: p, n: n}, nil
}

func (m *tensorMaps) at(i int) tensorMap {
	if i < 0 || i >= m.n {
		panic(fmt.Sprintf("cuda: tensor map %d of %d", i, m.n))
	}
	return tensorMap{unsafe.Add(m.p, i*tensorMapBytes)}
}

func (m *tensorMaps) free() {
	if m != nil && m.p != nil {
		C.free(m.p)
		m.p = nil
	}
}

// encodeBF16Pages writes map i for the bf16 array at base of `pages` pages
// × rows × cols, read in boxes of boxCols × boxRows of one page.
func (m *tensorMaps) encodeBF16Pages(i int, base cu.DevicePtr, cols, rows, pages, boxCols, boxRows int) error {
	r := C.lbm_tensor_map_bf16_3d(m.at(i).p, C.CUdeviceptr(base), C.uint64_t(cols), C.uint64_t(rows), C.uint64_t(pages),
		C.uint32_t(boxCols), C.uint32_t(boxRows))
	if err := driverError(r); err != nil {
		return fmt.Errorf("encoding the tensor map of a %d×%d×%d bf16 array: %w", pages, rows, cols, err)
	}
	return nil
}

// encodeFP8KPages writes map i for an FP8 K array: `pages` pages of
// rowsPad rows × cols bytes, of which the first rows are the page's, read
// in boxes of boxCols × boxRows through the 64-byte swizzle.
func (m *tensorMaps) encodeFP8KPages(i int, base cu.DevicePtr, cols, rows, rowsPad, pages, boxCols, boxRows int) error {
	r := C.lbm_tensor_map_u8_3d(m.at(i).p, C.CUdeviceptr(base), C.uint64_t(cols), C.uint64_t(rows), C.uint64_t(pages),
		C.uint64_t(cols), C.uint64_t(rowsPad*cols), C.uint32_t(boxCols), C.uint32_t(boxRows), 1)
	if err := driverError(r); err != nil {
		return fmt.Errorf("encoding the tensor map of a %d×%d×%d e4m3 K array: %w", pages, rows, cols, err)
	}
	return nil
}

// encodeFP8VtPages writes map i for an FP8 transposed V array: `pages`
// pages of cols rows × rowsPad keys, read in boxes of boxKeys × boxRows
// through the 128-byte swizzle.
func (m *tensorMaps) encodeFP8VtPages(i int, base cu.DevicePtr, cols, rowsPad, pages, boxKeys, boxRows int) error {
	r := C.lbm_tensor_map_u8_3d(m.at(i).p, C.CUdeviceptr(base), C.uint64_t(rowsPad), C.uint64_t(cols), C.uint64_t(pages),
		C.uint64_t(rowsPad), C.uint64_t(rowsPad*cols), C.uint32_t(boxKeys), C.uint32_t(boxRows), 0)
	if err := driverError(r); err != nil {
		return fmt.Errorf("encoding the tensor map of a %d×%d×%d e4m3 Vᵀ array: %w", pages, cols, rowsPad, err)
	}
	return nil
}
