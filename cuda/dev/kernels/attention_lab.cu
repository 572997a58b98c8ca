// The lab's attention kernels, kept for comparison with the production ones
// (cuda/dev/README.md): the unpipelined 16-row mma.sync kernels that fa2
// replaced, and the two-warpgroup TMA kernel that attn_tma3_paged_bf replaced.
// Their verdicts are in cuda/NOTES.md. Compiled by the Go loader (cudadev
// builds, which inline the include below) and by nvcc (dev/wgcheck.cu).
#include "../../kernels/attention_hopper.cu"

// ---------------------------------------------------------------------------
// Tensor-core flash attention for head dim 64: bf16 operands (as the
// reference's bf16 KV cache and autocast SDPA), fp32 online softmax and fp32
// accumulation. mma.sync m16n8k16; a block is 4 warps × 16 queries; keys come
// in 64-row tiles staged in shared memory, K as [key][dim] and V transposed
// as [dim][key], so every fragment load is one 32-bit shared load. Rows are
// padded to 72 elements, which makes those loads bank-conflict free. The key
// range may be split over gridDim.z blocks, merged by attn_combine
// (attention.cu) exactly like the fp32 kernel's partial results.
#define MQ 64

template <typename KT, bool PAGED>
__device__ __forceinline__ void mma_attn(const float* __restrict__ q, const KT* __restrict__ k, const KT* __restrict__ v,
                                         const int* __restrict__ pages, int ps, int nq, int nk, int h, float scale,
                                         float* __restrict__ out, float* __restrict__ pm, float* __restrict__ pl) {
    __shared__ __align__(16) bf16_t ks[MK * SROW];
    __shared__ __align__(16) bf16_t vt[HD * SROW];
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, tg = lane & 3;
    const int bh = blockIdx.y, b = bh / h, hd = bh % h;
    const i64 ld = (i64)h * HD;

    const int nsplit = gridDim.z;
    int chunk = (nk + nsplit - 1) / nsplit;
    chunk = (chunk + MK - 1) / MK * MK;
    const int k0 = blockIdx.z * chunk;
    const int k1 = min(nk, k0 + chunk);

    // Q as A fragments, rounded to bf16 like the reference's q for the bf16 cache.
    const int r0 = blockIdx.x * MQ + warp * 16 + g, r1 = r0 + 8;
    const bool ok0 = r0 < nq, ok1 = r1 < nq;
    unsigned qa[4][4];
    {
        const float* q0 = q + ((i64)b * nq + (ok0 ? r0 : 0)) * ld + (i64)hd * HD;
        const float* q1 = q + ((i64)b * nq + (ok1 ? r1 : 0)) * ld + (i64)hd * HD;
        load_q_frags(qa, q0, q1, ok0, ok1, tg);
    }
    const float sl2 = scale * 1.4426950408889634f; // softmax in base 2
    float o[8][4];
#pragma unroll
    for (int i = 0; i < 8; i++) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.f, l1 = 0.f;

    for (int t0 = k0; t0 < k1; t0 += MK) {
        const int nt = min(MK, k1 - t0);
        __syncthreads();
        for (int c = tid; c < MK * 8; c += 128) {
            const int j = c >> 3, d0 = (c & 7) * 8;
            unsigned w[4] = {0u, 0u, 0u, 0u}, u[4] = {0u, 0u, 0u, 0u};
            if (j < nt) {
                const int gk = t0 + j;
                i64 row;
                if (PAGED) row = (i64)pages[gk / ps] * ps + (gk % ps);
                else row = (i64)b * nk + gk;
                const i64 off = row * ld + (i64)hd * HD + d0;
                load8(k + off, w);
                load8(v + off, u);
            }
            *(uint4*)&ks[j * SROW + d0] = make_uint4(w[0], w[1], w[2], w[3]);
#pragma unroll
            for (int e = 0; e < 4; e++) {
                vt[(d0 + 2 * e) * SROW + j] = (bf16_t)(u[e] & 0xffffu);
                vt[(d0 + 2 * e + 1) * SROW + j] = (bf16_t)(u[e] >> 16);
            }
        }
        __syncthreads();

        // S = Q·Kᵀ: this warp's 16 queries × 64 keys.
        float s[8][4];
#pragma unroll
        for (int n = 0; n < 8; n++) {
            s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.f;
#pragma unroll
            for (int kk = 0; kk < 4; kk++) {
                const bf16_t* kr = &ks[(n * 8 + g) * SROW + kk * 16 + 2 * tg];
                mma_bf16(s[n], qa[kk], *(const unsigned*)kr, *(const unsigned*)(kr + 8));
            }
        }
        float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
        for (int n = 0; n < 8; n++) {
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const bool in = n * 8 + 2 * tg + e < nt;
                s[n][e] = in ? s[n][e] * sl2 : -INFINITY;
                s[n][2 + e] = in ? s[n][2 + e] * sl2 : -INFINITY;
                mx0 = fmaxf(mx0, s[n][e]);
                mx1 = fmaxf(mx1, s[n][2 + e]);
            }
        }
        const float mn0 = fmaxf(m0, quad_max(mx0)), mn1 = fmaxf(m1, quad_max(mx1));
        const float c0 = exp2f(m0 - mn0), c1 = exp2f(m1 - mn1); // 0 on the first tile
        m0 = mn0;
        m1 = mn1;
        l0 *= c0;
        l1 *= c1;
#pragma unroll
        for (int i = 0; i < 8; i++) {
            o[i][0] *= c0; o[i][1] *= c0;
            o[i][2] *= c1; o[i][3] *= c1;
        }

        // O += P·V, P rounded to bf16 as an A fragment straight from S's registers.
#pragma unroll
        for (int kk = 0; kk < 4; kk++) {
            float p[2][4];
#pragma unroll
            for (int t = 0; t < 2; t++) {
                p[t][0] = exp2f(s[2 * kk + t][0] - mn0);
                p[t][1] = exp2f(s[2 * kk + t][1] - mn0);
                p[t][2] = exp2f(s[2 * kk + t][2] - mn1);
                p[t][3] = exp2f(s[2 * kk + t][3] - mn1);
                l0 += p[t][0] + p[t][1];
                l1 += p[t][2] + p[t][3];
            }
            const unsigned a[4] = {pack_bf16(p[0][0], p[0][1]), pack_bf16(p[0][2], p[0][3]),
                                   pack_bf16(p[1][0], p[1][1]), pack_bf16(p[1][2], p[1][3])};
#pragma unroll
            for (int n = 0; n < 8; n++) {
                const bf16_t* vr = &vt[(n * 8 + g) * SROW + kk * 16 + 2 * tg];
                mma_bf16(o[n], a, *(const unsigned*)vr, *(const unsigned*)(vr + 8));
            }
        }
    }
    l0 = quad_sum(l0);
    l1 = quad_sum(l1);

    const i64 rows = (i64)(gridDim.y / h) * nq; // B·Nq
#pragma unroll
    for (int half = 0; half < 2; half++) {
        const int r = half ? r1 : r0;
        if (r >= nq) continue;
        const float m = half ? m1 : m0, l = half ? l1 : l0;
        const i64 orow = (i64)b * nq + r;
        float* dst;
        float mul = 1.f;
        if (nsplit == 1) {
            dst = out + orow * ld + (i64)hd * HD;
            mul = l > 0.f ? 1.f / l : 0.f;
        } else {
            const i64 prow = ((i64)blockIdx.z * rows + orow) * h + hd;
            dst = out + prow * HD;
            if (tg == 0) {
                pm[prow] = m;
                pl[prow] = l;
            }
        }
#pragma unroll
        for (int n = 0; n < 8; n++) {
            const int c = n * 8 + 2 * tg;
            *(float2*)(dst + c) = make_float2(o[n][2 * half] * mul, o[n][2 * half + 1] * mul);
        }
    }
}

extern "C" __global__ void __launch_bounds__(128) attn_mma_paged_bf(const float* q, const bf16_t* k, const bf16_t* v,
                                                                    const int* pages, int ps, int nq, int nk, int h,
                                                                    float scale, float* out, float* pm, float* pl) {
    pdl_wait();
    mma_attn<bf16_t, true>(q, k, v, pages, ps, nq, nk, h, scale, out, pm, pl);
}

extern "C" __global__ void __launch_bounds__(128) attn_mma_dense(const float* q, const float* k, const float* v, int nq,
                                                                 int nk, int h, float scale, float* out, float* pm,
                                                                 float* pl) {
    pdl_wait();
    mma_attn<float, false>(q, k, v, nullptr, 1, nq, nk, h, scale, out, pm, pl);
}

// The Hopper paged kernel with two warpgroups and TMA copies (see
// TMA_PAGED_KERNEL in attention_hopper.cu).
TMA_PAGED_KERNEL(attn_tma_paged_bf, 2)

// The production TMA kernels with part of the softmax's exponentials on the
// FMA units (POLY in wg_paged): every fourth or every second group of four
// scores. Same parameters as attn_tma3_paged_bf and attn_f8_paged.
#define POLY_BF_KERNEL(NAME, POLY)                                                                                     \
    extern "C" __global__ void __launch_bounds__(384, 1)                                                               \
        NAME(const float* __restrict__ q, const __grid_constant__ TensorMap tk, const __grid_constant__ TensorMap tv,   \
             const int* __restrict__ pages, int ps, int nq, int nk, int h, float scale, float* __restrict__ out,        \
             float* __restrict__ pm, float* __restrict__ pl, unsigned* __restrict__ obf) {                              \
        pdl_wait();                                                                                                     \
        wg_paged<true, 3, false, POLY>(q, nullptr, nullptr, &tk, &tv, pages, ps, nq, nk, h, scale, out, pm, pl, obf);  \
    }
POLY_BF_KERNEL(attn_tma3_paged_bf_poly4, 4)
POLY_BF_KERNEL(attn_tma3_paged_bf_poly2, 2)

#define POLY_F8_KERNEL(NAME, POLY)                                                                                     \
    extern "C" __global__ void __launch_bounds__(384, 1)                                                               \
        NAME(const float* __restrict__ q, const __grid_constant__ TensorMap tk, const __grid_constant__ TensorMap tv,   \
             const int* __restrict__ pages, int ps, int nq, int nk, int h, float scale, float* __restrict__ out,        \
             float* __restrict__ pm, float* __restrict__ pl, const float* __restrict__ kvs,                             \
             unsigned* __restrict__ obf) {                                                                              \
        pdl_wait();                                                                                                     \
        wg_paged<true, 3, true, POLY>(q, nullptr, nullptr, &tk, &tv, pages, ps, nq, nk, h, scale, out, pm, pl, obf,    \
                                      kvs);                                                                             \
    }
POLY_F8_KERNEL(attn_f8_paged_poly4, 4)
POLY_F8_KERNEL(attn_f8_paged_poly2, 2)
