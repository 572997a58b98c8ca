// Exact fp32 attention for a few queries over many keys (the camera head:
// one query per frame over its growing cache of every earlier frame). The
// query-per-thread kernel in attention.cu leaves all but one thread of a
// block idle there and walks the keys serially, which grows with the
// stream. Here a block of 8 warps serves one (batch, query, head): warps
// take keys in turn, lanes hold D/32 dims each, a key's score is a warp
// sum, and the warps' online-softmax states are merged at the end. q, k, v
// and out are [B, N, H, D].
#define DEC_WARPS 8

template <int D>
__device__ __forceinline__ void attn_decode(const float* __restrict__ q, const float* __restrict__ k,
                                            const float* __restrict__ v, int nq, int nk, int h, float scale,
                                            float* __restrict__ out) {
    constexpr int E = D / 32;
    __shared__ float sm[DEC_WARPS], sl[DEC_WARPS];
    __shared__ float sacc[DEC_WARPS][D];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const i64 row = blockIdx.x / h; // b·nq + query
    const int hd = blockIdx.x % h;
    const i64 b = row / nq;
    const i64 ld = (i64)h * D;
    const float sl2 = scale * 1.4426950408889634f; // softmax in base 2, as attention.cu

    float qr[E], acc[E];
#pragma unroll
    for (int e = 0; e < E; e++) {
        qr[e] = q[row * ld + (i64)hd * D + lane * E + e] * sl2;
        acc[e] = 0.f;
    }
    float m = -INFINITY, l = 0.f;
    for (int j = warp; j < nk; j += DEC_WARPS) {
        const i64 off = (b * nk + j) * ld + (i64)hd * D + lane * E;
        float s = 0.f;
#pragma unroll
        for (int e = 0; e < E; e++) s = fmaf(qr[e], k[off + e], s);
        s = warp_sum(s);
        const float mn = fmaxf(m, s);
        const float c = exp2f(m - mn), p = exp2f(s - mn); // c is 0 for the first key
        l = l * c + p;
#pragma unroll
        for (int e = 0; e < E; e++) acc[e] = fmaf(p, v[off + e], acc[e] * c);
        m = mn;
    }
    if (lane == 0) {
        sm[warp] = m;
        sl[warp] = l;
    }
#pragma unroll
    for (int e = 0; e < E; e++) sacc[warp][lane * E + e] = acc[e];
    __syncthreads();
    if (warp != 0) return;
    float mx = -INFINITY;
#pragma unroll
    for (int w = 0; w < DEC_WARPS; w++) mx = fmaxf(mx, sm[w]);
    float den = 0.f, num[E];
#pragma unroll
    for (int e = 0; e < E; e++) num[e] = 0.f;
    if (mx != -INFINITY) {
#pragma unroll
        for (int w = 0; w < DEC_WARPS; w++) {
            const float f = exp2f(sm[w] - mx); // 0 for a warp that had no key
            den = fmaf(f, sl[w], den);
#pragma unroll
            for (int e = 0; e < E; e++) num[e] = fmaf(f, sacc[w][lane * E + e], num[e]);
        }
    }
    const float inv = den > 0.f ? 1.f / den : 0.f;
#pragma unroll
    for (int e = 0; e < E; e++) out[row * ld + (i64)hd * D + lane * E + e] = num[e] * inv;
}

#define ATTN_DECODE(D)                                                                                        \
    extern "C" __global__ void __launch_bounds__(DEC_WARPS * 32) attn_decode_f32_d##D(                         \
        const float* q, const float* k, const float* v, int nq, int nk, int h, float scale, float* out) {      \
        pdl_wait();                                                                                            \
        attn_decode<D>(q, k, v, nq, nk, h, scale, out);                                                        \
    }
ATTN_DECODE(32)
ATTN_DECODE(64)
ATTN_DECODE(128)
