// The FP8 (e4m3) KV cache of --precision fp8: calibration of the per-head
// scales and the page writes. K pages keep the bf16 store's row layout
// ([rows][h·64], one byte an element). V pages are stored transposed,
// [h·64][rows] with rows rounded up to 16 (rowsPad), and within every group
// of 16 keys in the order in which the FP8 kernels hold P in registers
// (f8_key_pos): the FP8 tensor cores read both operands K-major, so P·V
// needs Vᵀ, and P, converted from the score accumulators in registers,
// holds keys {2t, 2t+1, 8+2t, 9+2t} where the instruction expects keys
// 4t…4t+3 (t = lane % 4). The scales are powers of two, so dequantizing is
// exact.

#include "fp8.cuh"

// Per-head scales of one layer from the n rows of its first write: block
// (head, 0) for K, (head, 1) for V; scales[0…h) are K's, [h…2h) V's. NaN
// values are ignored (fmaxf).
extern "C" __global__ void kv_fp8_calibrate(const float* __restrict__ ks, const float* __restrict__ vs, int n, int h,
                                            float* __restrict__ scales) {
    pdl_wait();
    const int head = blockIdx.x, which = blockIdx.y;
    const float* src = which ? vs : ks;
    const i64 ld = (i64)h * 64;
    float m = 0.f;
    for (int i = threadIdx.x; i < n * 64; i += blockDim.x) m = fmaxf(m, fabsf(src[(i64)(i >> 6) * ld + head * 64 + (i & 63)]));
    m = warp_max(m);
    __shared__ float part[32];
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = m;
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int w = 1; w < (int)(blockDim.x >> 5); w++) m = fmaxf(m, part[w]);
        scales[which * h + head] = f8_scale(fmaxf(m, part[0]));
    }
}

// Rows [row0, row0+n) of a page from n rows of k and v (fp32 [n][h·64]):
// block (tile, head) quantizes 64 rows of one head, writes K's rows
// directly and V's through shared memory as 64 transposed rows of 64 keys.
// kd and vd are the page's K and V; rowsPad the Vᵀ row length. sat counts
// the values that saturated (beyond ±448 at their scale; NaN is not counted).
extern "C" __global__ void __launch_bounds__(256) write_kv_fp8(unsigned char* __restrict__ kd, unsigned char* __restrict__ vd,
                                                               const float* __restrict__ ks, const float* __restrict__ vs,
                                                               int n, int h, int row0, int rowsPad,
                                                               const float* __restrict__ scales,
                                                               unsigned long long* __restrict__ sat) {
    pdl_wait();
    __shared__ unsigned char vt[64][64 + 4];
    const int head = blockIdx.y, r0 = blockIdx.x * 64, tid = threadIdx.x;
    const i64 ld = (i64)h * 64;
    const float ik = 1.f / scales[head], iv = 1.f / scales[h + head];
    unsigned over = 0;
    for (int i = tid; i < 64 * 16; i += 256) {
        const int r = i >> 4, c4 = (i & 15) * 4, row = r0 + r;
        if (row >= n) continue;
        const i64 at = (i64)row * ld + head * 64 + c4;
        const float4 k = *(const float4*)(ks + at), v = *(const float4*)(vs + at);
        over += (fabsf(k.x * ik) > 448.f) + (fabsf(k.y * ik) > 448.f) + (fabsf(k.z * ik) > 448.f) + (fabsf(k.w * ik) > 448.f) +
                (fabsf(v.x * iv) > 448.f) + (fabsf(v.y * iv) > 448.f) + (fabsf(v.z * iv) > 448.f) + (fabsf(v.w * iv) > 448.f);
        *(unsigned*)(kd + (i64)(row0 + row) * ld + head * 64 + c4) = f8_pack4(k.x * ik, k.y * ik, k.z * ik, k.w * ik);
        const unsigned q = f8_pack4(v.x * iv, v.y * iv, v.z * iv, v.w * iv);
#pragma unroll
        for (int e = 0; e < 4; e++) vt[c4 + e][r] = (unsigned char)(q >> (8 * e));
    }
    over = __reduce_add_sync(0xffffffffu, over);
    if ((tid & 31) == 0 && over) atomicAdd(sat, (unsigned long long)over);
    __syncthreads();
    for (int i = tid; i < 64 * 64; i += 256) {
        const int c = i >> 6, r = i & 63, row = r0 + r;
        if (row >= n) continue;
        const int key = row0 + row;
        vd[(i64)(head * 64 + c) * rowsPad + (key & ~15) + f8_key_pos(key & 15)] = vt[c][r];
    }
}
