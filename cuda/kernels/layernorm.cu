// LayerNorm over the last dimension, one block per row; statistics in fp32
// with a two-pass variance (the row stays in L1/L2 between passes).
// w, b are fp32 or absent.
template <typename P>
__device__ void layernorm_row(float* y, const float* x, const P* w, const P* b, int c, float eps) {
    __shared__ float red[32];
    const i64 row = blockIdx.x;
    const float* xr = x + row * c;
    float* yr = y + row * c;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;

    float s = 0.f;
    for (int i = threadIdx.x; i < c; i += blockDim.x) s += xr[i];
    s = warp_sum(s);
    if (lane == 0) red[warp] = s;
    __syncthreads();
    if (warp == 0) {
        s = lane < nw ? red[lane] : 0.f;
        s = warp_sum(s);
        if (lane == 0) red[0] = s;
    }
    __syncthreads();
    const float mean = red[0] / c;
    __syncthreads();

    float v = 0.f;
    for (int i = threadIdx.x; i < c; i += blockDim.x) { float d = xr[i] - mean; v += d * d; }
    v = warp_sum(v);
    if (lane == 0) red[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < nw ? red[lane] : 0.f;
        v = warp_sum(v);
        if (lane == 0) red[0] = v;
    }
    __syncthreads();
    const float inv = rsqrtf(red[0] / c + eps);

    for (int i = threadIdx.x; i < c; i += blockDim.x) {
        float o = (xr[i] - mean) * inv;
        if (w) o *= load_f(w, i);
        if (b) o += load_f(b, i);
        yr[i] = o;
    }
}

extern "C" __global__ void layernorm_f32(float* y, const float* x, const float* w, const float* b, int c, float eps) {
    pdl_wait();
    layernorm_row<float>(y, x, w, b, c, eps);
}

// One warp per row for the model's widths (64: qk-norm of a head, 1024: the
// trunk): the row stays in registers, so x is read once; 8 rows a block.
// ybf, when set, also gets the output rounded to bf16 (two values a word):
// in BF16 mode the next GEMM reads that instead of casting y again. y may
// be null when only that GEMM reads the output (NormLinear).
template <int PER>
__device__ __forceinline__ void layernorm_warp(float* y, unsigned* ybf, const float* x, const float* w, const float* b, int rows, float eps) {
    const int row = (blockIdx.x * blockDim.x + threadIdx.x) >> 5, lane = threadIdx.x & 31;
    if (row >= rows) return; // whole warps leave together
    constexpr int c = PER * 32, V = PER / 2;
    const float2* xr = (const float2*)(x + (i64)row * c);
    float2 v[V];
    float s = 0.f;
#pragma unroll
    for (int j = 0; j < V; j++) {
        v[j] = xr[j * 32 + lane];
        s += v[j].x + v[j].y;
    }
    const float mean = warp_sum(s) / c;
    float q = 0.f;
#pragma unroll
    for (int j = 0; j < V; j++) {
        const float a = v[j].x - mean, d = v[j].y - mean;
        q += a * a + d * d;
    }
    const float inv = rsqrtf(warp_sum(q) / c + eps);
    float2* yr = y ? (float2*)(y + (i64)row * c) : nullptr;
#pragma unroll
    for (int j = 0; j < V; j++) {
        const int e = 2 * (j * 32 + lane);
        float o0 = (v[j].x - mean) * inv, o1 = (v[j].y - mean) * inv;
        if (w) { o0 *= w[e]; o1 *= w[e + 1]; }
        if (b) { o0 += b[e]; o1 += b[e + 1]; }
        if (y) yr[j * 32 + lane] = make_float2(o0, o1);
        if (ybf) ybf[(i64)row * (c / 2) + j * 32 + lane] = pack_bf16(o0, o1);
    }
}

extern "C" __global__ void layernorm_w64(float* y, unsigned* ybf, const float* x, const float* w, const float* b, int rows, float eps) {
    pdl_wait();
    layernorm_warp<2>(y, ybf, x, w, b, rows, eps);
}
extern "C" __global__ void layernorm_w128(float* y, unsigned* ybf, const float* x, const float* w, const float* b, int rows, float eps) {
    pdl_wait();
    layernorm_warp<4>(y, ybf, x, w, b, rows, eps);
}
extern "C" __global__ void layernorm_w1024(float* y, unsigned* ybf, const float* x, const float* w, const float* b, int rows, float eps) {
    pdl_wait();
    layernorm_warp<32>(y, ybf, x, w, b, rows, eps);
}

// Width 1024 with two warps a row (cuda.layernorm_v4): a block of 64
// threads a row, each thread four 16-byte loads, so twice the warps of
// layernorm_w1024 are in flight; the statistics are the same two passes in
// fp32, summed in another order. y and ybf as in layernorm_warp (either
// may be null).
extern "C" __global__ void layernorm_v4_w1024(float4* y, uint2* ybf, const float4* x, const float4* w, const float4* b, float eps) {
    pdl_wait();
    __shared__ float red[2];
    const i64 row = blockIdx.x;
    const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
    const float4* xr = x + row * 256;
    float4 v[4];
    float s = 0.f;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        v[i] = xr[t + 64 * i];
        s += (v[i].x + v[i].y) + (v[i].z + v[i].w);
    }
    s = warp_sum(s);
    if (lane == 0) red[warp] = s;
    __syncthreads();
    const float mean = (red[0] + red[1]) / 1024.f;
    __syncthreads();
    float q = 0.f;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const float a = v[i].x - mean, c = v[i].y - mean, d = v[i].z - mean, e = v[i].w - mean;
        q += (a * a + c * c) + (d * d + e * e);
    }
    q = warp_sum(q);
    if (lane == 0) red[warp] = q;
    __syncthreads();
    const float inv = rsqrtf((red[0] + red[1]) / 1024.f + eps);
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const int j = t + 64 * i;
        float4 o = make_float4((v[i].x - mean) * inv, (v[i].y - mean) * inv, (v[i].z - mean) * inv, (v[i].w - mean) * inv);
        if (w) { const float4 g = w[j]; o.x *= g.x; o.y *= g.y; o.z *= g.z; o.w *= g.w; }
        if (b) { const float4 c = b[j]; o.x += c.x; o.y += c.y; o.z += c.z; o.w += c.w; }
        if (y) y[row * 256 + j] = o;
        if (ybf) ybf[row * 256 + j] = make_uint2(pack_bf16(o.x, o.y), pack_bf16(o.z, o.w));
    }
}
