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

// acc plus the dot product of the 8 bf16 weights in w with a and b.
__device__ __forceinline__ float gemv_dot8(uint4 w, float4 a, float4 b, float acc) {
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

// The block's sum of each of its threads' R values (every thread gets the
// totals). red holds GEMV_WARPS × R floats.
template <int R>
__device__ __forceinline__ void gemv_block_sums(float (&v)[R], float* red) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
    for (int r = 0; r < R; r++) {
        const float s = warp_sum(v[r]);
        if (lane == 0) red[warp * R + r] = s;
    }
    __syncthreads();
#pragma unroll
    for (int r = 0; r < R; r++) {
        float s = 0.0f;
#pragma unroll
        for (int w = 0; w < GEMV_WARPS; w++) s += red[w * R + r];
        v[r] = s;
    }
    __syncthreads();
}

// The block normalises nr (at most R) rows of x, k wide, into xs as
// LayerNorm does (the mean, then the mean square of x − mean, eps; nw and nb
// may be null): the rows the warps then multiply. Every thread of the block
// takes part. A row goes to xs in the order the warps read it: of each 8
// values the first 4 in the row's first half and the last 4 in its second,
// so that a warp's 16-byte reads of a half are contiguous (no bank
// conflicts).
template <int R>
__device__ __forceinline__ void gemv_norm_rows(float* xs, const float* x, const float* nw, const float* nb, int nr, int k, float eps) {
    __shared__ float red[GEMV_WARPS * R];
    const int k4 = k >> 2;
    float4* xs4 = reinterpret_cast<float4*>(xs);
    float s[R];
#pragma unroll
    for (int r = 0; r < R; r++) {
        s[r] = 0.0f;
        if (r < nr) {
            for (int i = threadIdx.x; i < k4; i += blockDim.x) {
                const float4 v = reinterpret_cast<const float4*>(x + (i64)r * k)[i];
                xs4[r * k4 + i] = v;
                s[r] += (v.x + v.y) + (v.z + v.w);
            }
        }
    }
    gemv_block_sums<R>(s, red);
    float mean[R], q[R];
#pragma unroll
    for (int r = 0; r < R; r++) {
        mean[r] = s[r] / k;
        q[r] = 0.0f;
        if (r < nr) {
            for (int i = threadIdx.x; i < k4; i += blockDim.x) {
                const float4 v = xs4[r * k4 + i];
                const float a = v.x - mean[r], b = v.y - mean[r], c = v.z - mean[r], d = v.w - mean[r];
                q[r] += (a * a + b * b) + (c * c + d * d);
            }
        }
    }
    gemv_block_sums<R>(q, red);
    // xs is now rewritten in the reading order, so x is read again (every
    // thread has passed its last read of xs in gemv_block_sums).
#pragma unroll
    for (int r = 0; r < R; r++) {
        const float inv = rsqrtf(q[r] / k + eps);
        if (r < nr) {
            for (int i = threadIdx.x; i < k4; i += blockDim.x) {
                float4 v = reinterpret_cast<const float4*>(x + (i64)r * k)[i];
                v.x = (v.x - mean[r]) * inv;
                v.y = (v.y - mean[r]) * inv;
                v.z = (v.z - mean[r]) * inv;
                v.w = (v.w - mean[r]) * inv;
                if (nw) {
                    const float4 g = reinterpret_cast<const float4*>(nw)[i];
                    v.x *= g.x, v.y *= g.y, v.z *= g.z, v.w *= g.w;
                }
                if (nb) {
                    const float4 b = reinterpret_cast<const float4*>(nb)[i];
                    v.x += b.x, v.y += b.y, v.z += b.z, v.w += b.w;
                }
                xs4[r * k4 + (i & 1) * (k4 >> 1) + (i >> 1)] = v;
            }
        }
    }
    __syncthreads();
}

// One warp an output o, rows r0 .. r0+R-1 of x (block row blockIdx.y). k is
// a multiple of 8 and x 16-byte aligned (the caller checks both). bias and
// res may be null; gelu applies the exact GELU after the bias (never with
// res: a residual branch ends in a plain projection). With NORM the block
// first normalises its rows of x into shared memory (R·k floats of dynamic
// shared memory, in gemv_norm_rows's order) and the warps multiply those.
template <int R, bool NORM>
__device__ __forceinline__ void gemv_bf16_rows(float* __restrict__ y, const float* __restrict__ x, const uint4* __restrict__ w,
                                               const float* __restrict__ bias, const float* __restrict__ res, int rows, int k,
                                               int m, int gelu, const float* __restrict__ nw, const float* __restrict__ nb,
                                               float eps) {
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
    const int nr = min(R, rows - r0);
    extern __shared__ float4 gemv_rows[];
    const float* xr = x + (i64)r0 * k; // row r of the block is xr + r·k
    if (NORM) {
        gemv_norm_rows<R>(reinterpret_cast<float*>(gemv_rows), xr, nw, nb, nr, k, eps);
        xr = reinterpret_cast<const float*>(gemv_rows);
    }
    if (!live) return;
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
                    if (r < nr) {
                        const float4* xv = reinterpret_cast<const float4*>(xr + (i64)r * k);
                        if (NORM) {
                            acc[r] = gemv_dot8(wv[d], xv[v], xv[nv + v], acc[r]);
                        } else {
                            acc[r] = gemv_dot8(wv[d], __ldg(xv + 2 * v), __ldg(xv + 2 * v + 1), acc[r]);
                        }
                    }
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
#define GEMV_ARGS float *y, const float *x, const uint4 *w, const float *bias, const float *res, int rows, int k, int m, int gelu

extern "C" __global__ void __launch_bounds__(GEMV_WARPS * 32) gemv_bf16_r1(GEMV_ARGS) {
    gemv_bf16_rows<1, false>(y, x, w, bias, res, rows, k, m, gelu, nullptr, nullptr, 0.0f);
}

extern "C" __global__ void __launch_bounds__(GEMV_WARPS * 32) gemv_bf16_r2(GEMV_ARGS) {
    gemv_bf16_rows<2, false>(y, x, w, bias, res, rows, k, m, gelu, nullptr, nullptr, 0.0f);
}

extern "C" __global__ void __launch_bounds__(GEMV_WARPS * 32) gemv_bf16_r4(GEMV_ARGS) {
    gemv_bf16_rows<4, false>(y, x, w, bias, res, rows, k, m, gelu, nullptr, nullptr, 0.0f);
}

extern "C" __global__ void __launch_bounds__(GEMV_WARPS * 32) gemv_bf16_r8(GEMV_ARGS) {
    gemv_bf16_rows<8, false>(y, x, w, bias, res, rows, k, m, gelu, nullptr, nullptr, 0.0f);
}

// Linear(LayerNorm(x)) in one kernel (NormLinear on the camera head): each
// block normalises its rows itself, so the LayerNorm is no launch of its own.
extern "C" __global__ void __launch_bounds__(GEMV_WARPS * 32)
    gemv_norm_bf16_r1(GEMV_ARGS, const float* nw, const float* nb, float eps) {
    gemv_bf16_rows<1, true>(y, x, w, bias, res, rows, k, m, gelu, nw, nb, eps);
}

extern "C" __global__ void __launch_bounds__(GEMV_WARPS * 32)
    gemv_norm_bf16_r2(GEMV_ARGS, const float* nw, const float* nb, float eps) {
    gemv_bf16_rows<2, true>(y, x, w, bias, res, rows, k, m, gelu, nw, nb, eps);
}

extern "C" __global__ void __launch_bounds__(GEMV_WARPS * 32)
    gemv_norm_bf16_r4(GEMV_ARGS, const float* nw, const float* nb, float eps) {
    gemv_bf16_rows<4, true>(y, x, w, bias, res, rows, k, m, gelu, nw, nb, eps);
}

extern "C" __global__ void __launch_bounds__(GEMV_WARPS * 32)
    gemv_norm_bf16_r8(GEMV_ARGS, const float* nw, const float* nb, float eps) {
    gemv_bf16_rows<8, true>(y, x, w, bias, res, rows, k, m, gelu, nw, nb, eps);
}
