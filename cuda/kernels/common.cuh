// Shared helpers for every kernel module (prepended by the loader; NVRTC has
// no toolkit headers here, so bf16 is handled as raw 16-bit patterns).
typedef unsigned short bf16_t;
typedef long long i64;

#ifndef INFINITY
#define INFINITY __int_as_float(0x7f800000)
#endif

__device__ __forceinline__ float bf16_to_f32(bf16_t h) {
    return __uint_as_float(((unsigned int)h) << 16);
}

// Round to nearest even, NaN kept quiet.
__device__ __forceinline__ bf16_t f32_to_bf16(float f) {
    unsigned int u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (bf16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (bf16_t)(u >> 16);
}

// Two floats to a bf16 pair (lo in the low half), round to nearest even, in
// one instruction (the software rounding in f32_to_bf16 costs ~5 integer ops
// a value).
__device__ __forceinline__ unsigned pack_bf16(float lo, float hi) {
    unsigned r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

// The two dimensions (i, j) that RoPE pair m of a head of d rotates together;
// pairing 0: halves-2D (rotate-half inside each half), 1: interleaved
// (2m, 2m+1). See backend.RoPEPairing.
__device__ __forceinline__ void rope_pair(int m, int d, int pairing, int& i, int& j) {
    if (pairing == 0) {
        const int half = d / 2, quarter = d / 4;
        i = (m / quarter) * half + m % quarter;
        j = i + quarter;
    } else {
        i = 2 * m;
        j = i + 1;
    }
}

__device__ __forceinline__ float load_f(const float* p, i64 i) { return p[i]; }
__device__ __forceinline__ float load_f(const bf16_t* p, i64 i) { return bf16_to_f32(p[i]); }

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
