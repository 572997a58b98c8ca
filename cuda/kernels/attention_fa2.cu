// Tensor-core flash attention for head dim 64 on every GPU: bf16 operands (as
// the reference's bf16 KV cache and autocast SDPA), fp32 online softmax and
// fp32 accumulation, mma.sync m16n8k16. The key range may be split over
// gridDim.z blocks, merged by attn_combine (attention.cu) exactly like the
// fp32 kernel's partial results. The portable fallback of the Hopper kernels
// (attention_hopper.cu) and the default elsewhere.

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
#include "fp8.cuh"

// FA2-style paged kernel: 128 queries per block, each of the 4 warps owns 32
// query rows (two m16 tiles), so every K and V fragment read from shared
// memory (ldmatrix, 16 bytes a lane) feeds two MMAs instead of one — the
// lab's 16-row kernel (cuda/dev) is bound by shared-memory bandwidth (one 256-byte B
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
// warps a scheduler, fixed-latency dependencies made many of the issue gaps):
// row maxima and sums as pairwise trees instead of 16-long chains, and the
// rescale of O and l skipped when no row of the warp raised its maximum
// (the factor would be exactly 1).
//
// F8 (paged): the FP8 cache (kvfp8.cu) on any GPU: k and v are its e4m3 K
// and transposed V arrays, kvs the layer's scales. Tiles never straddle a
// page (a page is ceil(ps/64) tiles from its start, as in the TMA kernels),
// so that a tile's keys are whole 16-key groups of the transposed V. The
// e4m3 values are widened exactly to fp16 (2^-8 of them, folded into the
// scales) and Q and P are fp16, on fp16 MMAs: no rounding beyond the
// cache's own. Shared memory rows are 80 bytes (64 and 16 of padding, which
// spares the fragment loads bank conflicts). A stale value in a tile's
// masked rows decodes to a finite number (e4m3 NaN is not one in fp16), so
// P = 0 cancels it.
// From sm_89 (F8_MMA) P·V takes e4m3 operands as they are, with no
// widening and half the MMAs: P is formed as 2^8 times the probabilities
// and rounded to e4m3 (its register order is the stored key order of Vᵀ,
// f8_key_pos), and each 32-key step is one m16n8k32. An e4m3 NaN is a NaN
// then, so the Vᵀ columns of a tile's masked keys are zeroed in shared
// memory first. Q·Kᵀ stays on fp16 MMAs: Q rounded to e4m3 was most of the
// FP8 path's error, and Q held as two e4m3 parts (as the Hopper kernel
// does) took twice the e4m3 MMAs and was the slower (NOTES.md).
#define F8ROW 80
template <int STAGES, bool PAGED, bool TREE = false, bool F8 = false>
__device__ __forceinline__ void fa_attn(const float* __restrict__ q, const bf16_t* __restrict__ k,
                                        const bf16_t* __restrict__ v, const int* __restrict__ pages, int ps, int nq,
                                        int nk, int h, float scale, float* __restrict__ out, float* __restrict__ pm,
                                        float* __restrict__ pl, unsigned* __restrict__ obf,
                                        const float* __restrict__ kvs = nullptr) {
    static_assert(!F8 || PAGED, "the FP8 cache is paged");
    constexpr bool NAT = F8 && F8_MMA; // e4m3 MMAs
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
    int ntiles = k1 > k0 ? (k1 - k0 + MK - 1) / MK : 0;
    // F8: tiles [tb, tb + ntiles) of the (page, part) sequence, tpp parts a
    // page, the last page holding `last` rows; pages are rowsPad rows apart.
    const int tpp = (ps + MK - 1) / MK, npg = (nk + ps - 1) / ps, last = nk - (npg - 1) * ps;
    const int rowsPad = (ps + 15) & ~15;
    int tb = 0;
    if constexpr (F8) {
        const int total = (npg - 1) * tpp + (last + MK - 1) / MK;
        const int per = (total + nsplit - 1) / nsplit;
        tb = blockIdx.z * per;
        ntiles = max(0, min(total, tb + per) - tb);
    }
    // Keys of tile t (the rest of its rows are masked).
    auto tile_keys = [&](int t) {
        if constexpr (F8) {
            const int pi = (tb + t) / tpp, part = (tb + t) - pi * tpp;
            return min(MK, (pi == npg - 1 ? last : ps) - part * MK);
        } else {
            return k1 - (k0 + t * MK);
        }
    };

    // Thread tid copies rows (tid >> 3) + 16·i, i < 4, columns (tid & 7)·8.
    const int lrow = tid >> 3, lcol = (tid & 7) * 8;
    const bf16_t* kb = k + (i64)hd * HD + lcol;
    const bf16_t* vb = v + (i64)hd * HD + lcol;
    auto load_tile = [&](int t, int stage) {
        if constexpr (F8) {
            // Thread tid copies 16-byte chunk (tid & 3) of K rows and Vᵀ rows
            // (tid >> 2) + 32·i, i < 2.
            const int pi = (tb + t) / tpp, part = (tb + t) - pi * tpp, page = pages[pi];
            const unsigned char* k8 = (const unsigned char*)k;
            const unsigned char* v8 = (const unsigned char*)v;
            unsigned char* st = (unsigned char*)fa_smem + stage * (2 * MK * F8ROW);
            const int c = tid & 3;
#pragma unroll
            for (int i = 0; i < 2; i++) {
                const int j = (tid >> 2) + 32 * i, key = part * MK + j;
                const bool kin = key < ps, vin = part * MK + c * 16 < rowsPad;
                const i64 krow = (i64)page * rowsPad + (kin ? key : 0);
                cp_async16(st + j * F8ROW + c * 16, k8 + krow * ld + hd * HD + c * 16, kin);
                cp_async16(st + MK * F8ROW + j * F8ROW + c * 16,
                           v8 + ((i64)page * ld + hd * HD + j) * rowsPad + (vin ? part * MK + c * 16 : 0), vin);
            }
            cp_async_commit();
            return;
        }
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

    // Q as A fragments of two m16 tiles, rounded to bf16 like the reference's
    // q (fp16 on the widened FP8 cache).
    unsigned qa[2][4][4];
    int rows[2][2];
#pragma unroll
    for (int mt = 0; mt < 2; mt++) {
        rows[mt][0] = blockIdx.x * FQ + warp * 32 + mt * 16 + g;
        rows[mt][1] = rows[mt][0] + 8;
        const bool ok0 = rows[mt][0] < nq, ok1 = rows[mt][1] < nq;
        const float* q0 = q + (qrow0 + (ok0 ? rows[mt][0] : 0)) * ld + (i64)hd * HD;
        const float* q1 = q + (qrow0 + (ok1 ? rows[mt][1] : 0)) * ld + (i64)hd * HD;
        load_q_frags<F8>(qa[mt], q0, q1, ok0, ok1, tg);
    }
    // Softmax in base 2; F8: K's scale and the 2^8 of its fp16 form folded in.
    const float sl2 = F8 ? scale * 1.4426950408889634f * kvs[hd] * 256.f : scale * 1.4426950408889634f;
    const float vmul = F8 ? kvs[h + hd] * (NAT ? 1.f : 256.f) : 1.f; // V's, applied to O
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
        const bf16_t* kt = fa_smem + (t % STAGES) * (F8 ? MK * F8ROW : 2 * MK * SROW);
        const bf16_t* vt = kt + (F8 ? MK * F8ROW / 2 : MK * SROW);
        const unsigned char* k8t = (const unsigned char*)kt;
        const unsigned char* v8t = (const unsigned char*)vt;
        const int nt = tile_keys(t);
        if (NAT && nt < MK) {
            // Zero the stored positions of keys nt… in every Vᵀ row.
            unsigned char* vz = (unsigned char*)vt;
            for (int i = tid; i < (MK - nt) * HD; i += blockDim.x) {
                const int d = i & (HD - 1), key = nt + i / HD;
                vz[d * F8ROW + ((key & ~15) | f8_key_pos(key & 15))] = 0;
            }
            __syncthreads();
        }

        // S = Q·Kᵀ (raw, unscaled): 32 rows × 64 keys per warp.
        float s[2][8][4];
#pragma unroll
        for (int n = 0; n < 8; n++) {
            if constexpr (F8) {
#pragma unroll
                for (int mt = 0; mt < 2; mt++) s[mt][n][0] = s[mt][n][1] = s[mt][n][2] = s[mt][n][3] = 0.f;
                // Key n·8+g, dims kk·16 + 2tg, +1 and +8, +9.
                const unsigned char* kr = k8t + (n * 8 + g) * F8ROW + 2 * tg;
#pragma unroll
                for (int kk = 0; kk < 4; kk++) {
                    const unsigned x = *(const unsigned short*)(kr + kk * 16) | ((unsigned)*(const unsigned short*)(kr + kk * 16 + 8) << 16);
                    const unsigned b0 = f8x2_to_f16x2<false>(x), b1 = f8x2_to_f16x2<true>(x);
#pragma unroll
                    for (int mt = 0; mt < 2; mt++) mma_f16(s[mt][n], qa[mt][kk], b0, b1);
                }
                continue;
            }
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
            // NAT: P = 2^8 · probability, in e4m3's normal range (O/l cancels it).
            const float ms0 = mn0 * sl2 - (NAT ? 8.f : 0.f), ms1 = mn1 * sl2 - (NAT ? 8.f : 0.f);
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
        if constexpr (NAT) {
            // 32-key step kk: keys 2tg, 2tg+1, 8+2tg, 9+2tg of its two 16-key
            // groups, at the stored positions 4tg… and 16+4tg… (f8_key_pos).
#pragma unroll
            for (int kk = 0; kk < 2; kk++) {
                unsigned a[2][4];
#pragma unroll
                for (int mt = 0; mt < 2; mt++) {
                    const float(*x)[4] = s[mt] + 4 * kk;
                    a[mt][0] = f8_pack4(x[0][0], x[0][1], x[1][0], x[1][1]);
                    a[mt][1] = f8_pack4(x[0][2], x[0][3], x[1][2], x[1][3]);
                    a[mt][2] = f8_pack4(x[2][0], x[2][1], x[3][0], x[3][1]);
                    a[mt][3] = f8_pack4(x[2][2], x[2][3], x[3][2], x[3][3]);
                }
#pragma unroll
                for (int n = 0; n < 8; n++) {
                    const unsigned char* vr = v8t + (n * 8 + g) * F8ROW + kk * 32 + 4 * tg;
                    const unsigned b0 = *(const unsigned*)vr, b1 = *(const unsigned*)(vr + 16);
#pragma unroll
                    for (int mt = 0; mt < 2; mt++) mma_e4m3(o[mt][n], a[mt], b0, b1);
                }
            }
            continue;
        }
#pragma unroll
        for (int kk = 0; kk < 4; kk++) {
            if constexpr (F8) {
                // P in fp16; V's B fragment for dims n·8+g: keys 2tg, 2tg+1,
                // 8+2tg, 9+2tg of this 16-key group, which the transposed V
                // keeps as the 4 bytes at 4tg (f8_key_pos).
                unsigned a[2][4];
#pragma unroll
                for (int mt = 0; mt < 2; mt++) {
                    a[mt][0] = pack_f16(s[mt][2 * kk][0], s[mt][2 * kk][1]);
                    a[mt][1] = pack_f16(s[mt][2 * kk][2], s[mt][2 * kk][3]);
                    a[mt][2] = pack_f16(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
                    a[mt][3] = pack_f16(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
                }
#pragma unroll
                for (int n = 0; n < 8; n++) {
                    const unsigned x = *(const unsigned*)(v8t + (n * 8 + g) * F8ROW + kk * 16 + 4 * tg);
                    const unsigned b0 = f8x2_to_f16x2<false>(x), b1 = f8x2_to_f16x2<true>(x);
#pragma unroll
                    for (int mt = 0; mt < 2; mt++) mma_f16(o[mt][n], a[mt], b0, b1);
                }
                continue;
            }
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
            float mul = vmul;
            if (nsplit == 1) {
                const i64 at = (qrow0 + r) * ld + (i64)hd * HD;
                dst = out + at;
                if (obf) dbf = obf + at / 2;
                mul = lsum > 0.f ? vmul / lsum : 0.f;
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

// Two cp.async stages; tree reductions in the paged kernel, whose key ranges
// are long, and not in the dense one, where maxima still rise often
// (cuda/NOTES.md: the fa2 kernel).
extern "C" __global__ void __launch_bounds__(128, 2) attn_fa2_paged_bf(const float* q, const bf16_t* k, const bf16_t* v,
                                                                       const int* pages, int ps, int nq, int nk, int h,
                                                                       float scale, float* out, float* pm, float* pl,
                                                                       unsigned* obf) {
    pdl_wait();
    fa_attn<2, true, true>(q, k, v, pages, ps, nq, nk, h, scale, out, pm, pl, obf);
}

// The FP8 cache (kvfp8.cu's layout) on any GPU; kvs: the layer's scales.
extern "C" __global__ void __launch_bounds__(128, 2) attn_fa2_paged_f8(const float* q, const unsigned char* k,
                                                                       const unsigned char* v, const int* pages, int ps,
                                                                       int nq, int nk, int h, float scale, float* out,
                                                                       float* pm, float* pl, const float* kvs,
                                                                       unsigned* obf) {
    pdl_wait();
    fa_attn<2, true, true, true>(q, (const bf16_t*)k, (const bf16_t*)v, pages, ps, nq, nk, h, scale, out, pm, pl, obf,
                                 kvs);
}

// Dense attention of DINO and the frame blocks on bf16 copies of k and v
// (the reference's autocast SDPA rounds them to bf16 too).
extern "C" __global__ void __launch_bounds__(128, 2) attn_fa2_dense_bf(const float* q, const bf16_t* k, const bf16_t* v,
                                                                       int nq, int nk, int h, float scale, float* out,
                                                                       float* pm, float* pl, unsigned* obf) {
    pdl_wait();
    fa_attn<2, false>(q, k, v, nullptr, 1, nq, nk, h, scale, out, pm, pl, obf);
}
