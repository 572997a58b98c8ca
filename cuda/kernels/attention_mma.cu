// Tensor-core flash attention for head dim 64: bf16 operands (as the
// reference's bf16 KV cache and autocast SDPA), fp32 online softmax and fp32
// accumulation. mma.sync m16n8k16; a block is 4 warps × 16 queries; keys come
// in 64-row tiles staged in shared memory, K as [key][dim] and V transposed
// as [dim][key], so every fragment load is one 32-bit shared load. Rows are
// padded to 72 elements, which makes those loads bank-conflict free. The key
// range may be split over gridDim.z blocks, merged by attn_combine
// (attention.cu) exactly like the fp32 kernel's partial results.
#define MQ 64
#define MK 64
#define HD 64
#define SROW 72

// 2^x as the single MUFU instruction (exp2f adds denormal handling).
__device__ __forceinline__ float ex2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

__device__ __forceinline__ void mma_bf16(float* c, const unsigned* a, unsigned b0, unsigned b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Eight consecutive elements as four bf16 pairs.
__device__ __forceinline__ void load8(const bf16_t* p, unsigned* w) {
    const uint4 v = *(const uint4*)p;
    w[0] = v.x; w[1] = v.y; w[2] = v.z; w[3] = v.w;
}
__device__ __forceinline__ void load8(const float* p, unsigned* w) {
    const float4 a = *(const float4*)p, b = *(const float4*)(p + 4);
    w[0] = pack_bf16(a.x, a.y); w[1] = pack_bf16(a.z, a.w);
    w[2] = pack_bf16(b.x, b.y); w[3] = pack_bf16(b.z, b.w);
}

__device__ __forceinline__ float quad_max(float v) {
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
    return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ __forceinline__ float quad_sum(float v) {
    v += __shfl_xor_sync(0xffffffffu, v, 1);
    return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

// Q rows r0 and r0+8 of one head (q0, q1; ok* false past the last query)
// as the four register A fragments of an m16 tile over the head's 64
// dimensions, rounded to bf16 like the reference's q for the bf16 cache.
__device__ __forceinline__ void load_q_frags(unsigned (&qa)[4][4], const float* q0, const float* q1, bool ok0, bool ok1,
                                             int tg) {
#pragma unroll
    for (int kk = 0; kk < 4; kk++) {
        const int c = kk * 16 + 2 * tg;
        const float2 z = make_float2(0.f, 0.f);
        const float2 x0 = ok0 ? *(const float2*)(q0 + c) : z, x1 = ok1 ? *(const float2*)(q1 + c) : z;
        const float2 y0 = ok0 ? *(const float2*)(q0 + c + 8) : z, y1 = ok1 ? *(const float2*)(q1 + c + 8) : z;
        qa[kk][0] = pack_bf16(x0.x, x0.y);
        qa[kk][1] = pack_bf16(x1.x, x1.y);
        qa[kk][2] = pack_bf16(y0.x, y0.y);
        qa[kk][3] = pack_bf16(y1.x, y1.y);
    }
}

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

// ---------------------------------------------------------------------------
// Helpers of the pipelined paged kernel below: K and V tiles are copied
// straight from the pages into shared memory with cp.async (common.cuh;
// 16-byte chunks, zero-filled past the last key) while the previous tile is
// computed; V stays
// [key][dim] and its B fragments come from ldmatrix.trans instead of
// transposing stores.

__device__ __forceinline__ void ldmatrix_x4_trans(unsigned* r, const void* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p)));
}

// ---------------------------------------------------------------------------
// FA2-style paged kernel: 128 queries per block, each of the 4 warps owns 32
// query rows (two m16 tiles), so every K and V fragment read from shared
// memory (ldmatrix, 16 bytes a lane) feeds two MMAs instead of one — the
// 16-row kernel above is bound by shared-memory bandwidth (one 256-byte B
// fragment per 4096-MAC mma). Softmax runs in base 2 with the scale folded
// into one FFMA per score; keys past the end are masked only in the last
// tile. The page of a tile's first key is found once per tile; a 64-key tile
// then spans at most two pages when the page size is at least 64.
#define FQ 128

__device__ __forceinline__ void ldmatrix_x4(unsigned* r, const void* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p)));
}

// PAGED: keys come through the page table of one stream's cache (batch 1).
// Dense: k and v are bf16 [B, nk, h, 64] and blockIdx.y is batch·h + head.
// TREE shortens the softmax's dependency chains (Nsight Compute: with two
// warps a scheduler, 35 % of the issue gaps were fixed-latency dependencies):
// row maxima and sums as pairwise trees instead of 16-long chains, and the
// rescale of O and l skipped when no row of the warp raised its maximum
// (the factor would be exactly 1).
template <int STAGES, bool PAGED, bool TREE = false>
__device__ __forceinline__ void fa_attn(const float* __restrict__ q, const bf16_t* __restrict__ k,
                                        const bf16_t* __restrict__ v, const int* __restrict__ pages, int ps, int nq,
                                        int nk, int h, float scale, float* __restrict__ out, float* __restrict__ pm,
                                        float* __restrict__ pl, unsigned* __restrict__ obf) {
    // STAGES × (K tile, V tile), dynamic: three stages need more than 48 KB.
    extern __shared__ __align__(16) bf16_t fa_smem[];
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, tg = lane & 3;
    const int b = blockIdx.y / h, hd = blockIdx.y % h;
    const i64 ld = (i64)h * HD;
    const i64 qrow0 = (i64)b * nq; // this batch's first query (and output) row

    const int nsplit = gridDim.z;
    int chunk = (nk + nsplit - 1) / nsplit;
    chunk = (chunk + MK - 1) / MK * MK;
    const int k0 = blockIdx.z * chunk;
    const int k1 = min(nk, k0 + chunk);
    const int ntiles = k1 > k0 ? (k1 - k0 + MK - 1) / MK : 0;

    // Thread tid copies rows (tid >> 3) + 16·i, i < 4, columns (tid & 7)·8.
    const int lrow = tid >> 3, lcol = (tid & 7) * 8;
    const bf16_t* kb = k + (i64)hd * HD + lcol;
    const bf16_t* vb = v + (i64)hd * HD + lcol;
    auto load_tile = [&](int t, int stage) {
        const int t0 = k0 + t * MK;
        int pi = 0, rem = 0;
        if (PAGED && ps >= MK) {
            pi = t0 / ps;
            rem = t0 - pi * ps;
        }
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const int j = lrow + 16 * i;
            const int gk = t0 + j;
            const bool in = gk < k1;
            i64 row = 0;
            if (in && !PAGED) {
                row = (i64)b * nk + gk;
            } else if (in) {
                if (ps >= MK) {
                    int r = rem + j, p = pi;
                    if (r >= ps) {
                        r -= ps;
                        p++;
                    }
                    row = (i64)pages[p] * ps + r;
                } else {
                    row = (i64)pages[gk / ps] * ps + (gk % ps);
                }
            }
            bf16_t* kst = fa_smem + stage * (2 * MK * SROW);
            cp_async16(&kst[j * SROW + lcol], kb + row * ld, in);
            cp_async16(&kst[MK * SROW + j * SROW + lcol], vb + row * ld, in);
        }
        cp_async_commit();
    };
    // Prologue: the first STAGES-1 tiles (empty groups keep the count uniform).
#pragma unroll
    for (int st = 0; st < STAGES - 1; st++) {
        if (st < ntiles) load_tile(st, st);
        else cp_async_commit();
    }

    // Q as A fragments of two m16 tiles, rounded to bf16 like the reference's q.
    unsigned qa[2][4][4];
    int rows[2][2];
#pragma unroll
    for (int mt = 0; mt < 2; mt++) {
        rows[mt][0] = blockIdx.x * FQ + warp * 32 + mt * 16 + g;
        rows[mt][1] = rows[mt][0] + 8;
        const bool ok0 = rows[mt][0] < nq, ok1 = rows[mt][1] < nq;
        const float* q0 = q + (qrow0 + (ok0 ? rows[mt][0] : 0)) * ld + (i64)hd * HD;
        const float* q1 = q + (qrow0 + (ok1 ? rows[mt][1] : 0)) * ld + (i64)hd * HD;
        load_q_frags(qa[mt], q0, q1, ok0, ok1, tg);
    }
    const float sl2 = scale * 1.4426950408889634f; // softmax in base 2
    float o[2][8][4];
    float m[2][2], l[2][2];
#pragma unroll
    for (int mt = 0; mt < 2; mt++) {
#pragma unroll
        for (int i = 0; i < 8; i++) o[mt][i][0] = o[mt][i][1] = o[mt][i][2] = o[mt][i][3] = 0.f;
        m[mt][0] = m[mt][1] = -INFINITY;
        l[mt][0] = l[mt][1] = 0.f;
    }

    for (int t = 0; t < ntiles; t++) {
        // Tile t has landed once at most STAGES-2 later groups are pending;
        // the barrier also says every warp is done with tile t-1, whose
        // stage the next load refills.
        cp_async_wait<STAGES - 2>();
        __syncthreads();
        if (t + STAGES - 1 < ntiles) load_tile(t + STAGES - 1, (t + STAGES - 1) % STAGES);
        else cp_async_commit();
        const bf16_t* kt = fa_smem + (t % STAGES) * (2 * MK * SROW);
        const bf16_t* vt = kt + MK * SROW;

        // S = Q·Kᵀ (raw, unscaled): 32 rows × 64 keys per warp.
        float s[2][8][4];
#pragma unroll
        for (int n = 0; n < 8; n++) {
#pragma unroll
            for (int mt = 0; mt < 2; mt++) s[mt][n][0] = s[mt][n][1] = s[mt][n][2] = s[mt][n][3] = 0.f;
#pragma unroll
            for (int kk = 0; kk < 4; kk += 2) {
                unsigned b[4];
                ldmatrix_x4(b, &kt[(n * 8 + (lane & 7)) * SROW + kk * 16 + (lane >> 3) * 8]);
#pragma unroll
                for (int mt = 0; mt < 2; mt++) {
                    mma_bf16(s[mt][n], qa[mt][kk], b[0], b[1]);
                    mma_bf16(s[mt][n], qa[mt][kk + 1], b[2], b[3]);
                }
            }
        }
        const int nt = k1 - (k0 + t * MK);
        if (nt < MK) {
#pragma unroll
            for (int mt = 0; mt < 2; mt++)
#pragma unroll
                for (int n = 0; n < 8; n++)
#pragma unroll
                    for (int e = 0; e < 2; e++)
                        if (n * 8 + 2 * tg + e >= nt) s[mt][n][e] = s[mt][n][2 + e] = -INFINITY;
        }
#pragma unroll
        for (int mt = 0; mt < 2; mt++) {
            float a[8], b[8];
            float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
            for (int n = 0; n < 8; n++) {
                a[n] = fmaxf(s[mt][n][0], s[mt][n][1]);
                b[n] = fmaxf(s[mt][n][2], s[mt][n][3]);
                if (!TREE) {
                    mx0 = fmaxf(mx0, a[n]);
                    mx1 = fmaxf(mx1, b[n]);
                }
            }
            if (TREE) {
                mx0 = fmaxf(fmaxf(fmaxf(a[0], a[1]), fmaxf(a[2], a[3])), fmaxf(fmaxf(a[4], a[5]), fmaxf(a[6], a[7])));
                mx1 = fmaxf(fmaxf(fmaxf(b[0], b[1]), fmaxf(b[2], b[3])), fmaxf(fmaxf(b[4], b[5]), fmaxf(b[6], b[7])));
            }
            const float mn0 = fmaxf(m[mt][0], quad_max(mx0)), mn1 = fmaxf(m[mt][1], quad_max(mx1));
            if (!TREE || __any_sync(0xffffffffu, mn0 != m[mt][0] || mn1 != m[mt][1])) {
                const float c0 = ex2((m[mt][0] - mn0) * sl2), c1 = ex2((m[mt][1] - mn1) * sl2); // 0 on the first tile
                m[mt][0] = mn0;
                m[mt][1] = mn1;
                l[mt][0] *= c0;
                l[mt][1] *= c1;
#pragma unroll
                for (int i = 0; i < 8; i++) {
                    o[mt][i][0] *= c0; o[mt][i][1] *= c0;
                    o[mt][i][2] *= c1; o[mt][i][3] *= c1;
                }
            }
            const float ms0 = mn0 * sl2, ms1 = mn1 * sl2;
#pragma unroll
            for (int n = 0; n < 8; n++) {
                s[mt][n][0] = ex2(fmaf(s[mt][n][0], sl2, -ms0));
                s[mt][n][1] = ex2(fmaf(s[mt][n][1], sl2, -ms0));
                s[mt][n][2] = ex2(fmaf(s[mt][n][2], sl2, -ms1));
                s[mt][n][3] = ex2(fmaf(s[mt][n][3], sl2, -ms1));
                a[n] = s[mt][n][0] + s[mt][n][1];
                b[n] = s[mt][n][2] + s[mt][n][3];
                if (!TREE) {
                    l[mt][0] += a[n];
                    l[mt][1] += b[n];
                }
            }
            if (TREE) {
                l[mt][0] += ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
                l[mt][1] += ((b[0] + b[1]) + (b[2] + b[3])) + ((b[4] + b[5]) + (b[6] + b[7]));
            }
        }

        // O += P·V, P rounded to bf16 as A fragments straight from registers.
#pragma unroll
        for (int kk = 0; kk < 4; kk++) {
            unsigned a[2][4];
#pragma unroll
            for (int mt = 0; mt < 2; mt++) {
                a[mt][0] = pack_bf16(s[mt][2 * kk][0], s[mt][2 * kk][1]);
                a[mt][1] = pack_bf16(s[mt][2 * kk][2], s[mt][2 * kk][3]);
                a[mt][2] = pack_bf16(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
                a[mt][3] = pack_bf16(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
            }
            const bf16_t* vrow = &vt[(kk * 16 + (lane & 15)) * SROW + (lane >> 4) * 8];
#pragma unroll
            for (int n = 0; n < 8; n += 2) {
                unsigned b[4];
                ldmatrix_x4_trans(b, vrow + n * 8);
#pragma unroll
                for (int mt = 0; mt < 2; mt++) {
                    mma_bf16(o[mt][n], a[mt], b[0], b[1]);
                    mma_bf16(o[mt][n + 1], a[mt], b[2], b[3]);
                }
            }
        }
    }
    cp_async_wait<0>();

#pragma unroll
    for (int mt = 0; mt < 2; mt++) {
#pragma unroll
        for (int half = 0; half < 2; half++) {
            const int r = rows[mt][half];
            const float lsum = quad_sum(l[mt][half]);
            if (r >= nq) continue;
            float* dst;
            unsigned* dbf = nullptr;
            float mul = 1.f;
            if (nsplit == 1) {
                const i64 at = (qrow0 + r) * ld + (i64)hd * HD;
                dst = out + at;
                if (obf) dbf = obf + at / 2;
                mul = lsum > 0.f ? 1.f / lsum : 0.f;
            } else {
                const i64 rowsAll = (i64)(gridDim.y / h) * nq; // B·Nq, as attn_combine counts rows
                const i64 prow = ((i64)blockIdx.z * rowsAll + qrow0 + r) * h + hd;
                dst = out + prow * HD;
                if (tg == 0) {
                    pm[prow] = m[mt][half] * sl2; // attn_combine works in base-2 units of scaled scores
                    pl[prow] = lsum;
                }
            }
#pragma unroll
            for (int n = 0; n < 8; n++) {
                const int c = n * 8 + 2 * tg;
                const float x0 = o[mt][n][2 * half] * mul, x1 = o[mt][n][2 * half + 1] * mul;
                *(float2*)(dst + c) = make_float2(x0, x1);
                if (dbf) dbf[c / 2] = pack_bf16(x0, x1);
            }
        }
    }
}

// Two cp.async stages: a third measured 3-4 % slower (1.23 vs 1.19 ms on
// BenchmarkPagedAttention). The tree reductions win on the long key ranges
// of the paged blocks (1.163 vs 1.188 ms) and lose on one frame's 1005 keys
// (29.3 vs 27.5 µs), where maxima still rise often.
extern "C" __global__ void __launch_bounds__(128, 2) attn_fa2_paged_bf(const float* q, const bf16_t* k, const bf16_t* v,
                                                                       const int* pages, int ps, int nq, int nk, int h,
                                                                       float scale, float* out, float* pm, float* pl,
                                                                       unsigned* obf) {
    pdl_wait();
    fa_attn<2, true, true>(q, k, v, pages, ps, nq, nk, h, scale, out, pm, pl, obf);
}

// Dense attention of DINO and the frame blocks on bf16 copies of k and v
// (the reference's autocast SDPA rounds them to bf16 too).
extern "C" __global__ void __launch_bounds__(128, 2) attn_fa2_dense_bf(const float* q, const bf16_t* k, const bf16_t* v,
                                                                       int nq, int nk, int h, float scale, float* out,
                                                                       float* pm, float* pl, unsigned* obf) {
    pdl_wait();
    fa_attn<2, false>(q, k, v, nullptr, 1, nq, nk, h, scale, out, pm, pl, obf);
}

// ---------------------------------------------------------------------------
// Hopper paged kernel (sm_90a): warpgroup MMA (wgmma) instead of mma.sync.
// A block is two warpgroups × 64 queries sharing 128-key K and V tiles that
// all 256 threads stage with cp.async in the 128-byte-swizzled layout the
// tensor cores read straight from shared memory (no ldmatrix). Q and P are
// register operands. Each warpgroup keeps S = Q·Kᵀ of the next tile and
// O += P·V of this one in flight together, and the two warpgroups run half
// an iteration apart so that one's softmax overlaps the other's MMAs (see
// run below). Same arithmetic as attn_fa2_paged_bf (bf16 operands, fp32
// accumulation and base-2 online softmax), same split-key partial results.
// Measured with cuda/scripts/wgcheck.cu (one H200): 0.99 ms for 1005 queries
// over 72 360 keys × 16 heads (300 TFLOP/s) against 1.16 ms for fa2; with
// both warpgroups in step 1.25 ms; 4, 5 or 6 stages the same.
#define WQ 128                // queries a block
#define WK 128                // keys a tile
#define WTILE (WK * HD * 2)   // bytes of one K or V tile
#ifndef WG_EX2                // (wgcheck swaps in a fake to time the exp unit's share)
#define WG_EX2 ex2
#endif
#ifndef WSTAGES               // (wgcheck times other values)
#define WSTAGES 5             // K+V stages (at least 4); tiles are loaded WSTAGES-2 ahead
#endif
#ifndef WSTAGES_TMA           // the TMA kernel's: 4 took 0.848 ms against 0.860 for 5
#define WSTAGES_TMA 4         // (wgcheck, twice each in one call)
#endif

#ifdef __CUDA_ARCH_FEAT_SM90_ALL
// D(64×128) (+)= A(64×16, registers) · B(16×128, shared memory descriptor, K-major).
__device__ __forceinline__ void wgmma_n128_k(float* d, const unsigned* a, unsigned long long desc, int acc) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %68, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " WG_REGS64 "{%64,%65,%66,%67}, %69, p, 1, 1, 0;\n}\n"
                 : WG_ACC64(WG_RW)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(acc), "l"(desc));
}

// D(64×64) (+)= A(64×16, registers) · B(16×64, shared memory descriptor, MN-major).
__device__ __forceinline__ void wgmma_n64_mn(float* d, const unsigned* a, unsigned long long desc, int acc) {
    asm volatile(
        "{\n.reg .pred p;\n"
        "setp.ne.b32 p, %36, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
        "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
        "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, "
        "{%32,%33,%34,%35}, %37, p, 1, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(acc), "l"(desc));
}

// D(64×128) = A·B, the first k-step of Q·Kᵀ: D is only written ("=f"), so the
// scores of one tile are not carried across loop iterations (a register move
// into an in-flight accumulator makes ptxas serialize the wgmmas).
__device__ __forceinline__ void wgmma_n128_k_first(float* d, const unsigned* a, unsigned long long desc) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " WG_REGS64 "{%64,%65,%66,%67}, %68, p, 1, 1, 0;\n}\n"
                 : WG_ACC64(WG_WO)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(0));
}

// D(64×128) (+)= A(64×16) · B(16×128), both from shared-memory descriptors
// (K-major), so that A costs no registers.
__device__ __forceinline__ void wgmma_n128_ss(float* d, unsigned long long da, unsigned long long db, int acc) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " WG_REGS64 "%64, %65, p, 1, 1, 0, 0;\n}\n"
                 : WG_ACC64(WG_RW)
                 : "l"(da), "l"(db), "r"(acc));
}
// Its first k-step: D is only written (see wgmma_n128_k_first).
__device__ __forceinline__ void wgmma_n128_ss_first(float* d, unsigned long long da, unsigned long long db) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " WG_REGS64 "%64, %65, p, 1, 1, 0, 0;\n}\n"
                 : WG_ACC64(WG_WO)
                 : "l"(da), "l"(db), "r"(0));
}

// (wg_pin of floats is in common.cuh.)
template <int N>
__device__ __forceinline__ void wg_pin(unsigned (&r)[N][4]) {
#pragma unroll
    for (int i = 0; i < N; i++)
        asm volatile("" : "+r"(r[i][0]), "+r"(r[i][1]), "+r"(r[i][2]), "+r"(r[i][3])::"memory");
}

template <int N>
struct Int {
    static constexpr int value = N;
};

// Folds a[0..16) and b[0..16) pairwise into a[0] and b[0], with constant
// indices throughout so that both stay in registers.
template <typename F>
__device__ __forceinline__ void tree16(float* a, float* b, F op) {
#pragma unroll
    for (int j = 0; j < 8; j++) { a[j] = op(a[j], a[j + 8]); b[j] = op(b[j], b[j + 8]); }
#pragma unroll
    for (int j = 0; j < 4; j++) { a[j] = op(a[j], a[j + 4]); b[j] = op(b[j], b[j + 4]); }
#pragma unroll
    for (int j = 0; j < 2; j++) { a[j] = op(a[j], a[j + 2]); b[j] = op(b[j], b[j + 2]); }
    a[0] = op(a[0], a[1]);
    b[0] = op(b[0], b[1]);
}


// Transaction barriers (mbarrier) that the tensor memory accelerator (TMA)
// completes when a tile it copies has landed.
__device__ __forceinline__ void mbar_init(unsigned bar, unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_expect_tx(unsigned bar, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_wait(unsigned bar, unsigned parity) {
    asm volatile(
        "{\n.reg .pred p;\n"
        "LBM_WAIT:\n"
        "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
        "@!p bra LBM_WAIT;\n}\n" ::"r"(bar),
        "r"(parity)
        : "memory");
}
// One box of a 3-D tensor map (a CUtensorMap the host encoded) into shared
// memory at dst, completing transaction bytes on bar.
__device__ __forceinline__ void tma_load_3d(unsigned dst, const void* map, int x, int y, int z, unsigned bar) {
    asm volatile(
        "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];\n" ::"r"(dst),
        "l"(map), "r"(x), "r"(y), "r"(z), "r"(bar)
        : "memory");
}
#endif

// A CUtensorMap as the driver encodes it (cuTensorMapEncodeTiled): 128
// opaque bytes, passed by value as a __grid_constant__ parameter.
struct __align__(64) TensorMap {
    unsigned long long w[16];
};

// The body of both Hopper paged kernels. TMA false: all threads stage tiles
// of WK consecutive keys with cp.async, whatever the page size. TMA true:
// one thread has the TMA copy each tile from the tensor maps tk and tv
// ([pages][ps][h·64] bf16, the store's layout); tiles then never straddle a
// page (a page is ceil(ps/WK) tiles, rows past ps read as zeros), which costs
// 2.5 % more MMA work at ps = 999 but takes the copies off the warps that do
// the math. NWG warpgroups of 64 queries (2, or 3 with TMA): with three, the
// second and third share a schedule role (see run), and Q lives in shared
// memory so that the 168 registers a thread then has suffice (with Q in
// registers ptxas serialized the MMAs: 0.91 against 0.82 ms in wgcheck).
template <bool TMA, int NWG>
__device__ __forceinline__ void wg_paged(const float* __restrict__ q, const bf16_t* __restrict__ k,
                                         const bf16_t* __restrict__ v, const TensorMap* tk, const TensorMap* tv,
                                         const int* __restrict__ pages, int ps, int nq, int nk, int h, float scale,
                                         float* __restrict__ out, float* __restrict__ pm, float* __restrict__ pl,
                                         unsigned* __restrict__ obf) {
#ifdef __CUDA_ARCH_FEAT_SM90_ALL
    extern __shared__ __align__(16) unsigned char wg_smem[];
    // Swizzle atoms must start on 1024 bytes; the launch adds 1 KB of slack.
    const unsigned raw = smem_addr(wg_smem);
    const unsigned sbase = (raw + 1023u) & ~1023u;
    unsigned char* const sgen = wg_smem + (sbase - raw);

    const int tid = threadIdx.x, warp = (tid >> 5) & 3, lane = tid & 31, g = lane >> 2, tg = lane & 3;
    // The warpgroup, through a shuffle so that the compiler knows it is
    // warp-uniform (else wgmma under "if (wg == …)" counts as divergent and
    // ptxas serializes it).
    const int wg = __shfl_sync(0xffffffffu, tid >> 7, 0);
    const int hd = blockIdx.y;
    const i64 ld = (i64)h * HD;

    constexpr int NST = TMA ? WSTAGES_TMA : WSTAGES; // K+V stages
    const int nsplit = gridDim.z;
    // cp.async: keys [k0, k1) in tiles of WK from k0. TMA: tiles [tb, tb +
    // ntiles) of the (page, part) sequence, tpp parts a page; the last page
    // holds last rows.
    int k0 = 0, k1 = 0, ntiles, tb = 0;
    const int tpp = (ps + WK - 1) / WK, npg = (nk + ps - 1) / ps, last = nk - (npg - 1) * ps;
    if constexpr (TMA) {
        const int total = (npg - 1) * tpp + (last + WK - 1) / WK;
        const int chunk = (total + nsplit - 1) / nsplit;
        tb = blockIdx.z * chunk;
        ntiles = max(0, min(total, tb + chunk) - tb);
    } else {
        int chunk = (nk + nsplit - 1) / nsplit;
        chunk = (chunk + WK - 1) / WK * WK;
        k0 = blockIdx.z * chunk;
        k1 = min(nk, k0 + chunk);
        ntiles = k1 > k0 ? (k1 - k0 + WK - 1) / WK : 0;
    }
    // Keys in tile t (the rest of its rows are masked).
    auto tile_keys = [&](int t) {
        if constexpr (TMA) {
            const int pi = (tb + t) / tpp, part = (tb + t) - pi * tpp;
            return min(WK, (pi == npg - 1 ? last : ps) - part * WK);
        } else {
            return k1 - (k0 + t * WK);
        }
    };
    // TMA: the stages' barriers follow the tiles.
    const unsigned bars = sbase + NST * 2 * WTILE;
    int nextPage = 0; // TMA, thread 0: the page of the next tile to load, read a tile ahead

    // Thread tid copies 16-byte chunk (tid & 7) of rows (tid >> 3) + 32·i, i < 4;
    // chunk c of row j lands at j·128 + ((c ^ j%8)·16) (the 128-byte swizzle).
    const int lrow = tid >> 3, lch = tid & 7;
    const bf16_t* kb = k + (i64)hd * HD + lch * 8;
    const bf16_t* vb = v + (i64)hd * HD + lch * 8;
    auto load_tile = [&](int t) {
        if constexpr (TMA) {
            if (tid == 0 && t < ntiles) {
                const int part = (tb + t) % tpp, page = nextPage;
                // Tiles are loaded in order: fetch the page after this one now.
                const int pn = (tb + t + 1) / tpp;
                if (pn < npg) nextPage = pages[pn];
                const unsigned st = sbase + (t % NST) * 2 * WTILE, bar = bars + (t % NST) * 8;
                mbar_expect_tx(bar, 2 * WTILE);
                tma_load_3d(st, tk, hd * HD, part * WK, page, bar);
                tma_load_3d(st + WTILE, tv, hd * HD, part * WK, page, bar);
            }
            return;
        }
#ifdef WG_NOLOADS // timing only: every tile reuses the first stages' data
        if (t >= NST) t = ntiles;
#endif
        if (t < ntiles) {
            const int t0 = k0 + t * WK;
            int pi = 0, rem = 0;
            if (ps >= WK) {
                pi = t0 / ps;
                rem = t0 - pi * ps;
            }
            unsigned char* ks = sgen + (t % NST) * 2 * WTILE;
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const int j = lrow + 32 * i;
                const int gk = t0 + j;
                const bool in = gk < k1;
                i64 row = 0;
                if (in) {
                    if (ps >= WK) {
                        int r = rem + j, p = pi;
                        if (r >= ps) {
                            r -= ps;
                            p++;
                        }
                        row = (i64)pages[p] * ps + r;
                    } else {
                        row = (i64)pages[gk / ps] * ps + (gk % ps);
                    }
                }
                const int off = j * 128 + ((lch ^ (j & 7)) << 4);
                cp_async16(ks + off, kb + row * ld, in);
                cp_async16(ks + WTILE + off, vb + row * ld, in);
            }
        }
        cp_async_commit(); // empty groups keep the count uniform
    };
    if constexpr (TMA) {
        if (tid == 0) {
            for (int st = 0; st < NST; st++) mbar_init(bars + st * 8, 1);
            asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
            if (ntiles > 0) nextPage = pages[tb / tpp];
        }
        __syncthreads();
    }
#pragma unroll
    for (int st = 0; st < NST - 2; st++) load_tile(st);

    // Q as register A fragments of this warp's 16 rows, rounded to bf16.
    const int wrow = blockIdx.x * (64 * NWG) + wg * 64; // this warpgroup's first query
    const int r0 = wrow + warp * 16 + g, r1 = r0 + 8;
    // QS (three warpgroups): Q as this warpgroup's K-major swizzled bf16
    // tile after the barriers' 1 KB slot, which spares the 16 registers
    // that keep three warpgroups' MMAs from being serialized. Else register A
    // fragments of this warp's 16 rows.
    static_assert(NWG == 2 || (TMA && NWG == 3), "three warpgroups need the TMA layout of shared memory");
    constexpr bool QS = NWG == 3;
    const unsigned qsm = sbase + NST * 2 * WTILE + 1024 + wg * 8192;
    unsigned qa[QS ? 1 : 4][4];
    if constexpr (QS) {
        const int j = (tid & 127) >> 1, half = tid & 1, row = wrow + j;
        const float* qr = q + (i64)min(row, nq - 1) * ld + (i64)hd * HD + half * 32;
#pragma unroll
        for (int c = 0; c < 4; c++) {
            float4 x = make_float4(0.f, 0.f, 0.f, 0.f), y = x;
            if (row < nq) {
                x = *(const float4*)(qr + c * 8);
                y = *(const float4*)(qr + c * 8 + 4);
            }
            const int ch = half * 4 + c;
            *(uint4*)(sgen + (qsm - sbase) + j * 128 + ((ch ^ (j & 7)) << 4)) =
                make_uint4(pack_bf16(x.x, x.y), pack_bf16(x.z, x.w), pack_bf16(y.x, y.y), pack_bf16(y.z, y.w));
        }
        fence_proxy_async(); // for the tensor cores (a barrier comes before the first MMA)
    } else {
        const bool ok0 = r0 < nq, ok1 = r1 < nq;
        const float* q0 = q + (i64)(ok0 ? r0 : 0) * ld + (i64)hd * HD;
        const float* q1 = q + (i64)(ok1 ? r1 : 0) * ld + (i64)hd * HD;
        load_q_frags(qa, q0, q1, ok0, ok1, tg);
    }
    const float sl2 = scale * 1.4426950408889634f;
    float o[32];
#pragma unroll
    for (int i = 0; i < 32; i++) o[i] = 0.f;
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.f, l1 = 0.f;
    unsigned p[8][4]; // P of the tile whose P·V comes next, as A fragments

    // S = Q·Kᵀ of tile t (issued, not waited for). carried: s lives across
    // the loop's back edge while the MMA runs (warpgroup 1), so its first
    // k-step reads and writes s ("+f", scale-d off) to keep it in the same
    // registers; otherwise it only writes s, which then needs no registers
    // between tiles.
    auto issue_qk = [&](float(&s)[64], int t, bool carried) {
        const unsigned ka = sbase + (t % NST) * 2 * WTILE;
        wg_fence();
        if constexpr (QS) {
            if (carried) wgmma_n128_ss(s, wg_desc(qsm, 16, 1024), wg_desc(ka, 16, 1024), 0);
            else wgmma_n128_ss_first(s, wg_desc(qsm, 16, 1024), wg_desc(ka, 16, 1024));
#pragma unroll
            for (int kk = 1; kk < 4; kk++)
                wgmma_n128_ss(s, wg_desc(qsm + kk * 32, 16, 1024), wg_desc(ka + kk * 32, 16, 1024), 1);
        } else {
            if (carried) wgmma_n128_k(s, qa[0], wg_desc(ka, 16, 1024), 0);
            else wgmma_n128_k_first(s, qa[0], wg_desc(ka, 16, 1024));
#pragma unroll
            for (int kk = 1; kk < 4; kk++) wgmma_n128_k(s, qa[kk], wg_desc(ka + kk * 32, 16, 1024), 1);
        }
        wg_commit();
    };
    // O += P·V of tile t (issued, not waited for).
    auto issue_pv = [&](int t) {
        const unsigned va = sbase + (t % NST) * 2 * WTILE + WTILE;
        wg_fence();
#pragma unroll
        for (int kk = 0; kk < 8; kk++) wgmma_n64_mn(o, p[kk], wg_desc(va + kk * 2048, 16, 1024), 1);
        wg_commit();
    };
    // Online softmax of tile t's scores: new maxima, the factors c0, c1 for
    // what came before, the probabilities in s, the row sums added to l.
    auto softmax = [&](float(&s)[64], int t, float& c0, float& c1) {
        const int nt = tile_keys(t);
        if (nt < WK) {
#pragma unroll
            for (int j = 0; j < 16; j++)
#pragma unroll
                for (int e = 0; e < 2; e++)
                    if (j * 8 + 2 * tg + e >= nt) s[4 * j + e] = s[4 * j + 2 + e] = -INFINITY;
        }
        float a[16], b[16];
#pragma unroll
        for (int j = 0; j < 16; j++) {
            a[j] = fmaxf(s[4 * j], s[4 * j + 1]);
            b[j] = fmaxf(s[4 * j + 2], s[4 * j + 3]);
        }
        tree16(a, b, fmaxf);
        const float mn0 = fmaxf(m0, quad_max(a[0])), mn1 = fmaxf(m1, quad_max(b[0]));
        c0 = ex2((m0 - mn0) * sl2); // 0 on the first tile
        c1 = ex2((m1 - mn1) * sl2);
        m0 = mn0;
        m1 = mn1;
        const float ms0 = mn0 * sl2, ms1 = mn1 * sl2;
#pragma unroll
        for (int j = 0; j < 16; j++) {
            s[4 * j] = WG_EX2(fmaf(s[4 * j], sl2, -ms0));
            s[4 * j + 1] = WG_EX2(fmaf(s[4 * j + 1], sl2, -ms0));
            s[4 * j + 2] = WG_EX2(fmaf(s[4 * j + 2], sl2, -ms1));
            s[4 * j + 3] = WG_EX2(fmaf(s[4 * j + 3], sl2, -ms1));
            a[j] = s[4 * j] + s[4 * j + 1];
            b[j] = s[4 * j + 2] + s[4 * j + 3];
        }
        tree16(a, b, [](float x, float y) { return x + y; });
        l0 = l0 * c0 + a[0];
        l1 = l1 * c1 + b[0];
    };
    auto to_p = [&](const float(&s)[64]) {
#pragma unroll
        for (int kk = 0; kk < 8; kk++) {
            p[kk][0] = pack_bf16(s[8 * kk], s[8 * kk + 1]);
            p[kk][1] = pack_bf16(s[8 * kk + 2], s[8 * kk + 3]);
            p[kk][2] = pack_bf16(s[8 * kk + 4], s[8 * kk + 5]);
            p[kk][3] = pack_bf16(s[8 * kk + 6], s[8 * kk + 7]);
        }
    };

    auto rescale = [&](float c0, float c1) {
#pragma unroll
        for (int j = 0; j < 8; j++) {
            o[4 * j] *= c0;
            o[4 * j + 1] *= c0;
            o[4 * j + 2] *= c1;
            o[4 * j + 3] *= c1;
        }
    };

    // TMA: tile t is the last page's last and ends inside the page, above
    // rows that hold stale (possibly NaN) values. P is 0 there, but 0·NaN is
    // not, so arrived zeroes those V rows, and all threads must be done
    // before any P·V reads them.
    auto stale = [&](int t) {
        const int part = (tb + t) % tpp, nt = tile_keys(t);
        return nt < WK && part * WK + nt < ps;
    };
    // Tile t has landed (and, with cp.async, every thread's copies are
    // visible to the tensor cores) once all threads pass this.
    auto arrived = [&](int t) {
        if constexpr (TMA) {
            mbar_wait(bars + (t % NST) * 8, (t / NST) & 1);
            if (stale(t)) {
                const int nt = tile_keys(t);
                unsigned char* vs = sgen + (t % NST) * 2 * WTILE + WTILE;
                for (int i = tid; i < (WK - nt) * 8; i += blockDim.x)
                    *(uint4*)(vs + nt * 128 + i * 16) = make_uint4(0, 0, 0, 0);
                fence_proxy_async();
            }
        } else {
            fence_proxy_async();
        }
    };

    // The two warpgroups run half an iteration apart, so that one's softmax
    // overlaps the other's MMAs (the tensor cores and the exp unit are both
    // shared by the SM): after the barrier of iteration t, warpgroup 0 issues
    // S of tile t+1 and P·V of tile t and then does the softmax of tile t+1
    // while they run; warpgroup 1 first finishes what it issued at the end of
    // iteration t-1 (S of tile t, P·V of tile t-1), does the softmax of tile
    // t, and then issues S of tile t+1 and P·V of tile t, which run across the
    // next barrier. So a stage is free only two iterations after its tile's
    // P·V was issued: with NST stages, iteration t loads tile t+NST-2,
    // and tile t+1 (loaded two iterations ago) has landed at its barrier.
    // ROLE is 0 for warpgroup 0 and 1 for the others (a third in role 0
    // measured the same); each role has its own loop so that role 1's
    // in-flight scores stay in fixed registers across the back edge.
    auto run = [&](auto role) {
        constexpr int ROLE = decltype(role)::value;
        float s[64];
        float c0, c1;
        if constexpr (ROLE == 1) {
#pragma unroll
            for (int i = 0; i < 64; i++) s[i] = 0.f; // read (not used) by the tied first k-step
            wg_pin(s);
        }
        wg_pin(o); // O's zeros are written before any MMA is in flight
        cp_async_wait<NST - 3>(); // tile 0
        arrived(0);
        __syncthreads();
        issue_qk(s, 0, ROLE == 1);
        if constexpr (ROLE == 0) {
            wg_wait<0>();
            wg_pin(s);
            softmax(s, 0, c0, c1);
            to_p(s);
        }
        for (int t = 0; t + 1 < ntiles; t++) {
            if constexpr (TMA) {
                // The barrier frees the stage; the wait lets the copy start first.
                __syncthreads();
                load_tile(t + NST - 2);
                arrived(t + 1);
                if (stale(t + 1)) __syncthreads();
            } else {
                cp_async_wait<NST - 4>(); // tile t+1
                arrived(t + 1);
                __syncthreads();
                load_tile(t + NST - 2);
            }
            if constexpr (ROLE == 0) {
                issue_qk(s, t + 1, false);
                issue_pv(t);
                wg_wait<1>(); // S of tile t+1 (groups complete in order)
                wg_pin(s);
                softmax(s, t + 1, c0, c1);
                wg_wait<0>(); // P·V of tile t: O and p are ours again
                wg_pin(o);
                wg_pin(p);
                rescale(c0, c1);
                to_p(s);
            } else {
                wg_wait<0>(); // S of tile t, P·V of tile t-1
                wg_pin(s);
                wg_pin(o);
                wg_pin(p);
                softmax(s, t, c0, c1);
                rescale(c0, c1);
                to_p(s);
                issue_qk(s, t + 1, true);
                issue_pv(t);
            }
        }
        if constexpr (ROLE == 1) {
            wg_wait<0>();
            wg_pin(s);
            wg_pin(o);
            wg_pin(p);
            softmax(s, ntiles - 1, c0, c1);
            rescale(c0, c1);
            to_p(s);
        }
        issue_pv(ntiles - 1);
        wg_wait<0>();
        wg_pin(o);
        wg_pin(p);
    };
    // One guard around all of it: every path that issues an MMA also waits
    // for it (separate guards leave ptxas paths that seem not to, and it
    // serializes the MMAs).
    // TMA: a warpgroup whose rows all lie past the last query (in the last
    // query tile) only keeps the barriers; thread 0, which issues the
    // copies, is in warpgroup 0, whose rows never do.
    auto idle = [&]() {
        arrived(0);
        __syncthreads();
        for (int t = 0; t + 1 < ntiles; t++) {
            __syncthreads();
            arrived(t + 1);
            if (stale(t + 1)) __syncthreads();
        }
    };
    if (ntiles > 0) {
        if (TMA && wrow >= nq) idle();
        else if (wg == 0) run(Int<0>{});
        else run(Int<1>{});
    }
    cp_async_wait<0>();

#pragma unroll
    for (int half = 0; half < 2; half++) {
        const int r = half ? r1 : r0;
        const float lsum = quad_sum(half ? l1 : l0);
        if (r >= nq) continue;
        float* dst;
        unsigned* dbf = nullptr;
        float mul = 1.f;
        if (nsplit == 1) {
            const i64 at = (i64)r * ld + (i64)hd * HD;
            dst = out + at;
            if (obf) dbf = obf + at / 2;
            mul = lsum > 0.f ? 1.f / lsum : 0.f;
        } else {
            const i64 prow = ((i64)blockIdx.z * nq + r) * h + hd;
            dst = out + prow * HD;
            if (tg == 0) {
                pm[prow] = (half ? m1 : m0) * sl2;
                pl[prow] = lsum;
            }
        }
#pragma unroll
        for (int j = 0; j < 8; j++) {
            const int c = j * 8 + 2 * tg;
            const float x0 = o[4 * j + 2 * half] * mul, x1 = o[4 * j + 2 * half + 1] * mul;
            *(float2*)(dst + c) = make_float2(x0, x1);
            if (dbf) dbf[c / 2] = pack_bf16(x0, x1);
        }
    }
#endif
}

extern "C" __global__ void __launch_bounds__(256, 1) attn_wg_paged_bf(const float* __restrict__ q,
                                                                      const bf16_t* __restrict__ k,
                                                                      const bf16_t* __restrict__ v,
                                                                      const int* __restrict__ pages, int ps, int nq,
                                                                      int nk, int h, float scale, float* __restrict__ out,
                                                                      float* __restrict__ pm, float* __restrict__ pl,
                                                                      unsigned* __restrict__ obf) {
    pdl_wait();
    wg_paged<false, 2>(q, k, v, nullptr, nullptr, pages, ps, nq, nk, h, scale, out, pm, pl, obf);
}

// The same kernel with TMA copies: K and V come as tensor maps of the
// layer's arrays (3-D: h·64 columns, ps rows, pages; 64 × WK boxes in the
// 128-byte swizzle), and the page size must be at least WK. NWG warpgroups
// of 64 queries. Shared memory: the stages, 1 KB of alignment slack, and 8
// bytes a stage for its barrier (NWG = 3: a 1 KB slot for them, then Q, 8
// KB a warpgroup).
#define TMA_PAGED_KERNEL(NAME, NWG)                                                                                    \
    extern "C" __global__ void __launch_bounds__(128 * NWG, 1)                                                         \
        NAME(const float* __restrict__ q, const __grid_constant__ TensorMap tk, const __grid_constant__ TensorMap tv,   \
             const int* __restrict__ pages, int ps, int nq, int nk, int h, float scale, float* __restrict__ out,        \
             float* __restrict__ pm, float* __restrict__ pl, unsigned* __restrict__ obf) {                              \
        pdl_wait();                                                                                                     \
        wg_paged<true, NWG>(q, nullptr, nullptr, &tk, &tv, pages, ps, nq, nk, h, scale, out, pm, pl, obf);             \
    }
TMA_PAGED_KERNEL(attn_tma_paged_bf, 2)
// Three warpgroups (192 queries a block), FlashAttention-3's layout for
// head dim 64. It needs key splits to fill the GPU (96 blocks for one
// frame's 1005 queries × 16 heads).
TMA_PAGED_KERNEL(attn_tma3_paged_bf, 3)
