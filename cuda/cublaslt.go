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
#ifndef LBM_CANDIDATES // (timing other counts: CGO_CFLAGS=-DLBM_CANDIDATES=n)
#define LBM_CANDIDATES 8
#endif
typedef struct {
	cublasLtMatmulDesc_t op;
	cublasLtMatrixLayout_t a, b, c;
	cublasLtMatmulAlgo_t algo;
	cublasLtMatmulAlgo_t cand[LBM_CANDIDATES]; // the heuristic's best first
	size_t need[LBM_CANDIDATES];               // the workspace each needs
	size_t wsNeed;                             // algo's
	int ncand;
} lbm_plan;

// outbf: C and D are bf16 (and so is the bias, cuBLASLt's default for a
// bf16 D), else fp32 with an fp32 bias.
static int lbm_plan_create(cublasLtHandle_t h, lbm_plan *p, int bf, int tf32, int transa, int transb,
                           uint64_t m, uint64_t n, uint64_t k, int64_t lda, int64_t ldb, int64_t ldc,
                           int bias, int outbf, size_t ws, uint32_t align) {
	cudaDataType_t ab = bf ? CUDA_R_16BF : CUDA_R_32F;
	cublasStatus_t st = cublasLtMatmulDescCreate(&p->op, tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F, CUDA_R_32F);
	if (st != CUBLAS_STATUS_SUCCESS) return (int)st;
	cublasOperation_t ta = transa ? CUBLAS_OP_T : CUBLAS_OP_N, tb = transb ? CUBLAS_OP_T : CUBLAS_OP_N;
	cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta));
	cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb));
	cublasLtEpilogue_t epi = bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
	cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi));
	if (bias && !outbf) {
		cudaDataType_t bt = CUDA_R_32F;
		cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof(bt));
	}
	st = cublasLtMatrixLayoutCreate(&p->a, ab, transa ? k : m, transa ? m : k, lda);
	if (st == CUBLAS_STATUS_SUCCESS) st = cublasLtMatrixLayoutCreate(&p->b, ab, transb ? n : k, transb ? k : n, ldb);
	if (st == CUBLAS_STATUS_SUCCESS) st = cublasLtMatrixLayoutCreate(&p->c, outbf ? CUDA_R_16BF : CUDA_R_32F, m, n, ldc);
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
	cublasLtMatmulHeuristicResult_t res[LBM_CANDIDATES];
	int got = 0;
	st = cublasLtMatmulAlgoGetHeuristic(h, p->op, p->a, p->b, p->c, p->c, pref, LBM_CANDIDATES, res, &got);
	cublasLtMatmulPreferenceDestroy(pref);
	if (st != CUBLAS_STATUS_SUCCESS) return (int)st;
	p->ncand = 0;
	for (int i = 0; i < got; i++) {
		if (res[i].state == CUBLAS_STATUS_SUCCESS) {
			p->need[p->ncand] = res[i].workspaceSize;
			p->cand[p->ncand++] = res[i].algo;
		}
	}
	if (p->ncand == 0) return -1;
	p->algo = p->cand[0];
	p->wsNeed = p->need[0];
	return 0;
}

static void lbm_plan_pick(lbm_plan *p, int i) { p->algo = p->cand[i]; p->wsNeed = p->need[i]; }
static int lbm_lt_stream_sync(CUstream s) { return (int)cuStreamSynchronize(s); }

static void lbm_plan_destroy(lbm_plan *p) {
	if (p->a) cublasLtMatrixLayoutDestroy(p->a);
	if (p->b) cublasLtMatrixLayoutDestroy(p->b);
	if (p->c) cublasLtMatrixLayoutDestroy(p->c);
	if (p->op) cublasLtMatmulDescDestroy(p->op);
}

// D = A·B (+ bias) when C is 0; D = A·B + C (+ bias) otherwise, with C a
// separate matrix of D's layout (beta = 1, out of place).
static int lbm_matmul(cublasLtHandle_t h, lbm_plan *p, uint64_t A, uint64_t B, uint64_t C, uint64_t D, uint64_t bias,
                      uint64_t ws, size_t wsSize, CUstream stream) {
	float alpha = 1.0f, beta = C ? 1.0f : 0.0f;
	if (!C) C = D;
	if (bias) {
		const void *bp = (const void *)(uintptr_t)bias;
		cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bp, sizeof(bp));
	}
	return (int)cublasLtMatmul(h, p->op, &alpha, (const void *)(uintptr_t)A, p->a, (const void *)(uintptr_t)B, p->b,
	                           &beta, (const void *)(uintptr_t)C, p->c, (void *)(uintptr_t)D, p->c, &p->algo,
	                           (void *)(uintptr_t)ws, wsSize, (cudaStream_t)stream);
}

static int lbm_mem_info(size_t *freeb, size_t *total) { return (int)cuMemGetInfo(freeb, total); }
*/
import "C"

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
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
	// accumulate: D = A·B + C with C a separate input (beta = 1). Its own
	// plans and tuning: reading C changes which algorithm is fastest.
	accumulate bool
	// outBF: C, D and the bias are bf16 (the MLP's hidden layer with
	// cuda.fc1_bf16); otherwise fp32.
	outBF bool
	align uint32 // bytes all operand pointers are aligned to
}

// cublasLt is our small binding: a handle, a workspace and the plan cache.
// Owner thread only.
type cublasLt struct {
	h  C.cublasLtHandle_t
	ws *buffer
	// wsSide is the side stream's workspace (branch.go): matmuls on the
	// two streams may run at once.
	wsSide   *buffer
	pool     *pool
	plans    map[gemmKey]*C.lbm_plan
	autotune bool        // time the heuristic's candidates per new shape
	tuned    []tunedGemm // what tuning chose, for the log
	// q queues known plans' matmuls into graph segments (nil: none).
	q *batch
}

// tunedGemm is one shape's tuning result: candidate pick of `of`, ms a call.
type tunedGemm struct {
	key      gemmKey
	pick, of int
	ms       float64
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

// stream is where matmuls go now (launcher.stream), and workspace the
// workspace that goes with it and p's algorithm: on the side stream just
// what the algorithm needs (often nothing), in a buffer that grows to the
// most a side matmul has needed, so that the side stream costs no second
// workspace of ltWorkspace bytes.
func (lt *cublasLt) stream() C.CUstream { return lt.q.stream() }

func (lt *cublasLt) workspace(p *C.lbm_plan) (cu.DevicePtr, int64, error) {
	if lt.stream() == nil {
		return lt.ws.ptr, ltWorkspace, nil
	}
	need := int64(p.wsNeed)
	if need == 0 {
		return 0, 0, nil
	}
	if lt.wsSide == nil || lt.wsSide.size < need {
		ws, err := lt.pool.getAs(need, catOther)
		if err != nil {
			return 0, 0, fmt.Errorf("cuBLASLt workspace of the side stream: %w", err)
		}
		lt.pool.put(lt.wsSide) // held while a branch may still use it
		lt.wsSide = ws
	}
	return lt.wsSide.ptr, need, nil
}

func (lt *cublasLt) destroy() {
	if lt == nil {
		return
	}
	lt.forget()
	lt.plans = nil
	lt.pool.put(lt.ws)
	lt.pool.put(lt.wsSide)
	C.cublasLtDestroy(lt.h)
}

// forget drops every plan, so the next call of each shape plans (and
// tunes) again.
func (lt *cublasLt) forget() {
	for _, p := range lt.plans {
		if p == nil {
			continue
		}
		C.lbm_plan_destroy(p)
		C.free(unsafe.Pointer(p))
	}
	clear(lt.plans)
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
		C.int64_t(key.lda), C.int64_t(key.ldb), C.int64_t(key.ldc), cbool(key.bias), cbool(key.outBF), C.size_t(ltWorkspace), C.uint32_t(key.align))
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

// matmul runs D = op(A)·op(B) (+ c, a matrix of D's layout, when c is not
// 0) (+ bias per row of D) in column-major terms; false when no algorithm
// fits. A new shape's candidate algorithms are timed on its first call.
func (lt *cublasLt) matmul(key gemmKey, a, b, c, d, bias cu.DevicePtr) (bool, error) {
	key.accumulate = c != 0
	if c != 0 && c == d {
		// In place, every run (tuning runs each candidate six times) would
		// add c again.
		return false, fmt.Errorf("cuBLASLt accumulating GEMM %dx%dx%d with C = D", key.m, key.n, key.k)
	}
	key.align = alignment(a, b, c, d, bias)
	_, known := lt.plans[key]
	p, err := lt.plan(key)
	if err != nil || p == nil {
		return false, err
	}
	if known && lt.q.collecting() {
		return true, lt.q.gemm(p, key, a, b, c, d, bias)
	}
	// A new shape is tuned and first run at once, on the default stream:
	// tuning times it there, and a plan that cannot run must be known now
	// so that the caller can fall back.
	if err := lt.q.flush(); err != nil {
		return false, err
	}
	if !known && lt.autotune && p.ncand > 1 {
		if s := lt.stream(); s != nil {
			// Tuning times the candidates on the default stream, writing
			// d: on the side stream d may be memory the branch freed and
			// its queued kernels still read.
			if err := driverError(C.lbm_lt_stream_sync(s)); err != nil {
				return false, err
			}
		}
		if err := lt.tune(key, p, a, b, c, d, bias); err != nil {
			return false, err
		}
	}
	ws, wsSize, err := lt.workspace(p)
	if err != nil {
		return false, err
	}
	if err := lt.run(key, p, a, b, c, d, bias, ws, wsSize, lt.stream()); err != nil {
		var le *ltError
		if !known && errors.As(err, &le) && le.status == C.CUBLAS_STATUS_NOT_SUPPORTED {
			// The heuristic offered what cannot run (e.g. the bias epilogue
			// with beta = 1): as if it had offered nothing, so the caller
			// falls back; the nil plan keeps later calls from trying again.
			C.lbm_plan_destroy(p)
			C.free(unsafe.Pointer(p))
			lt.plans[key] = nil
			return false, nil
		}
		return false, err
	}
	return true, nil
}

// gemm queues a planned matmul; the plan's algorithm and the workspace are
// part of the segment's identity.
func (b *batch) gemm(plan *C.lbm_plan, key gemmKey, a, bm, c, d, bias cu.DevicePtr) error {
	b.mark()
	b.key = append(b.key, unsafe.Slice((*byte)(unsafe.Pointer(&plan.algo)), unsafe.Sizeof(plan.algo))...)
	ws, wsSize, err := b.lt.workspace(plan)
	if err != nil {
		return err
	}
	return b.add(queued{kind: qGEMM, name: "gemm", plan: unsafe.Pointer(plan), gk: key, a: a, b: bm, c: c, d: d, bias: bias, ws: ws, bytes: wsSize},
		uint64(uintptr(unsafe.Pointer(plan))), uint64(a), uint64(bm), uint64(c), uint64(d), uint64(bias), uint64(ws), uint64(wsSize))
}

// runQueued runs a queued matmul on stream.
func (lt *cublasLt) runQueued(q *queued, stream C.CUstream) error {
	return lt.run(q.gk, (*C.lbm_plan)(q.plan), q.a, q.b, q.c, q.d, q.bias, q.ws, q.bytes, stream)
}

// ltError is a failed cublasLtMatmul.
type ltError struct {
	key    gemmKey
	status C.int
}

func (e *ltError) Error() string {
	return fmt.Sprintf("cuBLASLt matmul %dx%dx%d failed (status %d)", e.key.m, e.key.n, e.key.k, int(e.status))
}

// run is one matmul. D depends on A, B, C and bias only, never on D's old
// values (beta is 0 unless accumulating, and matmul refuses C = D then), so
// repeating it, as tuning does, leaves the same D.
func (lt *cublasLt) run(key gemmKey, p *C.lbm_plan, a, b, c, d, bias, ws cu.DevicePtr, wsSize int64, stream C.CUstream) error {
	st := C.lbm_matmul(lt.h, p, C.uint64_t(a), C.uint64_t(b), C.uint64_t(c), C.uint64_t(d), C.uint64_t(bias),
		C.uint64_t(ws), C.size_t(wsSize), stream)
	if st != 0 {
		return &ltError{key: key, status: st}
	}
	return nil
}

// tune times every candidate the heuristic offered on the call's own
// operands and keeps the fastest. The heuristic's first choice is tuned for
// large problems; for one frame's ~1000 rows a smaller tile or a split-K
// algorithm that fills all multiprocessors is often faster. Runs once per
// shape, so a stream pays it in its first frames only.
func (lt *cublasLt) tune(key gemmKey, p *C.lbm_plan, a, b, c, d, bias cu.DevicePtr) error {
	const reps = 5
	start, err := cu.MakeEvent(cu.DefaultEvent)
	if err != nil {
		return err
	}
	defer cu.DestroyEvent(&start)
	end, err := cu.MakeEvent(cu.DefaultEvent)
	if err != nil {
		return err
	}
	defer cu.DestroyEvent(&end)
	best, bestMS := 0, math.Inf(1)
	for i := 0; i < int(p.ncand); i++ {
		C.lbm_plan_pick(p, C.int(i))
		if err := lt.run(key, p, a, b, c, d, bias, lt.ws.ptr, ltWorkspace, nil); err != nil {
			continue // a candidate that cannot run this call is not chosen
		}
		if err := start.Record(cu.Stream{}); err != nil {
			return err
		}
		for r := 0; r < reps; r++ {
			if err := lt.run(key, p, a, b, c, d, bias, lt.ws.ptr, ltWorkspace, nil); err != nil {
				return err
			}
		}
		if err := end.Record(cu.Stream{}); err != nil {
			return err
		}
		if err := end.Synchronize(); err != nil {
			return err
		}
		ms, err := start.Elapsed(end)
		if err != nil {
			return err
		}
		if float64(ms) < bestMS {
			best, bestMS = i, float64(ms)
		}
	}
	C.lbm_plan_pick(p, C.int(best))
	lt.tuned = append(lt.tuned, tunedGemm{key: key, pick: best, of: int(p.ncand), ms: bestMS / reps})
	return nil
}

// report logs what tuning chose: a summary, and with each shape when asked.
func (lt *cublasLt) report(log *slog.Logger, each bool) {
	if lt == nil || len(lt.tuned) == 0 {
		return
	}
	changed := 0
	for _, t := range lt.tuned {
		if t.pick != 0 {
			changed++
		}
		if each {
			log.Info("cuda gemm tuned", "m", t.key.m, "n", t.key.n, "k", t.key.k, "bf16", t.key.bf, "tf32", t.key.tf32, "accumulate", t.key.accumulate,
				"candidate", t.pick, "of", t.of, "us", fmt.Sprintf("%.1f", t.ms*1e3))
		}
	}
	log.Info("cuda gemm tuning", "shapes", len(lt.tuned), "not_the_heuristic_first", changed)
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
