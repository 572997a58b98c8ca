// FP8 (e4m3) helpers shared by the KV cache's writes (kvfp8.cu) and the
// Hopper FP8 paged kernel (attention_hopper.cu). e4m3 conversions need
// sm_89; below it they trap (the backend refuses fp8 there before
// launching anything that converts).

// Position of key c (0…15) of a 16-key group in the stored Vᵀ row.
__device__ __forceinline__ int f8_key_pos(int c) {
    return c < 8 ? 4 * (c >> 1) + (c & 1) : 4 * ((c - 8) >> 1) + 2 + (c & 1);
}

// Four floats to four e4m3 bytes (a in the low byte), round to nearest even,
// saturating at ±448.
__device__ __forceinline__ unsigned f8_pack4(float a, float b, float c, float d) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
    unsigned short lo, hi;
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;\n" : "=h"(lo) : "f"(b), "f"(a));
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;\n" : "=h"(hi) : "f"(d), "f"(c));
    return (unsigned)lo | ((unsigned)hi << 16);
#else
    __trap();
    return 0;
#endif
}

// The scale of an array whose first write's largest magnitude is amax: the
// power of two at or above amax·16/448, so that values up to 16 times the
// first write's still fit (e4m3's largest is 448) while small ones keep
// their relative precision down to amax/14336 (the smallest normal is 2^-6).
__device__ __forceinline__ float f8_scale(float amax) {
    const float t = fmaxf(amax, 1e-30f) * (16.f / 448.f);
    int e;
    const float m = frexpf(t, &e); // t = m·2^e, m in [0.5, 1)
    return ldexpf(1.f, m == 0.5f ? e - 1 : e);
}
