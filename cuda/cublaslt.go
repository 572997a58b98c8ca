//go:build cuda

package cuda

/*
#cgo LDFLAGS: -lcublasLt -lcuda
#include <stdint.h>
#include <stdlib.h>
#include <cuda.h>
#include <cublasLt.h>

// One planned GEMM: descriptors and the algorithm cuBLASLt chose, kept for
// every later call with the same shape so that steady state does no
// planning. Column-major, as cuBLASLt sees it.
typedef struct {
	cublasLtMatmulDesc_t op;
	cublasLtMatrixLayout_t a, b, c;
	cublasLtMatmulAlgo_t algo;
} lbm_plan;

static int lbm_plan_create(cublasLtHandle_t h, lbm_plan *p, int bf, int tf32, int transa, int transb,
                           uint64_t m, uint64_t n, uint64_t k, int64_t lda, int64_t ldb, int64_t ldc,
                           int bias, size_t ws, uint32_t align) {
	cudaDataType_t ab = bf ? CUDA_R_16BF : CUDA_R_32F;
	cublasStatus_t st = cublasLtMatmulDescCreate(&p->op, tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F, CUDA_R_32F);
	if (st != CUBLAS_STATUS_SUCCESS) return (int)st;
	cublasOperation_t ta = transa ? CUBLAS_OP_T : CUBLAS_OP_N, tb = transb ? CUBLAS_OP_T : CUBLAS_OP_N;
	cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta));
	cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb));
	cublasLtEpilogue_t epi = bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
	cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi));
	if (bias) {
		cudaDataType_t bt = CUDA_R_32F;
		cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof(bt));
	}
	st = cublasLtMatrixLayoutCreate(&p->a, ab, transa ? k : m, transa ? m : k, lda);
	if (st == CUBLAS_STATUS_SUCCESS) st = cublasLtMatrixLayoutCreate(&p->b, ab, transb ? n : k, transb ? k : n, ldb);
	if (st == CUBLAS_STATUS_SUCCESS) st = cublasLtMatrixLayoutCreate(&p->c, CUDA_R_32F, m, n, ldc);
	if (st != CUBLAS_STATUS_SUCCESS) return (int)st;
	cublasLtMatmulPreference_t pref;
	st = cublasLtMatmulPreferenceCreate(&pref);
	if (st != CUBLAS_STATUS_SUCCESS) return (int)st;
	cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws));
	// The operands' real alignment (images inside a batch start at any float).
	cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align, sizeof(align));
	cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align, sizeof(align));
	cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align, sizeof(align));
	cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align, sizeof(align));
	cublasLtMatmulHeuristicResult_t res;
	int got = 0;
	st = cublasLtMatmulAlgoGetHeuristic(h, p->op, p->a, p->b, p->c, p->c, pref, 1, &res, &got);
	cublasLtMatmulPreferenceDestroy(pref);
	if (st != CUBLAS_STATUS_SUCCESS) return (int)st;
	if (got == 0) return -1;
	p->algo = res.algo;
	return 0;
}

static void lbm_plan_destroy(lbm_plan *p) {
	if (p->a) cublasLtMatrixLayoutDestroy(p->a);
	if (p->b) cublasLtMatrixLayoutDestroy(p->b);
	if (p->c) cublasLtMatrixLayoutDestroy(p->c);
	if (p->op) cublasLtMatmulDescDestroy(p->op);
}

static int lbm_matmul(cublasLtHandle_t h, lbm_plan *p, uint64_t A, uint64_t B, uint64_t C, uint64_t bias,
                      uint64_t ws, size_t wsSize) {
	float alpha = 1.0f, beta = 0.0f;
	if (bias) {
		const void *bp = (const void *)(uintptr_t)bias;
		cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bp, sizeof(bp));
	}
	return (int)cublasLtMatmul(h, p->op, &alpha, (const void *)(uintptr_t)A, p->a, (const void *)(uintptr_t)B, p->b,
	                           &beta, (void *)(uintptr_t)C, p->c, (void *)(uintptr_t)C, p->c, &p->algo,
	                           (void *)(uintptr_t)ws, wsSize, 0);
}

static int lbm_mem_info(size_t *freeb, size_t *total) { return (int)cuMemGetInfo(freeb, total); }
*/
import "C"

import (
	"fmt"
	"unsafe"

	"gorgonia.org/cu"
)

const ltWorkspace = 32 << 20

// gemmKey identifies a planned GEMM (column-major terms).
type gemmKey struct {
	bf, transA, transB bool
	tf32               bool // fp32 operands on the TF32 tensor cores
	m, n, k            int
	lda, ldb, ldc      int
	bias               bool
	align              uint32 // bytes all operand pointers are aligned to
}

// cublasLt is our small binding: a handle, a workspace and the plan cache.
// Owner thread only.
type cublasLt struct {
	h     C.cublasLtHandle_t
	ws    *buffer
	pool  *pool
	plans map[gemmKey]*C.lbm_plan
}

func newCublasLt(p *pool) (*cublasLt, error) {
	lt := &cublasLt{pool: p, plans: map[gemmKey]*C.lbm_plan{}}
	if st := C.cublasLtCreate(&lt.h); st != C.CUBLAS_STATUS_SUCCESS {
		return nil, fmt.Errorf("cuBLASLt cannot start (status %d)", int(st))
	}
	ws, err := p.get(ltWorkspace)
	if err != nil {
		C.cublasLtDestroy(lt.h)
		return nil, fmt.Errorf("cuBLASLt workspace: %w", err)
	}
	lt.ws = ws
	return lt, nil
}

func (lt *cublasLt) destroy() {
	if lt == nil {
		return
	}
	for _, p := range lt.plans {
		if p == nil {
			continue
		}
		C.lbm_plan_destroy(p)
		C.free(unsafe.Pointer(p))
	}
	lt.plans = nil
	lt.pool.put(lt.ws)
	C.cublasLtDestroy(lt.h)
}

// plan returns the cached plan for key, creating it on first use; nil (and
// no error) when cuBLASLt offers no algorithm for this combination.
func (lt *cublasLt) plan(key gemmKey) (*C.lbm_plan, error) {
	if p, ok := lt.plans[key]; ok {
		return p, nil
	}
	p := (*C.lbm_plan)(C.calloc(1, C.size_t(unsafe.Sizeof(C.lbm_plan{}))))
	st := C.lbm_plan_create(lt.h, p, cbool(key.bf), cbool(key.tf32), cbool(key.transA), cbool(key.transB),
		C.uint64_t(key.m), C.uint64_t(key.n), C.uint64_t(key.k),
		C.int64_t(key.lda), C.int64_t(key.ldb), C.int64_t(key.ldc), cbool(key.bias), C.size_t(ltWorkspace), C.uint32_t(key.align))
	if st != 0 {
		C.lbm_plan_destroy(p)
		C.free(unsafe.Pointer(p))
		if st == -1 {
			lt.plans[key] = nil
			return nil, nil
		}
		return nil, fmt.Errorf("cuBLASLt cannot plan a %dx%dx%d GEMM (status %d)", key.m, key.n, key.k, int(st))
	}
	lt.plans[key] = p
	return p, nil
}

// matmul runs C = op(A)·op(B) (+ bias per row of C) in column-major terms.
func (lt *cublasLt) matmul(key gemmKey, a, b, c, bias cu.DevicePtr) (bool, error) {
	key.align = alignment(a, b, c, bias)
	p, err := lt.plan(key)
	if err != nil || p == nil {
		return false, err
	}
	st := C.lbm_matmul(lt.h, p, C.uint64_t(a), C.uint64_t(b), C.uint64_t(c), C.uint64_t(bias),
		C.uint64_t(lt.ws.ptr), C.size_t(ltWorkspace))
	if st != 0 {
		return false, fmt.Errorf("cuBLASLt matmul %dx%dx%d failed (status %d)", key.m, key.n, key.k, int(st))
	}
	return true, nil
}

// alignment is the largest power of two up to 256 dividing every non-nil pointer.
func alignment(ptrs ...cu.DevicePtr) uint32 {
	al := uint32(256)
	for _, p := range ptrs {
		for p != 0 && uint64(p)%uint64(al) != 0 {
			al /= 2
		}
	}
	return al
}

func cbool(b bool) C.int {
	if b {
		return 1
	}
	return 0
}

// memInfo is the device's free and total memory.
func memInfo() (free, total int64, err error) {
	var f, t C.size_t
	if st := C.lbm_mem_info(&f, &t); st != 0 {
		return 0, 0, fmt.Errorf("cuMemGetInfo failed (CUresult %d)", int(st))
	}
	return int64(f), int64(t), nil
}
