// Products of a few fp32 rows with a bf16 matrix, y = x·wᵀ + b (+ r), x
// [rows, k], w [m, k]: the camera head's linears, one token a frame, when its
// matrices are kept in bf16 (cuda.camera_head_bf16). Reading the matrix is
// the whole cost, so each warp streams one output's weight row in 16-byte
// vectors (8 bf16 a lane a step) and everything else stays fp32: the
// activations, the sums, the bias, the residual and the GELU.
//
// w is a parameter: nothing on the device writes it after its upload, so a
// kernel starts reading it before it waits for its predecessor (pdl_wait).

#define GEMV_WARPS 8 // outputs a block, one a warp
#define GEMV_DEPTH 4 // weight vectors a lane has in flight

__device__ __forceinline__ uint4 gemv_load_w(const uint4* p) {
    uint4 v;
    // Streamed once a call: no room taken in L1, which holds x.
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
}

__device__ __forceinline__ void gemv_prefetch_l2(const void* p) { asm volatile("prefetch.global.L2 [%0];\n" ::"l"(p)); }

// acc plus the dot product of the 8 bf16 weights in w with x[0..8).
__device__ __forceinline__ float gemv_dot8(uint4 w, const float* x, float acc) {
    const float4 a = __ldg(reinterpret_cast<const float4*>(x));
    const float4 b = __ldg(reinterpret_cast<const float4*>(x) + 1);
    acc = fmaf(__uint_as_float(w.x << 16), a.x, acc);
    acc = fmaf(__uint_as_float(w.x & 0xffff0000u), a.y, acc);
    acc = fmaf(__uint_as_float(w.y << 16), a.z, acc);
    acc = fmaf(__uint_as_float(w.y & 0xffff0000u), a.w, acc);
    acc = fmaf(__uint_as_float(w.z << 16), b.x, acc);
    acc = fmaf(__uint_as_float(w.z & 0xffff0000u), b.y, acc);
    acc = fmaf(__uint_as_float(w.w << 16), b.z, acc);
    acc = fmaf(__uint_as_float(w.w & 0xffff0000u), b.w, acc);
    return acc;
}

// One warp an output o, rows r0 .. r0+R-1 of x (block row blockIdx.y). k is
// a multiple of 8 and x 16-byte aligned (the caller checks both). bias and
// res may be null; gelu applies the exact GELU after the bias (never with
// res: a residual branch ends in a plain projection).
template <int R>
__device__ __forceinline__ void gemv_bf16_rows(float* __restrict__ y, const float* __restrict__ x, const uint4* __restrict__ w,
                                               const float* __restrict__ bias, const float* __restrict__ res, int rows, int k,
                                               int m, int gelu) {
    const int lane = threadIdx.x & 31;
    const int o = blockIdx.x * GEMV_WARPS + (threadIdx.x >> 5);
    const int r0 = blockIdx.y * R;
    const int nv = k >> 3;
    const bool live = o < m;
    const uint4* wr = w + (i64)(live ? o : 0) * nv;
    uint4 wv[GEMV_DEPTH];
    if (live) {
#pragma unroll
        for (int d = 0; d < GEMV_DEPTH; d++) {
            const int v = lane + d * 32;
            if (v < nv) wv[d] = gemv_load_w(wr + v);
        }
        for (int v = lane + GEMV_DEPTH * 32; v < nv; v += 32) gemv_prefetch_l2(wr + v);
    }
    pdl_wait();
    if (!live) return;
    const int nr = min(R, rows - r0);
    float acc[R];
#pragma unroll
    for (int r = 0; r < R; r++) acc[r] = 0.0f;
    for (int base = 0; base < nv; base += GEMV_DEPTH * 32) {
        if (base > 0) {
#pragma unroll
            for (int d = 0; d < GEMV_DEPTH; d++) {
                const int v = base + lane + d * 32;
                if (v < nv) wv[d] = gemv_load_w(wr + v);
            }
        }
#pragma unroll
        for (int d = 0; d < GEMV_DEPTH; d++) {
            const int v = base + lane + d * 32;
            if (v < nv) {
#pragma unroll
                for (int r = 0; r < R; r++) {
                    if (r < nr) acc[r] = gemv_dot8(wv[d], x + (i64)(r0 + r) * k + (i64)v * 8, acc[r]);
                }
            }
        }
    }
    const float b = bias ? bias[o] : 0.0f;
#pragma unroll
    for (int r = 0; r < R; r++) {
        const float s = warp_sum(acc[r]);
        if (lane == 0 && r < nr) {
            const i64 i = (i64)(r0 + r) * m + o;
            float v = s + b;
            if (res) v = res[i] + v;
            if (gelu) v = 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
            y[i] = v;
        }
    }
}

// The host picks the smallest R that holds the rows (one token a frame: R =
// 1), or R = 8 with a block row per 8 rows.
extern "C" __global__ void __launch_bounds__(GEMV_WARPS * 32)
    gemv_bf16_r1(float* y, const float* x, const uint4* w, const float* bias, const float* res, int rows, int k, int m, int gelu) {
    gemv_bf16_rows<1>(y, x, w, bias, res, rows, k, m, gelu);
}

extern "C" __global__ void __launch_bounds__(GEMV_WARPS * 32)
    gemv_bf16_r2(float* y, const float* x, const uint4* w, const float* bias, const float* res, int rows, int k, int m, int gelu) {
    gemv_bf16_rows<2>(y, x, w, bias, res, rows, k, m, gelu);
}

extern "C" __global__ void __launch_bounds__(GEMV_WARPS * 32)
    gemv_bf16_r4(float* y, const float* x, const uint4* w, const float* bias, const float* res, int rows, int k, int m, int gelu) {
    gemv_bf16_rows<4>(y, x, w, bias, res, rows, k, m, gelu);
}

extern "C" __global__ void __launch_bounds__(GEMV_WARPS * 32)
    gemv_bf16_r8(float* y, const float* x, const uint4* w, const float* bias, const float* res, int rows, int k, int m, int gelu) {
    gemv_bf16_rows<8>(y, x, w, bias, res, rows, k, m, gelu);
}
