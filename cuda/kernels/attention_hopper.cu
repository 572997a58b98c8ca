// Hopper paged kernel (sm_90a): warpgroup MMA (wgmma) instead of mma.sync.
// A block is two warpgroups × 64 queries sharing 128-key K and V tiles that
// all 256 threads stage with cp.async in the 128-byte-swizzled layout the
// tensor cores read straight from shared memory (no ldmatrix). Q and P are
// register operands. Each warpgroup keeps S = Q·Kᵀ of the next tile and
// O += P·V of this one in flight together, and the two warpgroups run half
// an iteration apart so that one's softmax overlaps the other's MMAs (see
// run below). Same arithmetic as attn_fa2_paged_bf (bf16 operands, fp32
// accumulation and base-2 online softmax), same split-key partial results.
// sm_90a only; the figures are in cuda/NOTES.md (the Hopper paged kernel).
#define WQ 128              // queries a block
#define WK 128              // keys a tile
#define WTILE (WK * HD * 2) // bytes of one K or V tile
#define WSTAGES 5           // K+V stages of the cp.async kernel (at least 4); tiles are loaded WSTAGES-2 ahead
#define WSTAGES_TMA 4       // K+V stages of the TMA kernels (ATTN_FREE_RUN 2: one more with three warpgroups)
#define F8_TILE (WK * HD)   // bytes of one e4m3 K or Vᵀ tile

#include "fp8.cuh"

// Softmax levers (issue #36). Each is off unless the backend's settings turn
// it on (Config.Attn: ExpPoly, LazyRescale, FoldCombine; RowSumMMA only in
// the lab's builds), which the loader passes as defines of an
// "attention_hopper@…" module.
// ATTN_EXP_POLY 1 or 2: one group of four scores in four, or in two, takes
//   its exponentials from ex2_poly on the FMA pipe instead of ex2 on the SFU.
// ATTN_LAZY_RESCALE 1: a warp keeps its rows' running maxima, and skips the
//   rescale of O and l, unless one of its rows' maxima grew by more than TAU
//   (wg_paged); P then reaches at most 2^TAU times its usual bound.
// ATTN_ROWSUM_MMA 1: the row sums come from the tensor cores, and the 32
//   adds and the tree a thread did for them each tile are gone. FP8: P·V
//   multiplies eight more rows of ones after each Vᵀ tile (N = 72), so the
//   sums are those of the e4m3 P that O is made of. bf16: each k-step of
//   P·V has a second MMA of N = 8 against a 1 KB block of ones after the
//   rest of shared memory (ones_at in wg_paged).
#ifndef ATTN_EXP_POLY
#define ATTN_EXP_POLY 0
#endif
#if ATTN_EXP_POLY == 0
#define ATTN_POLY_EVERY 0
#elif ATTN_EXP_POLY == 1
#define ATTN_POLY_EVERY 4
#elif ATTN_EXP_POLY == 2
#define ATTN_POLY_EVERY 2
#else
#error "ATTN_EXP_POLY is 0 (off), 1 (one group of scores in four) or 2 (one in two)"
#endif
#ifndef ATTN_LAZY_RESCALE
#define ATTN_LAZY_RESCALE 0
#endif
#ifndef ATTN_ROWSUM_MMA
#define ATTN_ROWSUM_MMA 0
#endif
// ATTN_FOLD_COMBINE 1: with the keys split, the last block of a (query
//   tile, head) to finish merges the splits' partial results into the
//   output (and its bf16 copy), attn_combine's work, counting the finished
//   splits in counters (zero before a launch, and left zero); the kernels
//   take the counters and the output as two more parameters.
#ifndef ATTN_FOLD_COMBINE
#define ATTN_FOLD_COMBINE 0
#endif
#ifndef ATTN_FREE_RUN
#define ATTN_FREE_RUN 0
#endif
// ATTN_FREE_RUN 1 or 2 (three warpgroups with TMA): no block-wide barrier
//   a tile. A warp marks a stage free on that stage's "empty" barrier once
//   its P·V of the stage's tile has completed, and the thread that issues
//   the copies waits there before it reuses the stage, so the warpgroups
//   drift apart as their softmax and MMAs let them instead of meeting at
//   every tile. 2: a fifth stage, tiles still loaded two ahead, so that the
//   copy waits for the release of the tile three back instead of two.
#if ATTN_FREE_RUN < 0 || ATTN_FREE_RUN > 2
#error "ATTN_FREE_RUN is 0 (off), 1 (release barriers) or 2 (release barriers and a fifth stage)"
#endif
// ATTN_SCORES_AHEAD 1 (the TMA kernels, bf16 and FP8): two warpgroups of
//   64 queries, each with the scores of two tiles in registers: Q·Kᵀ of
//   tile t+2 is issued before the softmax of tile t+1, so that a warp's
//   exponentials run while its own MMAs do (the schedule of three
//   warpgroups keeps a warpgroup's Q·Kᵀ ahead of its softmax in neither
//   role). No block-wide barrier: stages are released on their "empty"
//   barriers, WSTAGES_AHEAD of them, loaded WSTAGES_AHEAD-2 tiles ahead.
//   A block is 128 queries (1005 queries: 8 blocks a head, one wave of
//   128 blocks on an H100 without key splits). Off: at 251–252 registers
//   ptxas serializes its MMAs and it measured slower (cuda/NOTES.md).
#ifndef ATTN_SCORES_AHEAD
#define ATTN_SCORES_AHEAD 0
#endif
#define WSTAGES_AHEAD 6
// ATTN_WARP_SPEC 2 or 3 (the TMA kernels, bf16 and FP8): that many
//   consumer warpgroups of 64 queries and one more that produces. One warp
//   of the producer issues every tile's copies, each once the warps that
//   read its stage's previous tile have released it, and zeroes a stale V
//   tail (see stale); the producer hands its registers to the consumers
//   (setmaxnreg: three consumers at 160 registers a thread, two at 240).
//   Each consumer warpgroup runs FlashAttention-3's schedule on its own
//   (Q·Kᵀ of the next tile and P·V of this one issued, then the next
//   tile's softmax while P·V runs), with no block-wide barrier, so that
//   one warpgroup's softmax runs while another waits for its MMAs. More
//   stages than the other TMA kernels: WSTAGES_WS_F8 or WSTAGES_WS_BF.
#ifndef ATTN_WARP_SPEC
#define ATTN_WARP_SPEC 0
#endif
#if ATTN_WARP_SPEC != 0 && ATTN_WARP_SPEC != 2 && ATTN_WARP_SPEC != 3
#error "ATTN_WARP_SPEC is 0 (off), 2 or 3 (consumer warpgroups)"
#endif
#if ATTN_WARP_SPEC && (ATTN_SCORES_AHEAD || ATTN_FREE_RUN || ATTN_FOLD_COMBINE || ATTN_ROWSUM_MMA)
#error "ATTN_WARP_SPEC is built without the scores ahead, the free run, the folded combine and the row-sum MMAs"
#endif
// ATTN_PINGPONG 1 (with ATTN_WARP_SPEC 2): the two consumer warpgroups take
//   turns at issuing their MMAs, on two named barriers (FlashAttention-3's
//   ping-pong), so that their MMAs reach the tensor cores in alternation and
//   one's softmax runs while the other's MMAs do, rather than both waiting
//   for theirs together. A block whose second warpgroup has no queries runs
//   without turns.
#ifndef ATTN_PINGPONG
#define ATTN_PINGPONG 0
#endif
#if ATTN_PINGPONG && ATTN_WARP_SPEC != 2
#error "ATTN_PINGPONG takes turns between the two consumers of ATTN_WARP_SPEC 2"
#endif
// ATTN_KEY_HALVES 1 (with ATTN_WARP_SPEC 2): two consumer warpgroups a
//   64-query tile, one for the first 64 keys of every 128-key tile and one
//   for the last 64 (S of 32 registers a thread, so that four consumers fit
//   the register file), each with its own online softmax; the pair merges
//   its maxima, sums and O through shared memory at the end: four warps a
//   scheduler instead of two, to hide the softmax's latency. Measured
//   slower (cuda/NOTES.md, the key halves).
#ifndef ATTN_KEY_HALVES
#define ATTN_KEY_HALVES 0
#endif
#if ATTN_KEY_HALVES && (ATTN_WARP_SPEC != 2 || ATTN_PINGPONG || ATTN_LAZY_RESCALE)
#error "ATTN_KEY_HALVES is built with ATTN_WARP_SPEC 2, without the ping-pong and the lazy rescale"
#endif
// ATTN_P_INT 1: the bf16 kernels round P to bf16 with two integer adds and
//   a byte permute a pair (round to nearest, ties away from zero: P is
//   finite and not negative) instead of the conversion instruction, which
//   may share the exponentials' pipe on Hopper (the conversions' rate is
//   low there); 2: the FP8 kernel's P to e4m3 too, by a multiply, an add
//   and a shift a value and byte permutes (pack_p8).
#ifndef ATTN_P_INT
#define ATTN_P_INT 0
#endif
#if ATTN_P_INT < 0 || ATTN_P_INT > 2
#error "ATTN_P_INT is 0, 1 (bf16's P) or 2 (bf16's and FP8's)"
#endif
#define WSTAGES_WS_F8 8
#define WSTAGES_WS_BF 6
// Registers a thread of the producer and of a consumer warpgroup keep
// (setmaxnreg): the block's 64 K registers shared out. With the key halves
// the launch holds 96 a thread (640 threads), so the consumers get what the
// producer gives up: 96 + 72/4, rounded down to 8.
#define WS_PRODUCER_REGS (ATTN_WARP_SPEC == 2 ? 24 : 32)
#define WS_CONSUMER_REGS (ATTN_KEY_HALVES ? 112 : ATTN_WARP_SPEC == 2 ? 240 : 160)
// The consumer warpgroups of the TMA kernels' blocks (ATTN_TMA_NWG: their
// 64-query tiles), and their threads.
#if ATTN_WARP_SPEC
#define ATTN_TMA_NWG ATTN_WARP_SPEC
#define ATTN_TMA_THREADS (128 * (ATTN_WARP_SPEC * (ATTN_KEY_HALVES ? 2 : 1) + 1))
#elif ATTN_SCORES_AHEAD
#define ATTN_TMA_NWG 2
#define ATTN_TMA_THREADS 256
#else
#define ATTN_TMA_NWG 3
#define ATTN_TMA_THREADS 384
#endif
#if ATTN_FOLD_COMBINE
#define ATTN_FOLD_PARAMS , unsigned *__restrict__ counters, float *__restrict__ fin
#define ATTN_FOLD_ARGS counters, fin
#else
#define ATTN_FOLD_PARAMS
#define ATTN_FOLD_ARGS nullptr, nullptr
#endif

#ifdef __CUDA_ARCH_FEAT_SM90_ALL
// D(64×128) (+)= A(64×16, registers) · B(16×128, shared memory descriptor, K-major).
__device__ __forceinline__ void wgmma_n128_k(float* d, const unsigned* a, unsigned long long desc, int acc) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %68, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " WG_REGS64 "{%64,%65,%66,%67}, %69, p, 1, 1, 0;\n}\n"
                 : WG_ACC64(WG_RW)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(acc), "l"(desc));
}

// D(64×64) (+)= A(64×16, registers) · B(16×64, shared memory descriptor, MN-major).
__device__ __forceinline__ void wgmma_n64_mn(float* d, const unsigned* a, unsigned long long desc, int acc) {
    asm volatile(
        "{\n.reg .pred p;\n"
        "setp.ne.b32 p, %36, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
        "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
        "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, "
        "{%32,%33,%34,%35}, %37, p, 1, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(acc), "l"(desc));
}

// D(64×128) = A·B, the first k-step of Q·Kᵀ: D is only written ("=f"), so the
// scores of one tile are not carried across loop iterations (a register move
// into an in-flight accumulator makes ptxas serialize the wgmmas).
__device__ __forceinline__ void wgmma_n128_k_first(float* d, const unsigned* a, unsigned long long desc) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " WG_REGS64 "{%64,%65,%66,%67}, %68, p, 1, 1, 0;\n}\n"
                 : WG_ACC64(WG_WO)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(0));
}

// D(64×128) (+)= A(64×16) · B(16×128), both from shared-memory descriptors
// (K-major), so that A costs no registers.
__device__ __forceinline__ void wgmma_n128_ss(float* d, unsigned long long da, unsigned long long db, int acc) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " WG_REGS64 "%64, %65, p, 1, 1, 0, 0;\n}\n"
                 : WG_ACC64(WG_RW)
                 : "l"(da), "l"(db), "r"(acc));
}
// Its first k-step: D is only written (see wgmma_n128_k_first).
__device__ __forceinline__ void wgmma_n128_ss_first(float* d, unsigned long long da, unsigned long long db) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " WG_REGS64 "%64, %65, p, 1, 1, 0, 0;\n}\n"
                 : WG_ACC64(WG_WO)
                 : "l"(da), "l"(db), "r"(0));
}

// D(64×64) (+)= A · B, both from shared-memory descriptors da, db
// (K-major): an m64n64 wgmma of the given shape and operand modifiers,
// its accumulators through constraint macro C, scale-d ACC. A key half's
// scores (ATTN_KEY_HALVES); the _first forms, the first k-step, only write
// D (see wgmma_n128_k_first).
#define WGMMA_SS_N64(SHAPE, MODS, C, ACC)                                                                            \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\nwgmma.mma_async.sync.aligned." SHAPE " " WG_REGS32       \
                 "%32, %33, p, " MODS ";\n}\n"                                                                         \
                 : WG_ACC32(C)                                                                                        \
                 : "l"(da), "l"(db), "r"(ACC))
__device__ __forceinline__ void wgmma_n64_ss(float* d, unsigned long long da, unsigned long long db, int acc) {
    WGMMA_SS_N64("m64n64k16.f32.bf16.bf16", "1, 1, 0, 0", WG_RW, acc);
}
__device__ __forceinline__ void wgmma_n64_ss_first(float* d, unsigned long long da, unsigned long long db) {
    WGMMA_SS_N64("m64n64k16.f32.bf16.bf16", "1, 1, 0, 0", WG_WO, 0);
}
__device__ __forceinline__ void wgmma_f8_ss64(float* d, unsigned long long da, unsigned long long db, int acc) {
    WGMMA_SS_N64("m64n64k32.f32.e4m3.e4m3", "1, 1", WG_RW, acc);
}
__device__ __forceinline__ void wgmma_f8_ss64_first(float* d, unsigned long long da, unsigned long long db) {
    WGMMA_SS_N64("m64n64k32.f32.e4m3.e4m3", "1, 1", WG_WO, 0);
}

// Shared-memory matrix descriptor, 64-byte swizzle: K-major rows of 64
// bytes (an e4m3 head of 64), atoms of 8 rows 512 bytes apart.
__device__ __forceinline__ unsigned long long wg_desc64(unsigned addr) {
    return (unsigned long long)((addr & 0x3FFFFu) >> 4) | (1ull << 16) | ((unsigned long long)(512 >> 4) << 32) |
           (2ull << 62);
}

// S(64×128) (+)= A(64×32) · B(32×128), e4m3, both from shared-memory
// descriptors (K-major, as FP8 wgmma requires of both).
__device__ __forceinline__ void wgmma_f8_ss(float* d, unsigned long long da, unsigned long long db, int acc) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 " WG_REGS64 "%64, %65, p, 1, 1;\n}\n"
                 : WG_ACC64(WG_RW)
                 : "l"(da), "l"(db), "r"(acc));
}
// Its first k-step: D is only written (see wgmma_n128_k_first).
__device__ __forceinline__ void wgmma_f8_ss_first(float* d, unsigned long long da, unsigned long long db) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 " WG_REGS64 "%64, %65, p, 1, 1;\n}\n"
                 : WG_ACC64(WG_WO)
                 : "l"(da), "l"(db), "r"(0));
}

// O(64×64) += P(64×32, e4m3 registers) · V(32×64), V given as Vᵀ rows
// (K-major) through a shared-memory descriptor.
__device__ __forceinline__ void wgmma_f8_pv(float* d, const unsigned* a, unsigned long long desc) {
    asm volatile(
        "{\n.reg .pred p;\n"
        "setp.ne.b32 p, %37, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 "
        "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
        "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, "
        "{%32,%33,%34,%35}, %36, p, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(1));
}

// D(64×8) += A(64×16, bf16 registers) · B(16×8, shared memory descriptor,
// K-major): with B all ones, each row's sum of A (ATTN_ROWSUM_MMA, bf16).
__device__ __forceinline__ void wgmma_n8_k(float* d, const unsigned* a, unsigned long long desc) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %9, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%0,%1,%2,%3}, {%4,%5,%6,%7}, %8, p, 1, 1, 0;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(1));
}

// O(64×72) += P(64×32, e4m3 registers) · [V | 1](32×72): Vᵀ's 64 rows and
// then 8 rows of ones, which make columns 64…71 of O the rows' sums of P
// (ATTN_ROWSUM_MMA).
__device__ __forceinline__ void wgmma_f8_pv72(float* d, const unsigned* a, unsigned long long desc) {
    asm volatile(
        "{\n.reg .pred p;\n"
        "setp.ne.b32 p, %41, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n72k32.f32.e4m3.e4m3 "
        "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35}, "
        "{%36,%37,%38,%39}, %40, p, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
          "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(1));
}

// 2^x on the FMA and integer units instead of the special-function unit
// (which does ex2 at an eighth of the FMA rate): x = n + f, n the nearest
// integer (a Cody-Waite reduction: the rounding by adding 1.5·2^23 is
// exact), 2^f by a cubic fitted on [-0.5, 0.5], 2^n added to the exponent
// bits. x is clamped at -125 (2^-125 is 0 to P). cuda/exppoly_test.go reads
// these constants and checks the relative error over the whole input range.
__device__ __forceinline__ float ex2_poly(float x) {
    x = fmaxf(x, -125.f);
    const float r = x + 12582912.f; // 1.5·2^23: the mantissa's low bits now hold round(x)
    const float f = x - (r - 12582912.f);
    const float p = fmaf(fmaf(fmaf(0.0551716685f, f, 0.242611140f), f, 0.693260968f), f, 0.999928057f);
    return __int_as_float(__float_as_int(p) + (__float_as_int(r) << 23));
}

// Two probabilities to P's bf16 pair (lo in the low half): the conversion
// instruction, or with ATTN_P_INT half a bf16 step added to each one's bits
// and the high halves permuted together (P is finite and not negative, so
// that rounds to nearest, ties away from zero, the carry going into the
// exponent as it should).
__device__ __forceinline__ unsigned pack_p(float lo, float hi) {
#if ATTN_P_INT
    return __byte_perm(__float_as_uint(lo) + 0x8000u, __float_as_uint(hi) + 0x8000u, 0x7632);
#else
    return pack_bf16(lo, hi);
#endif
}

// Four probabilities, each in [0, 448], to e4m3 bytes (a in the low
// byte): the conversion instructions, or with ATTN_P_INT 2 integer
// rounding. p·2^-120 moves e4m3's exponent bias (7) onto float's (127) and
// e4m3's subnormals (below 2^-6) onto float's (below 2^-126; __fmul_rn does
// not flush them), so that the byte is bits 20…27 of the product, rounded
// by adding half their unit first (to nearest, ties away from zero).
__device__ __forceinline__ unsigned pack_p8(float a, float b, float c, float d) {
#if ATTN_P_INT >= 2
    const unsigned x = (__float_as_uint(__fmul_rn(a, 0x1p-120f)) + 0x80000u) >> 20;
    const unsigned y = (__float_as_uint(__fmul_rn(b, 0x1p-120f)) + 0x80000u) >> 20;
    const unsigned z = (__float_as_uint(__fmul_rn(c, 0x1p-120f)) + 0x80000u) >> 20;
    const unsigned w = (__float_as_uint(__fmul_rn(d, 0x1p-120f)) + 0x80000u) >> 20;
    return __byte_perm(__byte_perm(x, y, 0x0040), __byte_perm(z, w, 0x0040), 0x5410);
#else
    return f8_pack4(a, b, c, d);
#endif
}

// (wg_pin of floats is in common.cuh.)
template <int N>
__device__ __forceinline__ void wg_pin(unsigned (&r)[N][4]) {
#pragma unroll
    for (int i = 0; i < N; i++)
        asm volatile("" : "+r"(r[i][0]), "+r"(r[i][1]), "+r"(r[i][2]), "+r"(r[i][3])::"memory");
}

template <int N>
struct Int {
    static constexpr int value = N;
};

// Folds a[0..16) and b[0..16) pairwise into a[0] and b[0], with constant
// indices throughout so that both stay in registers.
template <typename F>
__device__ __forceinline__ void tree16(float* a, float* b, F op) {
#pragma unroll
    for (int j = 0; j < 8; j++) { a[j] = op(a[j], a[j + 8]); b[j] = op(b[j], b[j + 8]); }
#pragma unroll
    for (int j = 0; j < 4; j++) { a[j] = op(a[j], a[j + 4]); b[j] = op(b[j], b[j + 4]); }
#pragma unroll
    for (int j = 0; j < 2; j++) { a[j] = op(a[j], a[j + 2]); b[j] = op(b[j], b[j + 2]); }
    a[0] = op(a[0], a[1]);
    b[0] = op(b[0], b[1]);
}


// Transaction barriers (mbarrier) that the tensor memory accelerator (TMA)
// completes when a tile it copies has landed.
__device__ __forceinline__ void mbar_init(unsigned bar, unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_expect_tx(unsigned bar, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(unsigned bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void mbar_wait(unsigned bar, unsigned parity) {
    asm volatile(
        "{\n.reg .pred p;\n"
        "LBM_WAIT:\n"
        "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
        "@!p bra LBM_WAIT;\n}\n" ::"r"(bar),
        "r"(parity)
        : "memory");
}
// One box of a 3-D tensor map (a CUtensorMap the host encoded) into shared
// memory at dst, completing transaction bytes on bar.
__device__ __forceinline__ void tma_load_3d(unsigned dst, const void* map, int x, int y, int z, unsigned bar) {
    asm volatile(
        "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];\n" ::"r"(dst),
        "l"(map), "r"(x), "r"(y), "r"(z), "r"(bar)
        : "memory");
}
#endif

// A CUtensorMap as the driver encodes it (cuTensorMapEncodeTiled): 128
// opaque bytes, passed by value as a __grid_constant__ parameter.
struct __align__(64) TensorMap {
    unsigned long long w[16];
};

// The body of both Hopper paged kernels. TMA false: all threads stage tiles
// of WK consecutive keys with cp.async, whatever the page size. TMA true:
// one thread has the TMA copy each tile from the tensor maps tk and tv
// ([pages][ps][h·64] bf16, the store's layout); tiles then never straddle a
// page (a page is ceil(ps/WK) tiles, rows past ps read as zeros), which costs
// 2.5 % more MMA work at ps = 999 but takes the copies off the warps that do
// the math. NWG warpgroups of 64 queries (2, or 3 with TMA): with three, the
// second and third share a schedule role (see run), and Q lives in shared
// memory so that the 168 registers a thread then has suffice (with Q in
// registers ptxas serialized the MMAs). With ATTN_WARP_SPEC (TMA), NWG
// consumer warpgroups and a producer after them (see WS).
//
// F8: the FP8 cache of kvfp8.cu (the TMA kernels' warpgroups). K tiles are 128
// keys × 64 e4m3 bytes in the 64-byte swizzle, Vᵀ tiles 64 rows × 128 keys
// in the 128-byte swizzle; Q is scaled per row and head (its largest
// magnitude to 448) and held as two e4m3 tiles, its rounding and what that
// missed (f8_pack4_split), each multiplied by K into the same scores; the
// row scales are kept beside Q in shared memory; kvs
// holds the layer's per-head K and V scales. The scores' row factors
// f0, f1 take the scales into the softmax; P is formed as 2^8 times the
// probabilities (in e4m3's normal range, the factor cancels in O/l), and
// V's scale multiplies the output.
//
// POLY > 0 (ATTN_EXP_POLY, and the lab's variants): every POLY-th group of
// four scores takes its exponentials from ex2_poly, sharing the work with
// the FMA units. ATTN_LAZY_RESCALE and ATTN_ROWSUM_MMA: see the top.
template <bool TMA, int NWG, bool F8 = false, int POLY = ATTN_POLY_EVERY>
__device__ __forceinline__ void wg_paged(const float* __restrict__ q, const bf16_t* __restrict__ k,
                                         const bf16_t* __restrict__ v, const TensorMap* tk, const TensorMap* tv,
                                         const int* __restrict__ pages, int ps, int nq, int nk, int h, float scale,
                                         float* __restrict__ out, float* __restrict__ pm, float* __restrict__ pl,
                                         unsigned* __restrict__ obf, const float* __restrict__ kvs = nullptr,
                                         unsigned* __restrict__ counters = nullptr, float* __restrict__ fin = nullptr) {
#ifdef __CUDA_ARCH_FEAT_SM90_ALL
    extern __shared__ __align__(16) unsigned char wg_smem[];
    // Swizzle atoms must start on 1024 bytes; the launch adds 1 KB of slack.
    const unsigned raw = smem_addr(wg_smem);
    const unsigned sbase = (raw + 1023u) & ~1023u;
    unsigned char* const sgen = wg_smem + (sbase - raw);

    const int tid = threadIdx.x, warp = (tid >> 5) & 3, lane = tid & 31, g = lane >> 2, tg = lane & 3;
    // The warpgroup, through a shuffle so that the compiler knows it is
    // warp-uniform (else wgmma under "if (wg == …)" counts as divergent and
    // ptxas serializes it).
    const int wg = __shfl_sync(0xffffffffu, tid >> 7, 0);
    const int hd = blockIdx.y;
    // KH: consumer wg takes the 64-query tile rt of the block and key half
    // kh of every tile (ATTN_KEY_HALVES); NC consumers, the producer after
    // them.
    constexpr bool KH = ATTN_KEY_HALVES && TMA && ATTN_WARP_SPEC != 0;
    constexpr int NC = KH ? 2 * NWG : NWG;
    const int rt = KH ? wg % NWG : wg, kh = KH ? wg / NWG : 0;
    // Scores a thread holds of a tile: a key half's 32, or 64.
    constexpr int NS = KH ? 32 : 64;
    const i64 ld = (i64)h * HD;

    // FREE: the stages are released on barriers instead of a block-wide
    // barrier a tile (ATTN_FREE_RUN).
    // AH: the scores of the next tile are issued ahead of this tile's
    // softmax (ATTN_SCORES_AHEAD), two warpgroups, released stages.
    // WS: NWG consumer warpgroups and a producer after them
    // (ATTN_WARP_SPEC).
    constexpr bool AH = ATTN_SCORES_AHEAD && TMA;
    constexpr bool WS = ATTN_WARP_SPEC != 0 && TMA;
    constexpr bool FREE = (ATTN_FREE_RUN != 0 && TMA && NWG == 3) || AH || WS;
    constexpr int NST = WS    ? (F8 ? WSTAGES_WS_F8 : WSTAGES_WS_BF)
                        : AH  ? WSTAGES_AHEAD
                        : TMA ? WSTAGES_TMA + (FREE && ATTN_FREE_RUN == 2 ? 1 : 0)
                              : WSTAGES; // K+V stages
    static_assert(!AH || NWG == 2, "scores ahead: two warpgroups");
    static_assert(!WS || NWG == ATTN_WARP_SPEC, "warp specialization: ATTN_WARP_SPEC consumer warpgroups");
    constexpr bool PP = ATTN_PINGPONG && WS; // turns between the consumers (ATTN_PINGPONG)
    static_assert(!F8 || (TMA && NWG == ATTN_TMA_NWG), "the FP8 cache is read with the TMA kernels' warpgroups");
    // RS: the row sums on the tensor cores (ATTN_ROWSUM_MMA). FP8: a
    // stage's Vᵀ tile is followed by a 1 KB atom of e4m3 ones, rows 64…71
    // of the B operand of P·V (the TMA never writes it). bf16: a 1 KB block
    // of bf16 ones after the rest of shared memory (ones_at below).
    constexpr bool RS = ATTN_ROWSUM_MMA;
    static_assert(!(RS && AH), "the row sums on the tensor cores are not built with the scores ahead");
    // LAZY: the running maxima move only when a row of the warp grows by
    // more than TAU (log2 units): P stays below 2^TAU (bf16, fp32 l), or
    // 2^(8+TAU) in FP8, inside e4m3's 448.
    constexpr bool LAZY = ATTN_LAZY_RESCALE;
    constexpr float TAU = F8 ? 0.5f : 8.f;
    constexpr int KTILE = F8 ? F8_TILE : WTILE;    // bytes of a K tile; a V tile follows it
    constexpr int STAGE = KTILE + (F8 ? F8_TILE : WTILE) + (RS && F8 ? 1024 : 0);
    const int nsplit = gridDim.z;
    // cp.async: keys [k0, k1) in tiles of WK from k0. TMA: tiles [tb, tb +
    // ntiles) of the (page, part) sequence, tpp parts a page; the last page
    // holds last rows.
    int k0 = 0, k1 = 0, ntiles, tb = 0;
    const int tpp = (ps + WK - 1) / WK, npg = (nk + ps - 1) / ps, last = nk - (npg - 1) * ps;
    if constexpr (TMA) {
        const int total = (npg - 1) * tpp + (last + WK - 1) / WK;
        const int chunk = (total + nsplit - 1) / nsplit;
        tb = blockIdx.z * chunk;
        ntiles = max(0, min(total, tb + chunk) - tb);
    } else {
        int chunk = (nk + nsplit - 1) / nsplit;
        chunk = (chunk + WK - 1) / WK * WK;
        k0 = blockIdx.z * chunk;
        k1 = min(nk, k0 + chunk);
        ntiles = k1 > k0 ? (k1 - k0 + WK - 1) / WK : 0;
    }
    // Keys in tile t (the rest of its rows are masked).
    auto tile_keys = [&](int t) {
        if constexpr (TMA) {
            const int pi = (tb + t) / tpp, part = (tb + t) - pi * tpp;
            return min(WK, (pi == npg - 1 ? last : ps) - part * WK);
        } else {
            return k1 - (k0 + t * WK);
        }
    };
    // TMA: tile t is the last page's last and ends inside the page, above
    // rows that hold stale (possibly NaN) values. P is 0 there, but 0·NaN is
    // not, so those V rows are zeroed (zero_tail), and every thread that reads
    // them must wait for that before its P·V.
    auto stale = [&](int t) {
        const int part = (tb + t) % tpp, nt = tile_keys(t);
        return nt < WK && part * WK + nt < ps;
    };
    // TMA: the stages' barriers follow the tiles; FREE: their "empty"
    // barriers 64 bytes on, in the same 1 KB slot; WS: the barrier on which
    // the producer says a stale tail is zeroed 64 bytes after those.
    const unsigned bars = sbase + NST * STAGE;
    const unsigned empties = bars + 64;
    const unsigned fixed = bars + 128;
    static_assert(!FREE || NST * 8 <= 64, "the empty barriers follow the full ones in the barriers' slot");
    // Zeroes the stale V rows of tile t (see stale), threads i0, i0 + step, …
    // of those that share the work.
    auto zero_tail = [&](int t, int i0, int step) {
        const int nt = tile_keys(t);
        unsigned char* vs = sgen + (t % NST) * STAGE + KTILE;
        if constexpr (F8) {
            // Vᵀ: key columns nt… of every row, at their stored positions in
            // the 128-byte swizzle.
            for (int i = i0; i < (WK - nt) * HD; i += step) {
                const int d = i & (HD - 1), key = nt + i / HD, pos = (key & ~15) | f8_key_pos(key & 15);
                vs[d * 128 + (((pos >> 4) ^ (d & 7)) << 4) + (pos & 15)] = 0;
            }
        } else {
            for (int i = i0; i < (WK - nt) * 8; i += step) *(uint4*)(vs + nt * 128 + i * 16) = make_uint4(0, 0, 0, 0);
        }
        fence_proxy_async();
    };
    // Tiles are loaded AHEAD tiles before the iteration that reads them
    // first; the stage a load fills held the tile NST back.
    constexpr int AHEAD = FREE && !AH && ATTN_FREE_RUN == 2 ? NST - 3 : NST - 2;
    int nextPage = 0; // TMA, thread 0: the page of the next tile to load, read a tile ahead

    // Thread tid copies 16-byte chunk (tid & 7) of rows (tid >> 3) + 32·i, i < 4;
    // chunk c of row j lands at j·128 + ((c ^ j%8)·16) (the 128-byte swizzle).
    const int lrow = tid >> 3, lch = tid & 7;
    const bf16_t* kb = k + (i64)hd * HD + lch * 8;
    const bf16_t* vb = v + (i64)hd * HD + lch * 8;
    // TMA: one thread copies tile t, which lies in the given page, into
    // its stage.
    auto tma_tile = [&](int t, int page) {
        const int part = (tb + t) % tpp;
        const unsigned st = sbase + (t % NST) * STAGE, bar = bars + (t % NST) * 8;
        mbar_expect_tx(bar, STAGE);
        tma_load_3d(st, tk, hd * HD, part * WK, page, bar);
        if constexpr (F8) tma_load_3d(st + KTILE, tv, part * WK, hd * HD, page, bar); // Vᵀ: keys, then rows
        else tma_load_3d(st + KTILE, tv, hd * HD, part * WK, page, bar);
    };
    auto load_tile = [&](int t) {
        if constexpr (TMA) {
            if (tid == 0 && t < ntiles) {
                const int page = nextPage;
                // Tiles are loaded in order: fetch the page after this one now.
                const int pn = (tb + t + 1) / tpp;
                if (pn < npg) nextPage = pages[pn];
                tma_tile(t, page);
            }
            return;
        }
        if (t < ntiles) {
            const int t0 = k0 + t * WK;
            int pi = 0, rem = 0;
            if (ps >= WK) {
                pi = t0 / ps;
                rem = t0 - pi * ps;
            }
            unsigned char* ks = sgen + (t % NST) * 2 * WTILE;
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const int j = lrow + 32 * i;
                const int gk = t0 + j;
                const bool in = gk < k1;
                i64 row = 0;
                if (in) {
                    if (ps >= WK) {
                        int r = rem + j, p = pi;
                        if (r >= ps) {
                            r -= ps;
                            p++;
                        }
                        row = (i64)pages[p] * ps + r;
                    } else {
                        row = (i64)pages[gk / ps] * ps + (gk % ps);
                    }
                }
                const int off = j * 128 + ((lch ^ (j & 7)) << 4);
                cp_async16(ks + off, kb + row * ld, in);
                cp_async16(ks + WTILE + off, vb + row * ld, in);
            }
        }
        cp_async_commit(); // empty groups keep the count uniform
    };
    // WS: the consumer warpgroups with queries (the others stop at once).
    auto readers = [&]() { return WS ? (NC / NWG) * min(NWG, (nq - (int)blockIdx.x * 64 * NWG + 63) / 64) : NWG; };
    if constexpr (TMA) {
        if (tid == 0) {
            for (int st = 0; st < NST; st++) mbar_init(bars + st * 8, 1);
            // One arrival a warp of each warpgroup that reads the stages.
            if constexpr (FREE)
                for (int st = 0; st < NST; st++) mbar_init(empties + st * 8, 4 * readers());
            if constexpr (WS) mbar_init(fixed, 1);
            asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
            if (ntiles > 0) nextPage = pages[tb / tpp];
        }
        __syncthreads();
    }
#pragma unroll
    for (int st = 0; st < (WS ? 0 : TMA ? AHEAD : NST - 2); st++) load_tile(st); // WS: the producer's

    // Q as register A fragments of this warp's 16 rows, rounded to bf16.
    const int wrow = blockIdx.x * (64 * NWG) + rt * 64; // this warpgroup's first query
    const int r0 = wrow + warp * 16 + g, r1 = r0 + 8;
    // QS (three warpgroups): Q as this warpgroup's K-major swizzled bf16
    // tile after the barriers' 1 KB slot, which spares the 16 registers
    // that keep three warpgroups' MMAs from being serialized. Else register A
    // fragments of this warp's 16 rows.
    static_assert(NWG == 2 || (TMA && NWG == 3), "three warpgroups need the TMA layout of shared memory");
    constexpr bool QS = NWG == 3 || AH || WS;
    constexpr int QTILE = 8192; // bytes of a warpgroup's Q (F8: two e4m3 tiles)
    const unsigned qsm = sbase + NST * STAGE + 1024 + rt * QTILE;
    // F8: the row scales of Q, 64 floats a warpgroup after the Q tiles.
    float* const qscale = (float*)(sgen + NST * STAGE + 1024 + NWG * QTILE) + rt * 64;
    unsigned qa[QS ? 1 : 4][4];
    // WS: the producer warpgroup holds no queries; KH: the first key half's
    // consumer writes the Q its pair reads.
    const bool qrows = !WS || wg < NWG;
    if constexpr (F8) {
        // Thread pair j holds row j's 64 values, 32 each: their largest
        // magnitude sets the row's scale.
        const int j = (tid & 127) >> 1, half = tid & 1, row = wrow + j;
        if (qrows) {
            const float* qr = q + (i64)min(row, nq - 1) * ld + (i64)hd * HD + half * 32;
            float x[32];
            float amax = 0.f;
#pragma unroll
            for (int c = 0; c < 8; c++) {
                float4 y = make_float4(0.f, 0.f, 0.f, 0.f);
                if (row < nq) y = *(const float4*)(qr + c * 4);
                x[4 * c] = y.x, x[4 * c + 1] = y.y, x[4 * c + 2] = y.z, x[4 * c + 3] = y.w;
                amax = fmaxf(amax, fmaxf(fmaxf(fabsf(y.x), fabsf(y.y)), fmaxf(fabsf(y.z), fabsf(y.w))));
            }
            amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 1));
            const float sq = amax > 0.f ? amax / 448.f : 1.f, iq = 1.f / sq;
            if (half == 0) qscale[j] = sq;
#pragma unroll
            for (int c = 0; c < 2; c++) {
                unsigned w[4], wl[4];
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const float* z = x + 16 * c + 4 * e;
                    f8_pack4_split(z[0] * iq, z[1] * iq, z[2] * iq, z[3] * iq, w[e], wl[e]);
                }
                const int ch = half * 2 + c; // 16-byte chunk of the 64-byte row, 64-byte swizzle
                unsigned char* const dst = sgen + (qsm - sbase) + j * 64 + ((ch ^ ((j >> 1) & 3)) << 4);
                *(uint4*)dst = make_uint4(w[0], w[1], w[2], w[3]);
                *(uint4*)(dst + 4096) = make_uint4(wl[0], wl[1], wl[2], wl[3]);
            }
        }
        if constexpr (RS) {
            for (int i = tid; i < NST * 64; i += blockDim.x) // 64 chunks of 16 bytes a stage
                *(uint4*)(sgen + (i >> 6) * STAGE + KTILE + F8_TILE + (i & 63) * 16) =
                    make_uint4(0x38383838u, 0x38383838u, 0x38383838u, 0x38383838u); // e4m3 1.0
        }
        fence_proxy_async();
        __syncthreads(); // the row scales, for the threads whose score rows they are
    } else if constexpr (QS) {
        const int j = (tid & 127) >> 1, half = tid & 1, row = wrow + j;
        const float* qr = q + (i64)min(row, nq - 1) * ld + (i64)hd * HD + half * 32;
#pragma unroll
        for (int c = 0; c < 4 && qrows; c++) {
            float4 x = make_float4(0.f, 0.f, 0.f, 0.f), y = x;
            if (row < nq) {
                x = *(const float4*)(qr + c * 8);
                y = *(const float4*)(qr + c * 8 + 4);
            }
            const int ch = half * 4 + c;
            *(uint4*)(sgen + (qsm - sbase) + j * 128 + ((ch ^ (j & 7)) << 4)) =
                make_uint4(pack_bf16(x.x, x.y), pack_bf16(x.z, x.w), pack_bf16(y.x, y.y), pack_bf16(y.z, y.w));
        }
        fence_proxy_async(); // for the tensor cores (a barrier comes before the first MMA)
        if constexpr (WS) __syncthreads();
    } else {
        const bool ok0 = r0 < nq, ok1 = r1 < nq;
        const float* q0 = q + (i64)(ok0 ? r0 : 0) * ld + (i64)hd * HD;
        const float* q1 = q + (i64)(ok1 ? r1 : 0) * ld + (i64)hd * HD;
        load_q_frags(qa, q0, q1, ok0, ok1, tg);
    }
    // RS, bf16: the block of ones after the stages, the barriers' slot (TMA)
    // and Q (three warpgroups); the launch adds its 1 KB.
    const unsigned ones_at = sbase + NST * STAGE + (TMA ? 1024 : 0) + (QS ? NWG * QTILE : 0);
    if constexpr (RS && !F8) {
        for (int i = tid; i < 64; i += blockDim.x)
            *(uint4*)(sgen + (ones_at - sbase) + i * 16) = make_uint4(0x3F803F80u, 0x3F803F80u, 0x3F803F80u, 0x3F803F80u);
        fence_proxy_async(); // a barrier comes before the first MMA
    }
    // WS: here the roles part. The producer gives up registers and one warp
    // of it copies every tile, each once its stage's previous tile has been
    // released by every consumer warp with queries, and zeroes a stale V
    // tail once its tile has landed (then says so on the barrier fixed). A
    // consumer warpgroup with no queries stops; the others take the
    // registers.
    if constexpr (WS) {
        if (wg == NC) {
            asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(WS_PRODUCER_REGS));
            if (warp == 0 && ntiles > 0) {
                int page = pages[tb / tpp];
                for (int t = 0; t < ntiles; t++) {
                    const int pn = (tb + t + 1) / tpp; // read the next tile's page early
                    const int next = pn < npg ? pages[pn] : 0;
                    if (t >= NST) mbar_wait(empties + (t % NST) * 8, (t / NST - 1) & 1);
                    if (lane == 0) tma_tile(t, page);
                    if (stale(t)) {
                        mbar_wait(bars + (t % NST) * 8, (t / NST) & 1);
                        zero_tail(t, lane, 32);
                        __syncwarp();
                        if (lane == 0) mbar_arrive(fixed);
                    }
                    page = next;
                }
            }
            return;
        }
        if (wrow >= nq) return;
        asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(WS_CONSUMER_REGS));
    }
    const float sl2 = scale * 1.4426950408889634f;
    // The scores' factors into base-2 exponents of rows r0 and r1.
    float f0 = sl2, f1 = sl2, sv = 1.f;
    if constexpr (F8) {
        const float sk = kvs[hd];
        sv = kvs[h + hd];
        f0 = sl2 * sk * qscale[warp * 16 + g];
        f1 = sl2 * sk * qscale[warp * 16 + g + 8];
    }
    float o[RS ? 36 : 32]; // RS: o[32…35] are the row sums (columns 64…71)
#pragma unroll
    for (int i = 0; i < (RS ? 36 : 32); i++) o[i] = 0.f;
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.f, l1 = 0.f;
    unsigned p[F8 ? NS / 16 : NS / 8][4]; // P of the tile (KH: key half) whose P·V comes next, as A fragments

    // S = Q·Kᵀ of tile t (issued, not waited for). carried: s lives across
    // the loop's back edge while the MMA runs (warpgroup 1), so its first
    // k-step reads and writes s ("+f", scale-d off) to keep it in the same
    // registers; otherwise it only writes s, which then needs no registers
    // between tiles.
    auto issue_qk = [&](float(&s)[NS], int t, bool carried) {
        const unsigned ka = sbase + (t % NST) * STAGE;
        wg_fence();
        if constexpr (KH && F8) {
            // The key half's 64 rows of 64 bytes.
            const unsigned kb = ka + kh * 4096;
            if (carried) wgmma_f8_ss64(s, wg_desc64(qsm), wg_desc64(kb), 0);
            else wgmma_f8_ss64_first(s, wg_desc64(qsm), wg_desc64(kb));
            wgmma_f8_ss64(s, wg_desc64(qsm + 32), wg_desc64(kb + 32), 1);
            wgmma_f8_ss64(s, wg_desc64(qsm + 4096), wg_desc64(kb), 1);
            wgmma_f8_ss64(s, wg_desc64(qsm + 4096 + 32), wg_desc64(kb + 32), 1);
        } else if constexpr (KH) {
            // The key half's 64 rows of 128 bytes.
            const unsigned kb = ka + kh * 8192;
            if (carried) wgmma_n64_ss(s, wg_desc(qsm, 16, 1024), wg_desc(kb, 16, 1024), 0);
            else wgmma_n64_ss_first(s, wg_desc(qsm, 16, 1024), wg_desc(kb, 16, 1024));
#pragma unroll
            for (int kk = 1; kk < 4; kk++)
                wgmma_n64_ss(s, wg_desc(qsm + kk * 32, 16, 1024), wg_desc(kb + kk * 32, 16, 1024), 1);
        } else if constexpr (F8) {
            if (carried) wgmma_f8_ss(s, wg_desc64(qsm), wg_desc64(ka), 0);
            else wgmma_f8_ss_first(s, wg_desc64(qsm), wg_desc64(ka));
            wgmma_f8_ss(s, wg_desc64(qsm + 32), wg_desc64(ka + 32), 1);
            wgmma_f8_ss(s, wg_desc64(qsm + 4096), wg_desc64(ka), 1);
            wgmma_f8_ss(s, wg_desc64(qsm + 4096 + 32), wg_desc64(ka + 32), 1);
        } else if constexpr (QS) {
            if (carried) wgmma_n128_ss(s, wg_desc(qsm, 16, 1024), wg_desc(ka, 16, 1024), 0);
            else wgmma_n128_ss_first(s, wg_desc(qsm, 16, 1024), wg_desc(ka, 16, 1024));
#pragma unroll
            for (int kk = 1; kk < 4; kk++)
                wgmma_n128_ss(s, wg_desc(qsm + kk * 32, 16, 1024), wg_desc(ka + kk * 32, 16, 1024), 1);
        } else {
            if (carried) wgmma_n128_k(s, qa[0], wg_desc(ka, 16, 1024), 0);
            else wgmma_n128_k_first(s, qa[0], wg_desc(ka, 16, 1024));
#pragma unroll
            for (int kk = 1; kk < 4; kk++) wgmma_n128_k(s, qa[kk], wg_desc(ka + kk * 32, 16, 1024), 1);
        }
        wg_commit();
    };
    // O += P·V of tile t (issued, not waited for).
    auto issue_pv = [&](int t) {
        const unsigned va = sbase + (t % NST) * STAGE + KTILE;
        wg_fence();
        if constexpr (F8) {
            // KH: the key half's 64 columns of the Vᵀ rows.
#pragma unroll
            for (int kk = 0; kk < NS / 16; kk++) {
                const unsigned at = va + (kk + kh * (NS / 16)) * 32;
                if constexpr (RS) wgmma_f8_pv72(o, p[kk], wg_desc(at, 16, 1024));
                else wgmma_f8_pv(o, p[kk], wg_desc(at, 16, 1024));
            }
        } else {
            // KH: the key half's 64 rows of V.
#pragma unroll
            for (int kk = 0; kk < NS / 8; kk++) {
                wgmma_n64_mn(o, p[kk], wg_desc(va + (kk + kh * (NS / 8)) * 2048, 16, 1024), 1);
                if constexpr (RS) wgmma_n8_k(o + 32, p[kk], wg_desc(ones_at, 16, 1024));
            }
        }
        wg_commit();
    };
    // Online softmax of tile t's scores: new maxima, the factors c0, c1 for
    // what came before, the probabilities in s, the row sums added to l (not
    // RS: P·V sums them). It returns whether the maxima moved (always, but
    // LAZY): if not, c0 = c1 = 1 and O needs no rescale.
    auto softmax = [&](float(&s)[NS], int t, float& c0, float& c1) {
        const int nt = tile_keys(t) - kh * NS * 2; // KH: the keys of this half
        if (nt < NS * 2) {
#pragma unroll
            for (int j = 0; j < NS / 4; j++)
#pragma unroll
                for (int e = 0; e < 2; e++)
                    if (j * 8 + 2 * tg + e >= nt) s[4 * j + e] = s[4 * j + 2 + e] = -INFINITY;
        }
        // Partial maxima and sums of rows r0 (a) and r1 (b): sixteen each,
        // folded by tree16, or short of registers (the scores ahead, the key
        // halves) four, each gathering every fourth group.
        constexpr int TW = AH || KH ? 4 : 16;
        float a[TW], b[TW];
#pragma unroll
        for (int j = 0; j < NS / 4; j++) {
            const float x = fmaxf(s[4 * j], s[4 * j + 1]), y = fmaxf(s[4 * j + 2], s[4 * j + 3]);
            a[j % TW] = j < TW ? x : fmaxf(a[j % TW], x);
            b[j % TW] = j < TW ? y : fmaxf(b[j % TW], y);
        }
        if constexpr (TW == 4) {
            a[0] = fmaxf(fmaxf(a[0], a[1]), fmaxf(a[2], a[3]));
            b[0] = fmaxf(fmaxf(b[0], b[1]), fmaxf(b[2], b[3]));
        } else {
            tree16(a, b, fmaxf);
        }
        const float mn0 = fmaxf(m0, quad_max(a[0])), mn1 = fmaxf(m1, quad_max(b[0]));
        // KH: a half can have had no keys yet (a short tile's second half),
        // its maxima still -inf; 0 stands in for them in the exponents.
        const float mb0 = KH && mn0 == -INFINITY ? 0.f : mn0, mb1 = KH && mn1 == -INFINITY ? 0.f : mn1;
        bool moved = true;
        if constexpr (LAZY) // warp-uniform; on the first tile mn - m is +inf
            moved = __any_sync(0xffffffffu, (mn0 - m0) * f0 > TAU || (mn1 - m1) * f1 > TAU);
        if (moved) {
            c0 = ex2((m0 - mb0) * f0); // 0 on the first tile
            c1 = ex2((m1 - mb1) * f1);
            m0 = mn0;
            m1 = mn1;
        } else {
            c0 = c1 = 1.f;
        }
        float ms0 = (KH ? mb0 : m0) * f0, ms1 = (KH ? mb1 : m1) * f1;
        if constexpr (F8) {
            ms0 -= 8.f; // P = 2^8 · probability
            ms1 -= 8.f;
        }
#pragma unroll
        for (int j = 0; j < NS / 4; j++) {
            if (POLY > 0 && j % (POLY > 0 ? POLY : 1) == POLY - 1) {
                s[4 * j] = ex2_poly(fmaf(s[4 * j], f0, -ms0));
                s[4 * j + 1] = ex2_poly(fmaf(s[4 * j + 1], f0, -ms0));
                s[4 * j + 2] = ex2_poly(fmaf(s[4 * j + 2], f1, -ms1));
                s[4 * j + 3] = ex2_poly(fmaf(s[4 * j + 3], f1, -ms1));
            } else {
                s[4 * j] = ex2(fmaf(s[4 * j], f0, -ms0));
                s[4 * j + 1] = ex2(fmaf(s[4 * j + 1], f0, -ms0));
                s[4 * j + 2] = ex2(fmaf(s[4 * j + 2], f1, -ms1));
                s[4 * j + 3] = ex2(fmaf(s[4 * j + 3], f1, -ms1));
            }
            if constexpr (!RS) {
                const float x = s[4 * j] + s[4 * j + 1], y = s[4 * j + 2] + s[4 * j + 3];
                a[j % TW] = j < TW ? x : a[j % TW] + x;
                b[j % TW] = j < TW ? y : b[j % TW] + y;
            }
        }
        if constexpr (!RS) {
            if constexpr (TW == 4) {
                a[0] = (a[0] + a[1]) + (a[2] + a[3]);
                b[0] = (b[0] + b[1]) + (b[2] + b[3]);
            } else {
                tree16(a, b, [](float x, float y) { return x + y; });
            }
            l0 = l0 * c0 + a[0];
            l1 = l1 * c1 + b[0];
        }
        return moved;
    };
    auto to_p = [&](const float(&s)[NS]) {
        if constexpr (F8) {
            // Register kk·4+i of the 32-key step kk: rows g (i even) and g+8
            // (i odd), the stored key positions 4t…4t+3 (i < 2) and 16+4t…
            // (f8_key_pos maps keys there).
#pragma unroll
            for (int kk = 0; kk < NS / 16; kk++) {
                const float* x = s + 16 * kk;
                p[kk][0] = pack_p8(x[0], x[1], x[4], x[5]);
                p[kk][1] = pack_p8(x[2], x[3], x[6], x[7]);
                p[kk][2] = pack_p8(x[8], x[9], x[12], x[13]);
                p[kk][3] = pack_p8(x[10], x[11], x[14], x[15]);
            }
            return;
        }
#pragma unroll
        for (int kk = 0; kk < NS / 8; kk++) {
            p[kk][0] = pack_p(s[8 * kk], s[8 * kk + 1]);
            p[kk][1] = pack_p(s[8 * kk + 2], s[8 * kk + 3]);
            p[kk][2] = pack_p(s[8 * kk + 4], s[8 * kk + 5]);
            p[kk][3] = pack_p(s[8 * kk + 6], s[8 * kk + 7]);
        }
    };

    auto rescale = [&](float c0, float c1, bool moved) {
        if (!moved) return;
#pragma unroll
        for (int j = 0; j < (RS ? 9 : 8); j++) {
            o[4 * j] *= c0;
            o[4 * j + 1] *= c0;
            o[4 * j + 2] *= c1;
            o[4 * j + 3] *= c1;
        }
    };

    // Tile t has landed (and, with cp.async, every thread's copies are
    // visible to the tensor cores) once all threads pass this.
    auto arrived = [&](int t) {
        if constexpr (TMA) {
            mbar_wait(bars + (t % NST) * 8, (t / NST) & 1);
            if (stale(t)) zero_tail(t, tid, blockDim.x);
        } else {
            fence_proxy_async();
        }
    };

    // FREE: this warp is done with tile j's stage (its P·V has completed).
    auto release = [&](int j) {
        if constexpr (FREE) {
            if (lane == 0) mbar_arrive(empties + (j % NST) * 8);
        }
    };
    // The start of iteration t: the stage that tile t+AHEAD goes to is
    // free (FREE: the copying thread waits for every warp's release of the
    // tile it held; else a block-wide barrier), the copy is issued, and tile
    // t+1 has landed.
    auto next_tile = [&](int t) {
        if constexpr (FREE) {
            const int j = t + AHEAD - NST; // the tile the stage held
            if (tid == 0 && j >= 0 && t + AHEAD < ntiles) mbar_wait(empties + (j % NST) * 8, (j / NST) & 1);
        } else {
            // The barrier frees the stage; the wait lets the copy start first.
            __syncthreads();
        }
        load_tile(t + AHEAD);
        arrived(t + 1);
        if (stale(t + 1)) __syncthreads();
    };

    // The two warpgroups run half an iteration apart, so that one's softmax
    // overlaps the other's MMAs (the tensor cores and the exp unit are both
    // shared by the SM): after the barrier of iteration t, warpgroup 0 issues
    // S of tile t+1 and P·V of tile t and then does the softmax of tile t+1
    // while they run; warpgroup 1 first finishes what it issued at the end of
    // iteration t-1 (S of tile t, P·V of tile t-1), does the softmax of tile
    // t, and then issues S of tile t+1 and P·V of tile t, which run across the
    // next barrier. So a stage is free only two iterations after its tile's
    // P·V was issued: with NST stages, iteration t loads tile t+NST-2,
    // and tile t+1 (loaded two iterations ago) has landed at its barrier.
    // ROLE is 0 for warpgroup 0 and 1 for the others (a third in role 0
    // measured the same); each role has its own loop so that role 1's
    // in-flight scores stay in fixed registers across the back edge.
    // Role 0's step once S of tile t+1 and P·V of tile t are issued: the
    // softmax of tile t+1 while P·V runs, then O's rescale and the next P.
    auto step0 = [&](float (&s)[NS], int t, float& c0, float& c1) {
        wg_wait<1>(); // S of tile t+1 (groups complete in order)
        wg_pin(s);
        const bool moved = softmax(s, t + 1, c0, c1);
        wg_wait<0>(); // P·V of tile t: O and p are ours again
        wg_pin(o);
        wg_pin(p);
        release(t);
        rescale(c0, c1, moved);
        to_p(s);
    };
    auto run = [&](auto role) {
        constexpr int ROLE = decltype(role)::value;
        float s[NS];
        float c0, c1;
        bool moved;
        if constexpr (ROLE == 1) {
#pragma unroll
            for (int i = 0; i < NS; i++) s[i] = 0.f; // read (not used) by the tied first k-step
            wg_pin(s);
        }
        wg_pin(o); // O's zeros are written before any MMA is in flight
        cp_async_wait<NST - 3>(); // tile 0
        arrived(0);
        __syncthreads();
        issue_qk(s, 0, ROLE == 1);
        if constexpr (ROLE == 0) {
            wg_wait<0>();
            wg_pin(s);
            softmax(s, 0, c0, c1);
            to_p(s);
        }
        for (int t = 0; t + 1 < ntiles; t++) {
            if constexpr (TMA) {
                next_tile(t);
            } else {
                cp_async_wait<NST - 4>(); // tile t+1
                arrived(t + 1);
                __syncthreads();
                load_tile(t + NST - 2);
            }
            if constexpr (ROLE == 0) {
                issue_qk(s, t + 1, false);
                issue_pv(t);
                step0(s, t, c0, c1);
            } else {
                wg_wait<0>(); // S of tile t, P·V of tile t-1
                wg_pin(s);
                wg_pin(o);
                wg_pin(p);
                if (t > 0) release(t - 1);
                moved = softmax(s, t, c0, c1);
                rescale(c0, c1, moved);
                to_p(s);
                issue_qk(s, t + 1, true);
                issue_pv(t);
            }
        }
        if constexpr (ROLE == 1) {
            wg_wait<0>();
            wg_pin(s);
            wg_pin(o);
            wg_pin(p);
            moved = softmax(s, ntiles - 1, c0, c1);
            rescale(c0, c1, moved);
            to_p(s);
        }
        issue_pv(ntiles - 1);
        wg_wait<0>();
        wg_pin(o);
        wg_pin(p);
    };
    // One guard around all of it: every path that issues an MMA also waits
    // for it (separate guards leave ptxas paths that seem not to, and it
    // serializes the MMAs).
    // TMA: a warpgroup whose rows all lie past the last query (in the last
    // query tile) only keeps the barriers; thread 0, which issues the
    // copies, is in warpgroup 0, whose rows never do.
    // FREE: such a warp releases each tile as it comes.
    auto idle = [&]() {
        arrived(0);
        __syncthreads();
        for (int t = 0; t + 1 < ntiles; t++) {
            release(t);
            next_tile(t);
        }
    };
    // AH: the copying thread (thread 0) issues tile t+AHEAD at step t, once
    // every warp has released the tile its stage held.
    auto ah_load = [&](int t) {
        const int j = t + AHEAD - NST;
        if (tid == 0 && j >= 0 && t + AHEAD < ntiles) mbar_wait(empties + (j % NST) * 8, (j / NST) & 1);
        load_tile(t + AHEAD);
    };
    // AH: tile u has landed; a stale tail of V (see stale) is zeroed by
    // this warpgroup alone, which then meets on a barrier of its own (the
    // other warpgroup writes the same zeroes, and nobody writes anything
    // else there before both have released the stage).
    auto ah_arrived = [&](int u) {
        mbar_wait(bars + (u % NST) * 8, (u / NST) & 1);
        if (stale(u)) {
            zero_tail(u, tid & 127, 128);
            asm volatile("{\n.reg .b32 wg_bar;\nmov.b32 wg_bar, %0;\nbar.sync wg_bar, 128;\n}\n" ::"r"(1 + wg) : "memory");
        }
    };
    // AH, step t of a warpgroup: on entry p holds P of tile t and the
    // scores of tile t+1 are in flight into nxt; cur (the scores P came
    // from) is free. P·V of tile t is issued, and while it and Q·Kᵀ of tile
    // t+2 (into cur) run, the softmax of tile t+1 makes the next P. Every
    // step issues and waits for the same MMAs (ptxas serializes them when
    // paths differ): past the last tile N-1 the MMAs run again on its
    // stage, which is never reloaded, with P = 0, and their scores are
    // dropped; the loop runs an even number of steps.
    auto ah_step = [&](int t, float(&cur)[NS], float(&nxt)[NS]) {
        const int last = ntiles - 1;
        ah_load(t);
        issue_pv(min(t, last));
        wg_wait<1>(); // Q·Kᵀ of tile t+1 (groups complete in order)
        wg_pin(nxt);
        const int u = min(t + 2, last);
        ah_arrived(u);
        issue_qk(cur, u, true);
        float c0 = 1.f, c1 = 1.f;
        bool moved = false;
        if (t + 1 <= last) {
            moved = softmax(nxt, t + 1, c0, c1);
        } else {
#pragma unroll
            for (int i = 0; i < NS; i++) nxt[i] = 0.f; // P = 0
        }
        wg_wait<1>(); // P·V of tile t
        wg_pin(o);
        wg_pin(p);
        if (t <= last) release(t);
        rescale(c0, c1, moved);
        to_p(nxt);
    };
    auto run_ahead = [&]() {
        float sa[NS], sb[NS];
#pragma unroll
        for (int i = 0; i < NS; i++) sa[i] = sb[i] = 0.f; // read (not used) by the tied first k-steps
        wg_pin(sa);
        wg_pin(sb);
        wg_pin(o);
        arrived(0);
        __syncthreads(); // Q in shared memory
        issue_qk(sa, 0, true);
        wg_wait<0>();
        wg_pin(sa);
        float c0, c1;
        softmax(sa, 0, c0, c1); // O is zero: no rescale
        to_p(sa);
        const int u = min(1, ntiles - 1);
        ah_arrived(u);
        issue_qk(sb, u, true);
        // Two steps an iteration, so that the arrays' roles stay fixed.
        for (int t = 0; t < ntiles; t += 2) {
            ah_step(t, sa, sb);
            ah_step(t + 1, sb, sa);
        }
        wg_wait<0>(); // the last, dropped scores
        wg_pin(sa);
        wg_pin(sb);
    };
    // AH: a warpgroup with no query releases each tile once it has landed
    // (an earlier release would count towards the stage's previous tile).
    auto idle_ahead = [&]() {
        arrived(0);
        __syncthreads();
        for (int t = 0; t < ntiles; t++) {
            if (t > 0) mbar_wait(bars + (t % NST) * 8, (t / NST) & 1);
            release(t);
        }
    };
    // WS, a consumer warpgroup: tile t has landed (and a stale V tail is
    // zeroed).
    auto ws_full = [&](int t) {
        mbar_wait(bars + (t % NST) * 8, (t / NST) & 1);
        if (stale(t)) mbar_wait(fixed, 0);
    };
    // WS, a consumer warpgroup: FlashAttention-3's schedule within the
    // warpgroup (run's role 0) without the block-wide barrier: Q·Kᵀ of tile
    // t+1 and P·V of tile t are issued, the softmax of tile t+1 runs once its
    // scores are in and while P·V runs, and the stage of tile t is released
    // once P·V is done.
    // PP: a warpgroup waits for its turn on barrier 3 + wg before it issues
    // MMAs and then passes the turn to the other on its barrier; warpgroup
    // 0 has the first turn.
    const bool turns = PP && readers() == 2;
    auto turn_wait = [&]() {
        if (turns) asm volatile("{\n.reg .b32 turn;\nmov.b32 turn, %0;\nbar.sync turn, 256;\n}\n" ::"r"(3 + wg) : "memory");
    };
    auto turn_pass = [&]() {
        if (turns) asm volatile("{\n.reg .b32 turn;\nmov.b32 turn, %0;\nbar.arrive turn, 256;\n}\n" ::"r"(4 - wg) : "memory");
    };
    auto run_ws = [&]() {
        float s[NS];
        float c0, c1;
        wg_pin(o); // O's zeros are written before any MMA is in flight
        if (wg == 1) turn_pass(); // warpgroup 0 goes first
        ws_full(0);
        turn_wait();
        issue_qk(s, 0, false);
        turn_pass();
        wg_wait<0>();
        wg_pin(s);
        softmax(s, 0, c0, c1); // O is zero: no rescale
        to_p(s);
        for (int t = 0; t + 1 < ntiles; t++) {
            ws_full(t + 1);
            turn_wait();
            issue_qk(s, t + 1, false);
            issue_pv(t);
            turn_pass();
            step0(s, t, c0, c1);
        }
        turn_wait();
        issue_pv(ntiles - 1);
        if (wg == 0) turn_pass(); // the last turn: warpgroup 1 passed one more at the start
        wg_wait<0>();
        wg_pin(o);
        wg_pin(p);
    };
    if (ntiles > 0) {
        if constexpr (WS) {
            run_ws();
        } else if constexpr (AH) {
            if (wrow >= nq) idle_ahead();
            else run_ahead();
        } else {
            if (TMA && wrow >= nq) idle();
            else if (wg == 0) run(Int<0>{});
            else run(Int<1>{});
        }
    }
    cp_async_wait<0>();
    // KH: the pair of a query tile merges its halves' maxima, row sums and
    // O. The second half's consumer leaves its own in the stages, which are
    // free once every consumer with queries is past its last MMA (no copy
    // lands after the last tile), and the first goes on with the merge.
    if constexpr (KH) {
        const unsigned meet = 128 * readers();
        float* const x = (float*)sgen + rt * (36 * 128) + (tid & 127);
        asm volatile("bar.sync 5, %0;\n" ::"r"(meet) : "memory");
        if (kh == 1) {
#pragma unroll
            for (int i = 0; i < 32; i++) x[i * 128] = o[i];
            x[32 * 128] = m0;
            x[33 * 128] = m1;
            x[34 * 128] = l0;
            x[35 * 128] = l1;
        }
        asm volatile("bar.sync 5, %0;\n" ::"r"(meet) : "memory");
        if (kh == 1) return;
        const float pm0 = x[32 * 128], pm1 = x[33 * 128];
        const float mx0 = fmaxf(m0, pm0), mx1 = fmaxf(m1, pm1);
        // A row that neither half had keys for keeps its zeros.
        const float a0 = mx0 == -INFINITY ? 0.f : ex2((m0 - mx0) * f0), b0 = mx0 == -INFINITY ? 0.f : ex2((pm0 - mx0) * f0);
        const float a1 = mx1 == -INFINITY ? 0.f : ex2((m1 - mx1) * f1), b1 = mx1 == -INFINITY ? 0.f : ex2((pm1 - mx1) * f1);
#pragma unroll
        for (int j = 0; j < 8; j++) {
            o[4 * j] = o[4 * j] * a0 + x[(4 * j) * 128] * b0;
            o[4 * j + 1] = o[4 * j + 1] * a0 + x[(4 * j + 1) * 128] * b0;
            o[4 * j + 2] = o[4 * j + 2] * a1 + x[(4 * j + 2) * 128] * b1;
            o[4 * j + 3] = o[4 * j + 3] * a1 + x[(4 * j + 3) * 128] * b1;
        }
        l0 = l0 * a0 + x[34 * 128] * b0;
        l1 = l1 * a1 + x[35 * 128] * b1;
        m0 = mx0;
        m1 = mx1;
    }

#pragma unroll
    for (int half = 0; half < 2; half++) {
        const int r = half ? r1 : r0;
        // RS: every thread of the quad holds its rows' whole sums.
        const float lsum = RS ? (half ? o[34] : o[32]) : quad_sum(half ? l1 : l0);
        if (r >= nq) continue;
        float* dst;
        unsigned* dbf = nullptr;
        float mul = sv; // 1 but in F8
        if (nsplit == 1) {
            const i64 at = (i64)r * ld + (i64)hd * HD;
            dst = out + at;
            if (obf) dbf = obf + at / 2;
            mul = lsum > 0.f ? sv / lsum : 0.f;
        } else {
            const i64 prow = ((i64)blockIdx.z * nq + r) * h + hd;
            dst = out + prow * HD;
            if (tg == 0) {
                pm[prow] = half ? m1 * f1 : m0 * f0;
                pl[prow] = lsum;
            }
        }
#pragma unroll
        for (int j = 0; j < 8; j++) {
            const int c = j * 8 + 2 * tg;
            const float x0 = o[4 * j + 2 * half] * mul, x1 = o[4 * j + 2 * half + 1] * mul;
            *(float2*)(dst + c) = make_float2(x0, x1);
            if (dbf) dbf[c / 2] = pack_bf16(x0, x1);
        }
    }
    if constexpr (ATTN_FOLD_COMBINE) {
        if (counters != nullptr && nsplit > 1) {
            __shared__ int fold_last;
            __threadfence(); // this block's partial results before its count
            __syncthreads();
            unsigned* const cnt = counters + (blockIdx.y * gridDim.x + blockIdx.x);
            if (tid == 0) fold_last = atomicAdd(cnt, 1u) == (unsigned)nsplit - 1;
            __syncthreads();
            if (fold_last) {
                // attn_combine's merge of this block's rows, two columns a
                // thread, reading the other splits' results from L2.
                __threadfence();
                const int row0 = blockIdx.x * (64 * NWG), rows = min(64 * NWG, nq - row0);
                const i64 rowsh = (i64)nq * h;
                for (int i = tid; i < rows * (HD / 2); i += blockDim.x) {
                    const int c = 2 * (i % (HD / 2));
                    const i64 prow = (i64)(row0 + i / (HD / 2)) * h + hd;
                    float mx = -INFINITY;
                    for (int z = 0; z < nsplit; z++) mx = fmaxf(mx, __ldcg(pm + z * rowsh + prow));
                    float den = 0.f, n0 = 0.f, n1 = 0.f;
                    if (mx != -INFINITY) {
                        for (int z = 0; z < nsplit; z++) {
                            const float w = exp2f(__ldcg(pm + z * rowsh + prow) - mx);
                            den += w * __ldcg(pl + z * rowsh + prow);
                            const float2 x = __ldcg((const float2*)(out + (z * rowsh + prow) * HD + c));
                            n0 += w * x.x;
                            n1 += w * x.y;
                        }
                    }
                    const float y0 = den > 0.f ? n0 / den : 0.f, y1 = den > 0.f ? n1 / den : 0.f;
                    const i64 at = prow * HD + c; // row r, head hd: r·h·64 + hd·64 + c
                    *(float2*)(fin + at) = make_float2(y0, y1);
                    if (obf) obf[at / 2] = pack_bf16(y0, y1);
                }
                if (tid == 0) *cnt = 0u; // for the next launch
            }
        }
    }
#endif
}

extern "C" __global__ void __launch_bounds__(256, 1) attn_wg_paged_bf(const float* __restrict__ q,
                                                                      const bf16_t* __restrict__ k,
                                                                      const bf16_t* __restrict__ v,
                                                                      const int* __restrict__ pages, int ps, int nq,
                                                                      int nk, int h, float scale, float* __restrict__ out,
                                                                      float* __restrict__ pm, float* __restrict__ pl,
                                                                      unsigned* __restrict__ obf ATTN_FOLD_PARAMS) {
    pdl_wait();
    wg_paged<false, 2>(q, k, v, nullptr, nullptr, pages, ps, nq, nk, h, scale, out, pm, pl, obf, nullptr, ATTN_FOLD_ARGS);
}

// The same kernel with TMA copies: K and V come as tensor maps of the
// layer's arrays (3-D: h·64 columns, ps rows, pages; 64 × WK boxes in the
// 128-byte swizzle), and the page size must be at least WK. NWG warpgroups
// of 64 queries (with ATTN_WARP_SPEC, the default build's setting, a
// producer warpgroup after them). Shared memory: the stages, 1 KB of
// alignment slack, a 1 KB slot for the barriers, then Q, 8 KB a warpgroup.
#define TMA_PAGED_KERNEL(NAME, NWG)                                                                                    \
    extern "C" __global__ void __launch_bounds__(ATTN_TMA_THREADS, 1)                                                  \
        NAME(const float* __restrict__ q, const __grid_constant__ TensorMap tk, const __grid_constant__ TensorMap tv,   \
             const int* __restrict__ pages, int ps, int nq, int nk, int h, float scale, float* __restrict__ out,        \
             float* __restrict__ pm, float* __restrict__ pl, unsigned* __restrict__ obf ATTN_FOLD_PARAMS) {             \
        pdl_wait();                                                                                                     \
        wg_paged<true, NWG>(q, nullptr, nullptr, &tk, &tv, pages, ps, nq, nk, h, scale, out, pm, pl, obf, nullptr,      \
                            ATTN_FOLD_ARGS);                                                                            \
    }
// Without ATTN_WARP_SPEC: three warpgroups (192 queries a block),
// FlashAttention-3's layout for head dim 64, which needs key splits to fill
// the GPU (96 blocks for one frame's 1005 queries × 16 heads). With
// ATTN_WARP_SPEC 2 (the backend's default): 128 queries a block, 128 blocks,
// one wave on an H100 without splits.
TMA_PAGED_KERNEL(attn_tma3_paged_bf, ATTN_TMA_NWG)

// The FP8 cache's kernel (F8 in wg_paged): K and Vᵀ as e4m3 tensor maps
// (kvfp8.cu's layout), kvs the layer's K and V scales per head. Shared
// memory: the stages (16 KB), 1 KB for the barriers, Q (8 KB a warpgroup),
// its row scales, and 1 KB of alignment slack.
extern "C" __global__ void __launch_bounds__(ATTN_TMA_THREADS, 1)
    attn_f8_paged(const float* __restrict__ q, const __grid_constant__ TensorMap tk, const __grid_constant__ TensorMap tv,
                  const int* __restrict__ pages, int ps, int nq, int nk, int h, float scale, float* __restrict__ out,
                  float* __restrict__ pm, float* __restrict__ pl, const float* __restrict__ kvs,
                  unsigned* __restrict__ obf ATTN_FOLD_PARAMS) {
    pdl_wait();
    wg_paged<true, ATTN_TMA_NWG, true>(q, nullptr, nullptr, &tk, &tv, pages, ps, nq, nk, h, scale, out, pm, pl, obf, kvs,
                            ATTN_FOLD_ARGS);
}
