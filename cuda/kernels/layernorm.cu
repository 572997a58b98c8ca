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
    layernorm_row<float>(y, x, w, b, c, eps);
}
