// wgcheck: a standalone check of the Hopper paged attention kernel
// (attn_wg_paged_bf in kernels/attention_hopper.cu), built with nvcc and no Go:
// single-tile probes of the wgmma operand layouts (Q·Kᵀ with K-major K,
// P·V with MN-major V, both 128-byte swizzled) and the whole kernel against
// a double-precision CPU reference, then its time on a full-size cache.
// Run by cuda/scripts/run.sh's wgcheck stage:
//   nvcc -std=c++17 -O2 -arch=sm_90a -o wgcheck cuda/dev/wgcheck.cu -lcuda && ./wgcheck
// Both loaders are checked: attn_wg_paged_bf (cp.async) and, for pages of at
// least 128 rows, attn_tma_paged_bf (TMA copies from tensor maps).
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "../kernels/common.cuh"
// The production Hopper kernels and the lab's two-warpgroup TMA kernel.
#include "kernels/attention_lab.cu"

#define CK(x)                                                                          \
    do {                                                                               \
        cudaError_t e_ = (x);                                                          \
        if (e_ != cudaSuccess) {                                                       \
            fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
            exit(2);                                                                   \
        }                                                                              \
    } while (0)

// Stages a 128×64 bf16 tile (rows of 128 bytes) into the swizzled layout.
// (The probes' bodies exist only in the sm_90a device pass, like the kernel's.)
#ifdef __CUDA_ARCH_FEAT_SM90_ALL
__device__ void stage_tile(unsigned char* sm, const bf16_t* src) {
    for (int idx = threadIdx.x; idx < 1024; idx += blockDim.x) {
        const int j = idx >> 3, c = idx & 7;
        *(uint4*)(sm + j * 128 + ((c ^ (j & 7)) << 4)) = *(const uint4*)(src + j * 64 + c * 8);
    }
    fence_proxy_async();
    __syncthreads();
}
#endif

// S[64][128] = Q[64][64]·K[128][64]ᵀ by one warpgroup.
__global__ void probe_qk(const float* q, const bf16_t* k, float* s, unsigned lbo, unsigned sbo) {
#ifdef __CUDA_ARCH_FEAT_SM90_ALL
    __shared__ __align__(1024) unsigned char sm[WTILE];
    stage_tile(sm, k);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, tg = lane & 3;
    const int r0 = warp * 16 + g, r1 = r0 + 8;
    unsigned qa[4][4];
    for (int kk = 0; kk < 4; kk++) {
        const int c = kk * 16 + 2 * tg;
        qa[kk][0] = pack_bf16(q[r0 * 64 + c], q[r0 * 64 + c + 1]);
        qa[kk][1] = pack_bf16(q[r1 * 64 + c], q[r1 * 64 + c + 1]);
        qa[kk][2] = pack_bf16(q[r0 * 64 + c + 8], q[r0 * 64 + c + 9]);
        qa[kk][3] = pack_bf16(q[r1 * 64 + c + 8], q[r1 * 64 + c + 9]);
    }
    float d[64];
    for (int i = 0; i < 64; i++) d[i] = 0.f;
    wg_fence();
#pragma unroll
    for (int kk = 0; kk < 4; kk++) wgmma_n128_k(d, qa[kk], wg_desc(smem_addr(sm) + kk * 32, lbo, sbo), kk > 0);
    wg_commit();
    wg_wait<0>();
    wg_pin(d);
    for (int j = 0; j < 16; j++)
        for (int e = 0; e < 2; e++) {
            s[r0 * 128 + 8 * j + 2 * tg + e] = d[4 * j + e];
            s[r1 * 128 + 8 * j + 2 * tg + e] = d[4 * j + 2 + e];
        }
#endif
}

// O[64][64] = P[64][128]·V[128][64] by one warpgroup.
__global__ void probe_pv(const float* p, const bf16_t* v, float* o, unsigned lbo, unsigned sbo) {
#ifdef __CUDA_ARCH_FEAT_SM90_ALL
    __shared__ __align__(1024) unsigned char sm[WTILE];
    stage_tile(sm, v);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, tg = lane & 3;
    const int r0 = warp * 16 + g, r1 = r0 + 8;
    unsigned pa[8][4];
    for (int kk = 0; kk < 8; kk++) {
        const int c = kk * 16 + 2 * tg;
        pa[kk][0] = pack_bf16(p[r0 * 128 + c], p[r0 * 128 + c + 1]);
        pa[kk][1] = pack_bf16(p[r1 * 128 + c], p[r1 * 128 + c + 1]);
        pa[kk][2] = pack_bf16(p[r0 * 128 + c + 8], p[r0 * 128 + c + 9]);
        pa[kk][3] = pack_bf16(p[r1 * 128 + c + 8], p[r1 * 128 + c + 9]);
    }
    float d[32];
    for (int i = 0; i < 32; i++) d[i] = 0.f;
    wg_fence();
#pragma unroll
    for (int kk = 0; kk < 8; kk++) wgmma_n64_mn(d, pa[kk], wg_desc(smem_addr(sm) + kk * 2048, lbo, sbo), 1);
    wg_commit();
    wg_wait<0>();
    wg_pin(d);
    for (int j = 0; j < 8; j++)
        for (int e = 0; e < 2; e++) {
            o[r0 * 64 + 8 * j + 2 * tg + e] = d[4 * j + e];
            o[r1 * 64 + 8 * j + 2 * tg + e] = d[4 * j + 2 + e];
        }
#endif
}

// A small normal generator (xorshift64* and Box–Muller): no <random>, so the
// file also builds with older host compilers.
struct Rng {
    unsigned long long x;
    double uniform() {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        return ((x * 2685821657736338717ull) >> 11) * (1.0 / 9007199254740992.0);
    }
    float normal() {
        const double u = std::max(uniform(), 1e-300), w = uniform();
        return (float)(std::sqrt(-2 * std::log(u)) * std::cos(6.283185307179586 * w));
    }
};

static unsigned short to_bf(float f) {
    unsigned u;
    memcpy(&u, &f, 4);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (unsigned short)(u >> 16);
}
static float from_bf(unsigned short h) {
    unsigned u = (unsigned)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static float rbf(float f) { return from_bf(to_bf(f)); }

template <typename T>
static T* dev(const std::vector<T>& h) {
    T* d;
    CK(cudaMalloc(&d, h.size() * sizeof(T)));
    CK(cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
    return d;
}
template <typename T>
static std::vector<T> host(const T* d, size_t n) {
    std::vector<T> h(n);
    CK(cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
}

// ‖got−want‖/‖want‖
static double relerr(const std::vector<float>& got, const std::vector<double>& want) {
    double num = 0, den = 0;
    for (size_t i = 0; i < want.size(); i++) {
        const double d = got[i] - want[i];
        num += d * d;
        den += want[i] * want[i];
    }
    return std::sqrt(num / std::max(den, 1e-300));
}

static int failures = 0;
static void report(const char* what, double err, double tol) {
    const bool ok = err <= tol && std::isfinite(err);
    printf("%-58s rel err %.3g %s\n", what, err, ok ? "ok" : "FAIL");
    if (!ok) failures++;
}

static void probes(Rng& rng) {
    std::vector<float> q(64 * 64), p(64 * 128);
    std::vector<unsigned short> k(128 * 64);
    for (auto& x : q) x = rng.normal();
    for (auto& x : p) x = std::fabs(rng.normal());
    for (auto& x : k) x = to_bf(rng.normal());
    std::vector<double> s(64 * 128), o(64 * 64);
    for (int i = 0; i < 64; i++)
        for (int j = 0; j < 128; j++) {
            double a = 0;
            for (int c = 0; c < 64; c++) a += (double)rbf(q[i * 64 + c]) * from_bf(k[j * 64 + c]);
            s[i * 128 + j] = a;
        }
    for (int i = 0; i < 64; i++)
        for (int c = 0; c < 64; c++) {
            double a = 0;
            for (int j = 0; j < 128; j++) a += (double)rbf(p[i * 128 + j]) * from_bf(k[j * 64 + c]);
            o[i * 64 + c] = a;
        }
    float *dq = dev(q), *dp = dev(p), *ds, *dout;
    bf16_t* dk = dev(k);
    CK(cudaMalloc(&ds, s.size() * 4));
    CK(cudaMalloc(&dout, o.size() * 4));
    const unsigned variants[][2] = {{16, 1024}, {1024, 16}, {0, 1024}, {8192, 1024}};
    for (auto& vr : variants) {
        char what[128];
        probe_qk<<<1, 128>>>(dq, dk, ds, vr[0], vr[1]);
        CK(cudaDeviceSynchronize());
        snprintf(what, sizeof what, "probe Q·Kᵀ K-major  lbo %u sbo %u", vr[0], vr[1]);
        const double e1 = relerr(host(ds, s.size()), s);
        printf("%-58s rel err %.3g\n", what, e1);
        probe_pv<<<1, 128>>>(dp, dk, dout, vr[0], vr[1]);
        CK(cudaDeviceSynchronize());
        snprintf(what, sizeof what, "probe P·V  MN-major lbo %u sbo %u", vr[0], vr[1]);
        const double e2 = relerr(host(dout, o.size()), o);
        printf("%-58s rel err %.3g\n", what, e2);
        if (vr[0] == 16) {
            report("probe Q·Kᵀ with the kernel's descriptor", e1, 1e-5);
            report("probe P·V with the kernel's descriptor", e2, 1e-5);
        }
    }
    CK(cudaFree(dq)); CK(cudaFree(dp)); CK(cudaFree(ds)); CK(cudaFree(dout)); CK(cudaFree(dk));
}

// One paged case: frames pages of ps patch rows in a scrambled page order,
// then `specials` rows in a partial last page; nq queries, h heads of 64.
struct Case {
    int ps, frames, specials, nq, h, splits;
    bool all; // check every row (else a sample) and time it
    bool tma; // attn_tma_paged_bf instead of attn_wg_paged_bf
};

// The tensor map attn_tma_paged_bf reads one layer's K or V array through:
// [pages][ps][ld] bf16, 64 × 128 boxes, 128-byte swizzle, zeros past ps.
static TensorMap tensor_map(const void* base, int ld, int ps, int pages) {
    CUtensorMap m;
    const cuuint64_t dims[3] = {(cuuint64_t)ld, (cuuint64_t)ps, (cuuint64_t)pages};
    const cuuint64_t strides[2] = {(cuuint64_t)ld * 2, (cuuint64_t)ps * ld * 2};
    const cuuint32_t box[3] = {64, WK, 1}, es[3] = {1, 1, 1};
    CUresult r = cuTensorMapEncodeTiled(&m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, const_cast<void*>(base), dims, strides, box,
                                        es, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                        CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS) {
        fprintf(stderr, "cuTensorMapEncodeTiled: error %d\n", (int)r);
        exit(2);
    }
    TensorMap t;
    memcpy(&t, &m, sizeof t);
    return t;
}

static void paged(Rng& rng, Case c, bool timeit) {
    const int ld = c.h * 64, npages = c.frames + 2;
    std::vector<unsigned short> k((size_t)npages * c.ps * ld), v(k.size());
    for (auto& x : k) x = to_bf(rng.normal());
    for (auto& x : v) x = to_bf(rng.normal());
    std::vector<int> table;
    for (int f = 0; f < c.frames; f++) table.push_back((f * 3 + 1) % (c.frames + 1));
    table.push_back(c.frames + 1);
    // Rows past the keys in the last page are stale: NaN must not leak in.
    for (size_t i = ((size_t)(c.frames + 1) * c.ps + c.specials) * ld; i < k.size(); i++) k[i] = v[i] = 0x7fc0;
    const int nk = c.frames * c.ps + c.specials;
    std::vector<float> q((size_t)c.nq * ld);
    for (auto& x : q) x = rng.normal();
    const float scale = 0.125f;

    float *dq = dev(q), *dout, *dpm = nullptr, *dpl = nullptr;
    bf16_t *dk = dev(k), *dv = dev(v);
    int* dt = dev(table);
    const size_t rowsh = (size_t)c.nq * c.h;
    CK(cudaMalloc(&dout, (size_t)c.splits * rowsh * 64 * 4));
    if (c.splits > 1) {
        CK(cudaMalloc(&dpm, c.splits * rowsh * 4));
        CK(cudaMalloc(&dpl, c.splits * rowsh * 4));
    }
    // WG_TMA3=1: the TMA cases run attn_tma3_paged_bf (three warpgroups, Q in shared memory).
    const bool three = c.tma && getenv("WG_TMA3") != nullptr;
    // -DATTN_ROWSUM_MMA=1: the bf16 kernels' 1 KB of ones after the rest (and
    // the two-warpgroup TMA kernel's barrier slot before it).
    const int smem = (three ? WSTAGES_TMA * 2 * WTILE + 1024 + 3 * 8192 + 1024
                      : c.tma ? WSTAGES_TMA * (2 * WTILE + 8) + 1024 : WSTAGES * 2 * WTILE + 1024) +
                     (ATTN_ROWSUM_MMA ? 2048 : 0);
    CK(cudaFuncSetAttribute(attn_wg_paged_bf, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    CK(cudaFuncSetAttribute(attn_tma_paged_bf, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    CK(cudaFuncSetAttribute(attn_tma3_paged_bf, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    const int wq = three ? 192 : WQ;
    dim3 grid((c.nq + wq - 1) / wq, c.h, c.splits);
    TensorMap tk{}, tv{};
    if (c.tma) {
        tk = tensor_map(dk, ld, c.ps, npages);
        tv = tensor_map(dv, ld, c.ps, npages);
    }
    // -DATTN_FOLD_COMBINE=1: with split keys the kernels also merge the
    // splits into dfin (checked below beside the host's merge).
    unsigned* dcnt = nullptr;
    float* dfin = nullptr;
#if ATTN_FOLD_COMBINE
    if (c.splits > 1) {
        CK(cudaMalloc(&dcnt, (size_t)grid.x * grid.y * 4));
        CK(cudaMemset(dcnt, 0, (size_t)grid.x * grid.y * 4));
        CK(cudaMalloc(&dfin, rowsh * 64 * 4));
    }
#define WG_FOLD , dcnt, dfin
#else
#define WG_FOLD
#endif
    auto run = [&] {
        if (three) attn_tma3_paged_bf<<<grid, 384, smem>>>(dq, tk, tv, dt, c.ps, c.nq, nk, c.h, scale, dout, dpm, dpl, nullptr WG_FOLD);
        else if (c.tma) attn_tma_paged_bf<<<grid, 256, smem>>>(dq, tk, tv, dt, c.ps, c.nq, nk, c.h, scale, dout, dpm, dpl, nullptr WG_FOLD);
        else attn_wg_paged_bf<<<grid, 256, smem>>>(dq, dk, dv, dt, c.ps, c.nq, nk, c.h, scale, dout, dpm, dpl, nullptr WG_FOLD);
    };
    run();
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    auto part = host(dout, (size_t)c.splits * rowsh * 64);
    std::vector<float> pmh, plh;
    if (c.splits > 1) {
        pmh = host(dpm, c.splits * rowsh);
        plh = host(dpl, c.splits * rowsh);
    }

    std::vector<int> rows;
    if (c.all) {
        for (int r = 0; r < c.nq; r++) rows.push_back(r);
    } else {
        for (int r : {0, 1, 7, 8, 15, 16, 63, 64, 100, 127, 128, 500, 999, c.nq - 1}) rows.push_back(std::min(r, c.nq - 1));
    }
    std::vector<float> got;
    std::vector<double> want;
    std::vector<double> sc(nk);
    for (int r : rows)
        for (int hd = 0; hd < c.h; hd++) {
            double mx = -1e300;
            for (int j = 0; j < nk; j++) {
                const int pg = table[j / c.ps], row = j % c.ps;
                const unsigned short* kr = &k[((size_t)pg * c.ps + row) * ld + hd * 64];
                double a = 0;
                for (int d = 0; d < 64; d++) a += (double)rbf(q[(size_t)r * ld + hd * 64 + d]) * from_bf(kr[d]);
                sc[j] = a * scale;
                mx = std::max(mx, sc[j]);
            }
            double sum = 0;
            std::vector<double> acc(64, 0.0);
            for (int j = 0; j < nk; j++) {
                const double w = std::exp(sc[j] - mx);
                sum += w;
                const int pg = table[j / c.ps], row = j % c.ps;
                const unsigned short* vr = &v[((size_t)pg * c.ps + row) * ld + hd * 64];
                for (int d = 0; d < 64; d++) acc[d] += w * from_bf(vr[d]);
            }
            for (int d = 0; d < 64; d++) want.push_back(acc[d] / sum);
            // The kernel's row, merged over the splits as attn_combine does.
            const size_t prow = (size_t)r * c.h + hd;
            if (c.splits == 1) {
                for (int d = 0; d < 64; d++) got.push_back(part[prow * 64 + d]);
            } else {
                double M = -1e300;
                for (int z = 0; z < c.splits; z++)
                    if (plh[z * rowsh + prow] > 0) M = std::max(M, (double)pmh[z * rowsh + prow]);
                double den = 0;
                std::vector<double> num(64, 0.0);
                for (int z = 0; z < c.splits; z++) {
                    if (plh[z * rowsh + prow] <= 0) continue;
                    const double w = std::exp2(pmh[z * rowsh + prow] - M);
                    den += w * plh[z * rowsh + prow];
                    for (int d = 0; d < 64; d++) num[d] += w * part[(z * rowsh + prow) * 64 + d];
                }
                for (int d = 0; d < 64; d++) got.push_back((float)(num[d] / den));
            }
        }
    char what[160];
    snprintf(what, sizeof what, "%s ps %d frames %d specials %d nq %d h %d splits %d", c.tma ? "tma" : "paged", c.ps, c.frames,
             c.specials, c.nq, c.h, c.splits);
    report(what, relerr(got, want), 1e-2);
    if (dfin) {
        const auto fin = host(dfin, rowsh * 64);
        std::vector<float> folded;
        for (int r : rows)
            for (int hd = 0; hd < c.h; hd++)
                for (int d = 0; d < 64; d++) folded.push_back(fin[((size_t)r * c.h + hd) * 64 + d]);
        report((std::string(what) + " folded merge").c_str(), relerr(folded, want), 1e-2);
    }

    if (timeit) {
        cudaEvent_t a, b;
        CK(cudaEventCreate(&a));
        CK(cudaEventCreate(&b));
        const int reps = 50;
        for (int i = 0; i < 5; i++) run();
        CK(cudaEventRecord(a));
        for (int i = 0; i < reps; i++) run();
        CK(cudaEventRecord(b));
        CK(cudaEventSynchronize(b));
        float ms;
        CK(cudaEventElapsedTime(&ms, a, b));
        ms /= reps;
        printf("time %s nq %d keys %d h %d splits %d: %.3f ms, %.1f TFLOP/s\n", three ? "attn_tma3_paged_bf" : c.tma ? "attn_tma_paged_bf" : "attn_wg_paged_bf", c.nq, nk,
               c.h, c.splits, ms,
               4.0 * c.nq * (double)nk * c.h * 64 / (ms * 1e-3) / 1e12);
    }
    CK(cudaFree(dq)); CK(cudaFree(dout)); CK(cudaFree(dk)); CK(cudaFree(dv)); CK(cudaFree(dt));
    if (dpm) { CK(cudaFree(dpm)); CK(cudaFree(dpl)); }
    if (dfin) { CK(cudaFree(dcnt)); CK(cudaFree(dfin)); }
}

int main() {
    Rng rng{0x9e3779b97f4a7c15ull};
    probes(rng);
    paged(rng, {37, 9, 20, 200, 2, 1, true}, false);   // pages smaller than a tile
    paged(rng, {37, 9, 20, 200, 2, 3, true}, false);   // split keys
    paged(rng, {130, 7, 5, 77, 1, 1, true}, false);    // tiles straddling pages
    paged(rng, {37, 2, 5, 50, 1, 1, true}, false);     // one tile
    paged(rng, {37, 3, 20, 40, 2, 2, true}, false);    // one tile a split
    paged(rng, {130, 7, 5, 77, 1, 1, true, true}, false);     // a page: two tiles, the second of 2 rows
    paged(rng, {257, 3, 200, 150, 2, 1, true, true}, false);  // partial last tile inside the last page
    paged(rng, {130, 7, 100, 200, 2, 3, true, true}, false);  // split
    paged(rng, {128, 4, 128, 130, 1, 2, true, true}, false);  // whole tiles, full last page
    paged(rng, {200, 0, 60, 64, 1, 1, true, true}, false);    // one page, one tile
    // WG_ONLY_TMA=1 skips the full-size check and time of the cp.async kernel.
    if (getenv("WG_ONLY_TMA") == nullptr) paged(rng, {999, 72, 432, 1005, 16, 1, false}, true);
    // WG_SPLITS="1 4" times the TMA kernel at these key splits (default 1).
    const char* sp = getenv("WG_SPLITS");
    std::string splits = sp ? sp : "1";
    for (size_t at = 0; at < splits.size();) {
        const int n = atoi(splits.c_str() + at);
        if (n > 0) paged(rng, {999, 72, 432, 1005, 16, n, false, true}, true);
        const size_t sp2 = splits.find(' ', at);
        if (sp2 == std::string::npos) break;
        at = sp2 + 1;
    }
    printf("%s\n", failures ? "wgcheck: FAIL" : "wgcheck: PASS");
    return failures ? 1 : 0;
}
