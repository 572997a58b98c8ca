// Shared helpers for every kernel module (prepended by the loader; NVRTC has
// no toolkit headers here, so bf16 is handled as raw 16-bit patterns).
typedef unsigned short bf16_t;
typedef long long i64;

#ifndef INFINITY
#define INFINITY __int_as_float(0x7f800000)
#endif

// Every kernel starts here. On Hopper the backend launches kernels with
// programmatic dependent launch: a kernel may be scheduled while the one
// before it drains, so it first waits for that one's results (a no-op when
// launched normally), and then lets the next kernel be scheduled.
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

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

// Two floats to an fp16 pair (lo in the low half), round to nearest even.
__device__ __forceinline__ unsigned pack_f16(float lo, float hi) {
    unsigned r;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
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

// Asynchronous copies into shared memory (sm_80 and later; only the kernels
// that use them are compiled with them). valid false zero-fills the
// destination and reads nothing.
__device__ __forceinline__ unsigned smem_addr(const void* p) {
    unsigned r;
    asm("{ .reg .u64 a; cvta.to.shared.u64 a, %1; cvt.u32.u64 %0, a; }" : "=r"(r) : "l"(p));
    return r;
}

__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src), "r"(valid ? 16 : 0));
}

__device__ __forceinline__ void cp_async4(void* dst, const void* src, bool valid) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_addr(dst)), "l"(src), "r"(valid ? 4 : 0));
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

#ifdef __CUDA_ARCH_FEAT_SM90_ALL
// Hopper warpgroup MMAs (wgmma): ordering, commit and wait.
__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wg_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory"); }

// Shared-memory matrix descriptor, 128-byte swizzle: rows of 128 bytes, atoms
// of 8 rows (sbo = 1024 bytes apart); lbo is unused when a row is one atom wide.
__device__ __forceinline__ unsigned long long wg_desc(unsigned addr, unsigned lbo, unsigned sbo) {
    return (unsigned long long)((addr & 0x3FFFFu) >> 4) | ((unsigned long long)(lbo >> 4) << 16) |
           ((unsigned long long)(sbo >> 4) << 32) | (1ull << 62);
}

// Threads' cp.async writes become visible to the tensor cores' (async proxy) reads.
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

// Keeps the compiler from moving a register that an in-flight wgmma reads or writes.
template <int N>
__device__ __forceinline__ void wg_pin(float (&r)[N]) {
#pragma unroll
    for (int i = 0; i < N; i++) asm volatile("" : "+f"(r[i])::"memory");
}
#endif

// The 64 accumulator operands of an m64n128 wgmma, each through constraint macro C.
#define WG_ACC64(C)                                                                                                   \
    C(d[0]), C(d[1]), C(d[2]), C(d[3]), C(d[4]), C(d[5]), C(d[6]), C(d[7]), C(d[8]), C(d[9]), C(d[10]), C(d[11]),    \
        C(d[12]), C(d[13]), C(d[14]), C(d[15]), C(d[16]), C(d[17]), C(d[18]), C(d[19]), C(d[20]), C(d[21]), C(d[22]), \
        C(d[23]), C(d[24]), C(d[25]), C(d[26]), C(d[27]), C(d[28]), C(d[29]), C(d[30]), C(d[31]), C(d[32]), C(d[33]), \
        C(d[34]), C(d[35]), C(d[36]), C(d[37]), C(d[38]), C(d[39]), C(d[40]), C(d[41]), C(d[42]), C(d[43]), C(d[44]), \
        C(d[45]), C(d[46]), C(d[47]), C(d[48]), C(d[49]), C(d[50]), C(d[51]), C(d[52]), C(d[53]), C(d[54]), C(d[55]), \
        C(d[56]), C(d[57]), C(d[58]), C(d[59]), C(d[60]), C(d[61]), C(d[62]), C(d[63])
// The 32 of an m64n64 wgmma.
#define WG_ACC32(C)                                                                                                   \
    C(d[0]), C(d[1]), C(d[2]), C(d[3]), C(d[4]), C(d[5]), C(d[6]), C(d[7]), C(d[8]), C(d[9]), C(d[10]), C(d[11]),    \
        C(d[12]), C(d[13]), C(d[14]), C(d[15]), C(d[16]), C(d[17]), C(d[18]), C(d[19]), C(d[20]), C(d[21]), C(d[22]), \
        C(d[23]), C(d[24]), C(d[25]), C(d[26]), C(d[27]), C(d[28]), C(d[29]), C(d[30]), C(d[31])
#define WG_RW(x) "+f"(x)
#define WG_WO(x) "=f"(x)
#define WG_REGS64                                                                                                     \
    "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29," \
    "%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,"    \
    "%57,%58,%59,%60,%61,%62,%63}, "
#define WG_REGS32                                                                                                     \
    "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29," \
    "%30,%31}, "

// ---------------------------------------------------------------------------
// Helpers of the head-dim-64 tensor-core attention kernels (attention_fa2.cu,
// attention_hopper.cu and the lab's): bf16 operands, fp32 accumulation, keys
// in tiles of MK rows padded to SROW elements in shared memory.
#define MK 64
#define HD 64
#define SROW 72

// 2^x as the single MUFU instruction (exp2f adds denormal handling).
__device__ __forceinline__ float ex2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

__device__ __forceinline__ void mma_bf16(float* c, const unsigned* a, unsigned b0, unsigned b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// The same MMA on fp16 operands.
__device__ __forceinline__ void mma_f16(float* c, const unsigned* a, unsigned b0, unsigned b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Eight consecutive elements as four bf16 pairs.
__device__ __forceinline__ void load8(const bf16_t* p, unsigned* w) {
    const uint4 v = *(const uint4*)p;
    w[0] = v.x; w[1] = v.y; w[2] = v.z; w[3] = v.w;
}
__device__ __forceinline__ void load8(const float* p, unsigned* w) {
    const float4 a = *(const float4*)p, b = *(const float4*)(p + 4);
    w[0] = pack_bf16(a.x, a.y); w[1] = pack_bf16(a.z, a.w);
    w[2] = pack_bf16(b.x, b.y); w[3] = pack_bf16(b.z, b.w);
}

__device__ __forceinline__ float quad_max(float v) {
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
    return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ __forceinline__ float quad_sum(float v) {
    v += __shfl_xor_sync(0xffffffffu, v, 1);
    return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

// Q rows r0 and r0+8 of one head (q0, q1; ok* false past the last query)
// as the four register A fragments of an m16 tile over the head's 64
// dimensions, rounded to bf16 like the reference's q for the bf16 cache.
// F16: fp16 pairs instead (the FP8 cache's portable kernel).
template <bool F16 = false>
__device__ __forceinline__ void load_q_frags(unsigned (&qa)[4][4], const float* q0, const float* q1, bool ok0, bool ok1,
                                             int tg) {
#pragma unroll
    for (int kk = 0; kk < 4; kk++) {
        const int c = kk * 16 + 2 * tg;
        const float2 z = make_float2(0.f, 0.f);
        const float2 x0 = ok0 ? *(const float2*)(q0 + c) : z, x1 = ok1 ? *(const float2*)(q1 + c) : z;
        const float2 y0 = ok0 ? *(const float2*)(q0 + c + 8) : z, y1 = ok1 ? *(const float2*)(q1 + c + 8) : z;
        if constexpr (F16) {
            qa[kk][0] = pack_f16(x0.x, x0.y);
            qa[kk][1] = pack_f16(x1.x, x1.y);
            qa[kk][2] = pack_f16(y0.x, y0.y);
            qa[kk][3] = pack_f16(y1.x, y1.y);
        } else {
            qa[kk][0] = pack_bf16(x0.x, x0.y);
            qa[kk][1] = pack_bf16(x1.x, x1.y);
            qa[kk][2] = pack_bf16(y0.x, y0.y);
            qa[kk][3] = pack_bf16(y1.x, y1.y);
        }
    }
}
