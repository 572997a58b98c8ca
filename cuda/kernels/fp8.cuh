// FP8 (e4m3) helpers shared by the KV cache's writes (kvfp8.cu) and the
// FP8 paged kernels (attention_hopper.cu, attention_fa2.cu). Rounding to
// e4m3 is one instruction from sm_89 and software below; widening
// (f8x2_to_f16x2) is integer arithmetic.

// Position of key c (0…15) of a 16-key group in the stored Vᵀ row.
__device__ __forceinline__ int f8_key_pos(int c) {
    return c < 8 ? 4 * (c >> 1) + (c & 1) : 4 * ((c - 8) >> 1) + 2 + (c & 1);
}

// x rounded to e4m3 in software (GPUs below sm_89 have no conversion): to
// nearest even, saturating at ±448, NaN kept.
__device__ __forceinline__ unsigned f8_round(float x) {
    const unsigned s = (__float_as_uint(x) >> 24) & 0x80u;
    const float a = fabsf(x);
    if (a != a) return s | 0x7fu;
    if (a >= 448.f) return s | 0x7eu;
    if (a < 0.015625f) return s | __float2uint_rn(a * 512.f); // subnormals: multiples of 2^-9 (8 is 2^-6's code)
    unsigned u = __float_as_uint(a);
    u += 0x7ffffu + ((u >> 20) & 1u); // round the mantissa to 3 bits, ties to even
    return s | min((((u >> 23) - 120u) << 3) | ((u >> 20) & 7u), 0x7eu);
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
    return f8_round(a) | (f8_round(b) << 8) | (f8_round(c) << 16) | (f8_round(d) << 24);
#endif
}

// The value of e4m3 byte b (finite: callers decode what f8_pack4 made of
// finite values). Normal codes move into float's places (bias 127 − 7);
// subnormals are multiples of 2^-9.
__device__ __forceinline__ float f8_value(unsigned b) {
    const unsigned e = (b >> 3) & 15u;
    const float a = e ? __uint_as_float(((b & 0x7fu) << 20) + (120u << 23)) : (float)(b & 7u) * 0.001953125f;
    return (b & 0x80u) ? -a : a;
}

// Four floats as two e4m3 words: hi, their rounding, and lo, the rounding
// of what hi missed, at the same scale. An MMA over hi and one over lo into
// the same accumulator then multiply by the values to about 2^-8 of each
// (bf16's precision) where hi alone is 2^-4. Q's rounding to e4m3 alone was
// the largest part of the FP8 path's error (NOTES.md).
__device__ __forceinline__ void f8_pack4_split(float a, float b, float c, float d, unsigned& hi, unsigned& lo) {
    hi = f8_pack4(a, b, c, d);
    lo = f8_pack4(a - f8_value(hi & 0xffu), b - f8_value((hi >> 8) & 0xffu), c - f8_value((hi >> 16) & 0xffu),
                  d - f8_value(hi >> 24));
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

// Bytes 0 and 1 (HI false) or 2 and 3 (HI true) of x, two e4m3 values, as an
// fp16 pair worth 2^-8 of them, exactly: the e4m3 sign, exponent and
// mantissa bits moved into fp16's places (fp16's exponent bias is 8 more;
// e4m3's subnormals land on fp16 subnormals). Callers fold the 2^8 into
// their scales.
template <bool HI>
__device__ __forceinline__ unsigned f8x2_to_f16x2(unsigned x) {
    const unsigned t = __byte_perm(x, 0u, HI ? 0x4342u : 0x4140u); // 0x00b1_00b0
    return ((t & 0x00800080u) << 8) | ((t & 0x007f007fu) << 7);
}

// F8_MMA: the GPU has FP8 MMAs in mma.sync (sm_89 and later: Ada, Hopper);
// the portable FP8 kernel's P·V then multiplies e4m3 operands directly.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
#define F8_MMA 1
#else
#define F8_MMA 0
#endif

// c += a·b on e4m3 operands, m16n8k32: a's registers hold rows g and g+8
// (alternately) at k 4t…4t+3, then 16+4t…; b's, column g at k 4t…4t+3 and
// 16+4t… (lowest k in the lowest byte). Empty below sm_89, where no caller
// reaches it (F8_MMA).
__device__ __forceinline__ void mma_e4m3(float* c, const unsigned* a, unsigned b0, unsigned b1) {
#if F8_MMA
    asm volatile(
        "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}
