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
// the portable FP8 kernel then multiplies e4m3 operands directly.
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

// Q rows q0 and q1 (64 values of one head) as e4m3 A fragments of the two
// 32-wide k steps, each row rounded at its own scale (its largest magnitude
// to 448, as the Hopper FP8 kernel rounds Q), returned in s0 and s1. The
// four threads of a quad hold a row between them.
__device__ __forceinline__ void load_q_e4m3(unsigned (&qa)[2][4], float& s0, float& s1, const float* q0,
                                            const float* q1, bool ok0, bool ok1, int tg) {
    float4 x[2][4]; // [row][kk·2 + half]: dims 32kk + 16·half + 4tg…
    float a0 = 0.f, a1 = 0.f;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const int c = (i >> 1) * 32 + (i & 1) * 16 + 4 * tg;
        const float4 z = make_float4(0.f, 0.f, 0.f, 0.f);
        x[0][i] = ok0 ? *(const float4*)(q0 + c) : z;
        x[1][i] = ok1 ? *(const float4*)(q1 + c) : z;
        a0 = fmaxf(a0, fmaxf(fmaxf(fabsf(x[0][i].x), fabsf(x[0][i].y)), fmaxf(fabsf(x[0][i].z), fabsf(x[0][i].w))));
        a1 = fmaxf(a1, fmaxf(fmaxf(fabsf(x[1][i].x), fabsf(x[1][i].y)), fmaxf(fabsf(x[1][i].z), fabsf(x[1][i].w))));
    }
    a0 = quad_max(a0);
    a1 = quad_max(a1);
    s0 = a0 > 0.f ? a0 / 448.f : 1.f;
    s1 = a1 > 0.f ? a1 / 448.f : 1.f;
    const float i0 = 1.f / s0, i1 = 1.f / s1;
#pragma unroll
    for (int kk = 0; kk < 2; kk++) {
#pragma unroll
        for (int r = 0; r < 2; r++) {
            const float iq = r ? i1 : i0;
#pragma unroll
            for (int hf = 0; hf < 2; hf++) {
                const float4 y = x[r][kk * 2 + hf];
                qa[kk][hf * 2 + r] = f8_pack4(y.x * iq, y.y * iq, y.z * iq, y.w * iq);
            }
        }
    }
}
