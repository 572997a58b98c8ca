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
