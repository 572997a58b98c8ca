// Flash-style attention with an online softmax in fp32 (exp2 domain), one
// thread per query, K/V tiles staged through shared memory. The key range of
// a (query tile, batch·head) can be split over gridDim.z blocks; partial
// results are then merged by attn_combine. The same body serves dense K/V
// [B, Nk, H, D] and the paged store [pages, page_size, H, D] read through a
// page table (pages in order; only the last page may be partial, nk says
// how many keys there are in all).
#define BQ 128
#define TK 32

template <int D, typename KT, bool PAGED>
__device__ __forceinline__ void attn_body(const float* __restrict__ q, const KT* __restrict__ k, const KT* __restrict__ v,
                                          const int* __restrict__ pages, int ps, int nq, int nk, int h, float scale,
                                          float* __restrict__ out, float* __restrict__ pm, float* __restrict__ pl) {
    __shared__ float ks[TK][D];
    __shared__ float vs[TK][D];
    const int bh = blockIdx.y, b = bh / h, hd = bh % h;
    const int qi = blockIdx.x * BQ + threadIdx.x;
    const bool active = qi < nq;
    const i64 ld = (i64)h * D;

    // Key range of this split (a multiple of TK wide).
    const int nsplit = gridDim.z;
    int chunk = (nk + nsplit - 1) / nsplit;
    chunk = (chunk + TK - 1) / TK * TK;
    const int k0 = blockIdx.z * chunk;
    const int k1 = min(nk, k0 + chunk);

    const float sl2 = scale * 1.4426950408889634f; // softmax in base 2
    float qr[D], acc[D];
    const float* qp = q + ((i64)b * nq + (active ? qi : 0)) * ld + (i64)hd * D;
#pragma unroll
    for (int d = 0; d < D; d++) { qr[d] = active ? qp[d] * sl2 : 0.f; acc[d] = 0.f; }
    float m = -INFINITY, l = 0.f;

    for (int t0 = k0; t0 < k1; t0 += TK) {
        const int nt = min(TK, k1 - t0);
        __syncthreads();
        for (int e = threadIdx.x; e < TK * D; e += BQ) {
            const int j = e / D, d = e % D;
            float kv = 0.f, vv = 0.f;
            if (j < nt) {
                const int g = t0 + j;
                i64 row;
                if (PAGED) row = (i64)pages[g / ps] * ps + (g % ps);
                else row = (i64)b * nk + g;
                const i64 off = row * ld + (i64)hd * D + d;
                kv = load_f(k, off);
                vv = load_f(v, off);
            }
            ks[j][d] = kv;
            vs[j][d] = vv;
        }
        __syncthreads();
        if (!active) continue;
        float s[TK];
        float tmax = -INFINITY;
#pragma unroll
        for (int j = 0; j < TK; j++) {
            float dot = 0.f;
#pragma unroll
            for (int d = 0; d < D; d++) dot = fmaf(qr[d], ks[j][d], dot);
            s[j] = j < nt ? dot : -INFINITY;
            tmax = fmaxf(tmax, s[j]);
        }
        const float mnew = fmaxf(m, tmax);
        const float corr = exp2f(m - mnew); // 0 when m was -inf
        l *= corr;
#pragma unroll
        for (int d = 0; d < D; d++) acc[d] *= corr;
#pragma unroll
        for (int j = 0; j < TK; j++) {
            const float p = exp2f(s[j] - mnew);
            l += p;
#pragma unroll
            for (int d = 0; d < D; d++) acc[d] = fmaf(p, vs[j][d], acc[d]);
        }
        m = mnew;
    }
    if (!active) return;
    const i64 orow = (i64)b * nq + qi;
    if (nsplit == 1) {
        const float inv = l > 0.f ? 1.f / l : 0.f;
        float* op = out + orow * ld + (i64)hd * D;
#pragma unroll
        for (int d = 0; d < D; d++) op[d] = acc[d] * inv;
    } else {
        const i64 rows = (i64)gridDim.y / h * nq; // B·Nq
        const i64 prow = ((i64)blockIdx.z * rows + orow) * h + hd;
        float* op = out + prow * D;
#pragma unroll
        for (int d = 0; d < D; d++) op[d] = acc[d];
        pm[prow] = m;
        pl[prow] = l;
    }
}

// Merges nsplit partial results: po [nsplit, rows·H, D], pm/pl [nsplit, rows·H] -> out [rows·H, D].
extern "C" __global__ void attn_combine(float* out, const float* po, const float* pm, const float* pl, i64 rowsh, int d, int nsplit) {
    pdl_wait();
    const i64 n = rowsh * d;
    for (i64 t = (i64)blockIdx.x * blockDim.x + threadIdx.x; t < n; t += (i64)gridDim.x * blockDim.x) {
        const i64 r = t / d;
        float mx = -INFINITY;
        for (int s = 0; s < nsplit; s++) mx = fmaxf(mx, pm[s * rowsh + r]);
        float num = 0.f, den = 0.f;
        if (mx != -INFINITY) {
            for (int s = 0; s < nsplit; s++) {
                const float w = exp2f(pm[s * rowsh + r] - mx);
                den += w * pl[s * rowsh + r];
                num += w * po[(s * rowsh + r) * d + (t % d)];
            }
        }
        out[t] = den > 0.f ? num / den : 0.f;
    }
}

// attn_combine for heads of 64 (cuda.warp_combine): a warp a (row, head),
// two values a lane, so the splits' weights come once a row and no index
// is divided; each value is the same arithmetic in the same order as
// attn_combine's. obf, when set, also gets the output rounded to bf16 (two
// values a word) for the proj GEMM that reads it next.
extern "C" __global__ void attn_combine_d64(float* out, const float* po, const float* pm, const float* pl, i64 rowsh, int nsplit,
                                            unsigned* obf) {
    pdl_wait();
    const int lane = threadIdx.x & 31;
    const i64 warps = ((i64)gridDim.x * blockDim.x) >> 5;
    for (i64 r = ((i64)blockIdx.x * blockDim.x + threadIdx.x) >> 5; r < rowsh; r += warps) {
        float mx = -INFINITY;
        for (int s = 0; s < nsplit; s++) mx = fmaxf(mx, pm[s * rowsh + r]);
        float num0 = 0.f, num1 = 0.f, den = 0.f;
        if (mx != -INFINITY) {
            for (int s = 0; s < nsplit; s++) {
                const float w = exp2f(pm[s * rowsh + r] - mx);
                den += w * pl[s * rowsh + r];
                const float2 o = ((const float2*)(po + (s * rowsh + r) * 64))[lane];
                num0 += w * o.x;
                num1 += w * o.y;
            }
        }
        const float y0 = den > 0.f ? num0 / den : 0.f, y1 = den > 0.f ? num1 / den : 0.f;
        ((float2*)(out + r * 64))[lane] = make_float2(y0, y1);
        if (obf) obf[r * 32 + lane] = pack_bf16(y0, y1);
    }
}

#define ATTN_DENSE(D)                                                                                             \
    extern "C" __global__ void __launch_bounds__(BQ) attn_dense_f32_d##D(                                         \
        const float* q, const float* k, const float* v, int nq, int nk, int h, float scale, float* out, float* pm, \
        float* pl) {                                                                                              \
        pdl_wait();                                                                                               \
        attn_body<D, float, false>(q, k, v, nullptr, 1, nq, nk, h, scale, out, pm, pl);                           \
    }
#define ATTN_PAGED(D, T, NAME)                                                                                     \
    extern "C" __global__ void __launch_bounds__(BQ) attn_paged_##NAME##_d##D(                                     \
        const float* q, const T* k, const T* v, const int* pages, int ps, int nq, int nk, int h, float scale,      \
        float* out, float* pm, float* pl) {                                                                        \
        pdl_wait();                                                                                                \
        attn_body<D, T, true>(q, k, v, pages, ps, nq, nk, h, scale, out, pm, pl);                                  \
    }

// Each instantiation is compiled only when asked for (module "attention+NAME"
// defines WANT_NAME): the unrolled fp32 bodies are slow to compile, and a run
// needs one or two of them.
#ifdef WANT_attn_dense_f32_d32
ATTN_DENSE(32)
#endif
#ifdef WANT_attn_dense_f32_d64
ATTN_DENSE(64)
#endif
#ifdef WANT_attn_dense_f32_d128
ATTN_DENSE(128)
#endif
#ifdef WANT_attn_paged_bf_d64
ATTN_PAGED(64, bf16_t, bf)
#endif
#ifdef WANT_attn_paged_f32_d64
ATTN_PAGED(64, float, f32)
#endif
#ifdef WANT_attn_paged_bf_d128
ATTN_PAGED(128, bf16_t, bf)
#endif
#ifdef WANT_attn_paged_f32_d128
ATTN_PAGED(128, float, f32)
#endif
