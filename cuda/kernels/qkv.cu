// SplitQKV: x [rows, 3, H, D] (the fused qkv projection, rows = B·N) into
// q, k, v [rows, H, D]; q and k get an optional per-head LayerNorm (norm != 0;
// w, b may be null) and then an optional RoPE (cs != null) with tables
// cs, sn [N, D/2] and pairing 0: halves-2D, 1: interleaved (see
// backend.RoPEPairing). One warp per (row, head) does q, k and v of that head,
// in a grid-stride loop over warps (the warp index is warp-uniform, so the
// shuffles inside see all 32 lanes).

// Generic head size: three passes over the head in global memory (L1 keeps
// it), statistics as layernorm_warp computes them; each lane rotates whole
// pairs, normalising both members itself, so no lane reads another's output.
__device__ __forceinline__ void qk_head_any(float* y, const float* x, const float* w, const float* b,
                                            int norm, float eps, const float* cs, const float* sn,
                                            int d, int pairing, int lane) {
    float mean = 0.f, inv = 1.f;
    if (norm) {
        float s = 0.f;
        for (int i = lane; i < d; i += 32) s += x[i];
        mean = warp_sum(s) / d;
        float q = 0.f;
        for (int i = lane; i < d; i += 32) { const float t = x[i] - mean; q += t * t; }
        inv = rsqrtf(warp_sum(q) / d + eps);
    }
    // element i after the norm, in layernorm_warp's order of operations
    auto normed = [&](int i) {
        if (!norm) return x[i];
        float o = (x[i] - mean) * inv;
        if (w) o *= w[i];
        if (b) o += b[i];
        return o;
    };
    if (!cs) {
        for (int i = lane; i < d; i += 32) y[i] = normed(i);
        return;
    }
    for (int m = lane; m < d / 2; m += 32) {
        int i, j;
        rope_pair(m, d, pairing, i, j);
        const float xi = normed(i), xj = normed(j);
        const float c = cs[m], s = sn[m];
        y[i] = xi * c - xj * s;
        y[j] = xj * c + xi * s;
    }
}

extern "C" __global__ void qkv_split_f32(float* q, float* k, float* v, const float* x,
                                         const float* qw, const float* qb, const float* kw, const float* kb,
                                         int norm, float eps, const float* cs, const float* sn, int pairing,
                                         i64 rows, int n, int h, int d) {
    pdl_wait();
    const int lane = threadIdx.x & 31;
    const i64 warps = ((i64)gridDim.x * blockDim.x) >> 5;
    const i64 e = (i64)h * d;
    for (i64 wi = ((i64)blockIdx.x * blockDim.x + threadIdx.x) >> 5; wi < rows * h; wi += warps) {
        const i64 row = wi / h;
        const int head = (int)(wi % h);
        const float* src = x + row * 3 * e + (i64)head * d;
        const i64 dst = row * e + (i64)head * d;
        const i64 tab = (row % n) * (d / 2);
        const float* c = cs ? cs + tab : nullptr;
        const float* s = cs ? sn + tab : nullptr;
        qk_head_any(q + dst, src, qw, qb, norm, eps, c, s, d, pairing, lane);
        qk_head_any(k + dst, src + e, kw, kb, norm, eps, c, s, d, pairing, lane);
        for (int i = lane; i < d; i += 32) v[dst + i] = src[2 * e + i];
    }
}

// Head size 64 (the model's): lane l holds elements 2l and 2l+1 in registers.
// Interleaved pairs are then (2l, 2l+1) in the lane itself; halves-2D pairs
// element t of a 32-wide half with t ± 16, which sits in lane l ^ 8.
__device__ __forceinline__ float2 qk_head64(float2 xv, const float* w, const float* b, int norm, float eps,
                                            const float* cs, const float* sn, int pairing, int lane) {
    const int e0 = 2 * lane;
    if (norm) {
        const float mean = warp_sum(xv.x + xv.y) / 64.f;
        const float a = xv.x - mean, d = xv.y - mean;
        const float inv = rsqrtf(warp_sum(a * a + d * d) / 64.f + eps);
        float o0 = a * inv, o1 = d * inv;
        if (w) { o0 *= w[e0]; o1 *= w[e0 + 1]; }
        if (b) { o0 += b[e0]; o1 += b[e0 + 1]; }
        xv = make_float2(o0, o1);
    }
    if (!cs) return xv;
    if (pairing == 1) {
        const float c = cs[lane], s = sn[lane]; // pair m = l is (2l, 2l+1)
        return make_float2(xv.x * c - xv.y * s, xv.y * c + xv.x * s);
    }
    // halves-2D: element e of half hh = e / 32 at offset t = e % 32 belongs to
    // pair m = hh·16 + t % 16; it is the first member when t < 16.
    const float p0 = __shfl_xor_sync(0xffffffffu, xv.x, 8), p1 = __shfl_xor_sync(0xffffffffu, xv.y, 8);
    const int m0 = (lane >> 4) * 16 + (e0 & 15);
    const float c0 = cs[m0], s0 = sn[m0], c1 = cs[m0 + 1], s1 = sn[m0 + 1];
    if ((lane & 8) == 0) return make_float2(xv.x * c0 - p0 * s0, xv.y * c1 - p1 * s1);
    return make_float2(xv.x * c0 + p0 * s0, xv.y * c1 + p1 * s1);
}

// Two consecutive elements (i even) of the qkv projection, fp32 or bf16.
__device__ __forceinline__ float2 qkv_pair(const float* x, i64 i) { return *(const float2*)(x + i); }
__device__ __forceinline__ float2 qkv_pair(const bf16_t* x, i64 i) {
    const unsigned w = *(const unsigned*)(x + i);
    return make_float2(__uint_as_float(w << 16), __uint_as_float(w & 0xffff0000u));
}

// kbf, vbf, when set, also get k and v rounded to bf16 (two values a word),
// which a bf16 attention reads instead of casting them itself; k and v may
// then be null when only that attention reads them (backend.KVAttention).
template <typename T>
__device__ __forceinline__ void qkv_split64(float* q, float* k, float* v, const T* x,
                                            const float* qw, const float* qb, const float* kw, const float* kb,
                                            int norm, float eps, const float* cs, const float* sn, int pairing,
                                            i64 rows, int n, int h, unsigned* kbf, unsigned* vbf) {
    const int lane = threadIdx.x & 31;
    const i64 warps = ((i64)gridDim.x * blockDim.x) >> 5;
    const i64 e = (i64)h * 64;
    for (i64 wi = ((i64)blockIdx.x * blockDim.x + threadIdx.x) >> 5; wi < rows * h; wi += warps) {
        const i64 row = wi / h;
        const int head = (int)(wi % h);
        const i64 src = row * 3 * e + (i64)head * 64 + 2 * lane;
        const i64 dst = row * e + (i64)head * 64;
        const i64 tab = (row % n) * 32;
        const float* c = cs ? cs + tab : nullptr;
        const float* s = cs ? sn + tab : nullptr;
        const float2 xq = qkv_pair(x, src), xk = qkv_pair(x, src + e), xv = qkv_pair(x, src + 2 * e);
        ((float2*)(q + dst))[lane] = qk_head64(xq, qw, qb, norm, eps, c, s, pairing, lane);
        const float2 ko = qk_head64(xk, kw, kb, norm, eps, c, s, pairing, lane);
        if (k) ((float2*)(k + dst))[lane] = ko;
        if (v) ((float2*)(v + dst))[lane] = xv;
        if (kbf) {
            kbf[dst / 2 + lane] = pack_bf16(ko.x, ko.y);
            vbf[dst / 2 + lane] = pack_bf16(xv.x, xv.y);
        }
    }
}

extern "C" __global__ void qkv_split_d64(float* q, float* k, float* v, const float* x,
                                         const float* qw, const float* qb, const float* kw, const float* kb,
                                         int norm, float eps, const float* cs, const float* sn, int pairing,
                                         i64 rows, int n, int h, unsigned* kbf, unsigned* vbf) {
    pdl_wait();
    qkv_split64(q, k, v, x, qw, qb, kw, kb, norm, eps, cs, sn, pairing, rows, n, h, kbf, vbf);
}

// The same on a bf16 projection (cuda.qkv_bf16: the qkv GEMM rounded its
// output to bf16, as the reference's autocast does).
extern "C" __global__ void qkv_split_d64_bf(float* q, float* k, float* v, const bf16_t* x,
                                            const float* qw, const float* qb, const float* kw, const float* kb,
                                            int norm, float eps, const float* cs, const float* sn, int pairing,
                                            i64 rows, int n, int h, unsigned* kbf, unsigned* vbf) {
    pdl_wait();
    qkv_split64(q, k, v, x, qw, qb, kw, kb, norm, eps, cs, sn, pairing, rows, n, h, kbf, vbf);
}
