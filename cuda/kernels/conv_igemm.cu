// Implicit-GEMM 3×3 convolution on the TF32 tensor cores (as the reference's
// cuDNN convolutions, which PyTorch runs in TF32): out[o, p] = Σ_k w[o, k] ·
// col[k, p], with the im2col columns copied straight into shared memory
// instead of being written to and read back from a scratch buffer (9× the
// input per convolution). The bias is added on the way out.
//
// K runs tap-major, k = tap·C + ci with tap = ky·3 + kx, so that a K-slice of
// CV_BK channels has one tap: its B tile is CV_BK input planes read at one
// shift, whose validity (the padding) is worked out once per pixel and slice,
// and its A tile is w[o][ci][tap] at a stride of 9 (the weights stay as the
// checkpoint has them; they are small and stay in L2).
//
// A block computes BM output channels × BN output pixels of one image with 8
// warps (BM/32 along channels × the rest along pixels), each warp 32 channels
// as two m16 rows of m16n8k8 tiles. Slices flow through CV_STAGES stages of
// shared memory by cp.async (4-byte copies: a shifted row of pixels is not
// 16-byte aligned), so the copies of the next slices are in flight while one
// is multiplied.
#define CV_BK 32
#define CV_STAGES 3

__device__ __forceinline__ unsigned to_tf32(float x) {
    unsigned r;
    asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
    return r;
}

__device__ __forceinline__ void mma_tf32(float* c, const unsigned* a, unsigned b0, unsigned b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

template <int BM, int BN>
__device__ __forceinline__ void conv3_igemm(float* __restrict__ out, const float* __restrict__ x,
                                            const float* __restrict__ w, const float* __restrict__ bias, int c, int h,
                                            int wd, int o, int stride, int pad, int ho, int wo) {
    constexpr int WM = BM / 32;    // warps along channels
    constexpr int WNW = 8 / WM;    // warps along pixels
    constexpr int WN = BN / WNW;   // pixels per warp
    constexpr int NT = WN / 8;     // n8 tiles per warp
    constexpr int ALD = CV_BK + 4; // A rows [o][k]: conflict-free fragment reads
    constexpr int BLD = BN + 8;    // B rows [k][pixel]: likewise
    constexpr int STAGE = BM * ALD + CV_BK * BLD;
    constexpr int AL = BM / 8;        // A rows a thread copies per slice
    constexpr int BR = 256 / BN;      // B rows copied at once by the block
    constexpr int BL = CV_BK / BR;    // B rows a thread copies per slice
    extern __shared__ __align__(16) float cv_smem[];

    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, tg = lane & 3;
    const int wm = warp / WNW, wn = warp % WNW;
    const int P = ho * wo, hw = h * wd;
    const int p0 = blockIdx.x * BN, o0 = blockIdx.y * BM;
    const float* xi = x + (i64)blockIdx.z * c * hw;
    float* oi = out + (i64)blockIdx.z * o * P;
    const int ncb = (c + CV_BK - 1) / CV_BK, slices = 9 * ncb;

    // A: this thread copies channel column `lane` of rows warp + 8i.
    const i64 wrow = (i64)c * 9;
    const float* wa = w + (i64)(o0 + warp) * wrow + lane * 9;
    // B: pixel column bpx of rows br + BR·i.
    const int bpx = tid % BN, br = tid / BN;
    const int pp = p0 + bpx;
    const bool pin = pp < P;
    const int oy = pin ? pp / wo : 0, ox = pin ? pp - oy * wo : 0;
    const int iy0 = oy * stride - pad, ix0 = ox * stride - pad;

    auto load = [&](int sl) {
        if (sl < slices) {
            const int tap = sl / ncb, c0 = (sl - tap * ncb) * CV_BK;
            const int ky = tap / 3, kx = tap - ky * 3;
            float* As = cv_smem + (sl % CV_STAGES) * STAGE;
            float* Bs = As + BM * ALD;
            const bool cin = c0 + lane < c;
            const float* wsl = wa + (i64)c0 * 9 + tap;
#pragma unroll
            for (int i = 0; i < AL; i++) {
                const int row = warp + 8 * i;
                const bool ok = cin && o0 + row < o;
                cp_async4(&As[row * ALD + lane], ok ? wsl + i * 8 * wrow : w, ok);
            }
            const int iy = iy0 + ky, ix = ix0 + kx;
            const bool pok = pin && iy >= 0 && iy < h && ix >= 0 && ix < wd;
            const float* xb = xi + (i64)(c0 + br) * hw + (pok ? iy * wd + ix : 0);
#pragma unroll
            for (int i = 0; i < BL; i++) {
                const int r = br + BR * i;
                const bool ok = pok && c0 + r < c;
                cp_async4(&Bs[r * BLD + bpx], ok ? xb + (i64)i * BR * hw : x, ok);
            }
        }
        cp_async_commit(); // empty groups keep the count uniform
    };

    float acc[2][NT][4];
#pragma unroll
    for (int mt = 0; mt < 2; mt++)
#pragma unroll
        for (int nt = 0; nt < NT; nt++) acc[mt][nt][0] = acc[mt][nt][1] = acc[mt][nt][2] = acc[mt][nt][3] = 0.f;

#pragma unroll
    for (int s = 0; s < CV_STAGES - 1; s++) load(s);
    for (int s = 0; s < slices; s++) {
        cp_async_wait<CV_STAGES - 2>(); // slice s has landed (this thread's copies)
        __syncthreads();                // everyone's; and slice s-1's stage is free
        load(s + CV_STAGES - 1);
        const float* As = cv_smem + (s % CV_STAGES) * STAGE;
        const float* Bs = As + BM * ALD;
#pragma unroll
        for (int ks = 0; ks < CV_BK; ks += 8) {
            unsigned a[2][4];
#pragma unroll
            for (int mt = 0; mt < 2; mt++) {
                const float* ar = As + (wm * 32 + mt * 16 + g) * ALD + ks + tg;
                a[mt][0] = to_tf32(ar[0]);
                a[mt][1] = to_tf32(ar[8 * ALD]);
                a[mt][2] = to_tf32(ar[4]);
                a[mt][3] = to_tf32(ar[8 * ALD + 4]);
            }
#pragma unroll
            for (int nt = 0; nt < NT; nt++) {
                const float* bc = Bs + (ks + tg) * BLD + wn * WN + nt * 8 + g;
                const unsigned b0 = to_tf32(bc[0]), b1 = to_tf32(bc[4 * BLD]);
#pragma unroll
                for (int mt = 0; mt < 2; mt++) mma_tf32(acc[mt][nt], a[mt], b0, b1);
            }
        }
    }
    cp_async_wait<0>();

#pragma unroll
    for (int mt = 0; mt < 2; mt++) {
#pragma unroll
        for (int half = 0; half < 2; half++) {
            const int oc = o0 + wm * 32 + mt * 16 + g + half * 8;
            if (oc >= o) continue;
            const float bv = bias ? bias[oc] : 0.f;
            float* row = oi + (i64)oc * P;
#pragma unroll
            for (int nt = 0; nt < NT; nt++) {
                const int px = p0 + wn * WN + nt * 8 + 2 * tg;
                if (px < P) row[px] = acc[mt][nt][2 * half] + bv;
                if (px + 1 < P) row[px + 1] = acc[mt][nt][2 * half + 1] + bv;
            }
        }
    }
}

// Shared memory: CV_STAGES · (BM·(CV_BK+4) + CV_BK·(BN+8)) floats (the launch
// passes it; cuda/conv.go computes the same).
#define CONV3(BM, BN)                                                                                              \
    extern "C" __global__ void __launch_bounds__(256, 2) conv3_igemm_tf32_m##BM##_n##BN(                           \
        float* out, const float* x, const float* w, const float* bias, int c, int h, int wd, int o, int stride,   \
        int pad, int ho, int wo) {                                                                                 \
        pdl_wait();                                                                                                \
        conv3_igemm<BM, BN>(out, x, w, bias, c, h, wd, o, stride, pad, ho, wo);                                    \
    }
CONV3(32, 256)
CONV3(64, 128)
CONV3(128, 128)

#ifdef __CUDA_ARCH_FEAT_SM90_ALL
// D(64×128) += A(64×8) · B(8×128) in TF32 (fp32 bits, the low mantissa bits
// ignored), both operands K-major in shared memory with the 128-byte swizzle.
__device__ __forceinline__ void wgmma_tf32_n128(float* d, unsigned long long da, unsigned long long db) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32 " WG_REGS64 "%64, %65, p, 1, 1;\n}\n"
                 : WG_ACC64(WG_RW)
                 : "l"(da), "l"(db));
}

// The Hopper implicit GEMM: the same product with warpgroup MMAs reading both
// operands from shared memory. TF32 wgmma needs K-major operands, so the
// input comes channels-last (xt [images][pixels][c], made by the caller) and
// the weights tap-major (wt [9][o][c]): a slice of CV_BK channels at one tap
// is then 128 contiguous bytes per output channel and per input pixel,
// copied by 16-byte cp.async straight into the swizzled layout the MMAs
// read. A block is two warpgroups of 64 output channels × NB·128 pixels;
// slices are loaded two ahead through CW_STAGES stages while the MMAs of the
// previous slice still run. Needs c % 4 == 0.
//
// NB = 2 (conv3_wg_tf32_w, cuda.conv_wide): 256 pixels a block, two m64n128
// products a k-step into two accumulators, so that a slice's weights are
// read from L2 once for twice the pixels: 48 KB a slice for 2.1 MFLOP
// instead of 32 KB for 1.05.
#define CW_BN 128
#define CW_STAGES 4
#define CW_TILE (128 * 128) // bytes of the A tile or of a 128-pixel B tile of a stage
template <int NB>
__device__ __forceinline__ void conv3_wg(float* __restrict__ out, const float* __restrict__ xt,
                                         const float* __restrict__ wt, const float* __restrict__ bias, int c, int h,
                                         int wd, int o, int stride, int pad, int ho, int wo) {
    constexpr int STAGE = (1 + NB) * CW_TILE; // A, then NB B tiles
    extern __shared__ __align__(16) unsigned char cw_smem[];
    // Swizzle atoms must start on 1024 bytes; the launch adds 1 KB of slack.
    const unsigned raw = smem_addr(cw_smem);
    const unsigned sbase = (raw + 1023u) & ~1023u;
    unsigned char* const sgen = cw_smem + (sbase - raw);

    const int tid = threadIdx.x, lane = tid & 31, g = lane >> 2, tg = lane & 3;
    const int wg = __shfl_sync(0xffffffffu, tid >> 7, 0), warp = (tid >> 5) & 3;
    const int P = ho * wo, hw = h * wd;
    const int p0 = blockIdx.x * (NB * CW_BN), o0 = blockIdx.y * 128, img = blockIdx.z;
    const int ncb = (c + CV_BK - 1) / CV_BK, slices = 9 * ncb;

    // This thread copies 16-byte chunk ch of rows row0 + 32i of the A tile
    // (output channels o0 + row, i < 4) and of the B tiles (pixels p0 +
    // row, i < 4·NB).
    const int ch = tid & 7, row0 = tid >> 3;
    int iy0[4 * NB], ix0[4 * NB];
#pragma unroll
    for (int i = 0; i < 4 * NB; i++) {
        const int pp = p0 + row0 + 32 * i;
        const int oy = pp / wo, ox = pp - (pp / wo) * wo;
        iy0[i] = pp < P ? oy * stride - pad : -(1 << 28); // out of the image: always padding
        ix0[i] = ox * stride - pad;
    }
    const float* ximg = xt + (i64)img * hw * c;

    auto load = [&](int sl) {
        if (sl < slices) {
            const int tap = sl / ncb, c0 = (sl - tap * ncb) * CV_BK;
            const int ky = tap / 3, kx = tap - ky * 3;
            const int cc = c0 + ch * 4;
            const bool cin = cc < c;
            unsigned char* st = sgen + (sl % CW_STAGES) * STAGE;
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const int row = row0 + 32 * i;
                const int off = row * 128 + ((ch ^ (row & 7)) << 4);
                const bool aok = cin && o0 + row < o;
                cp_async16(st + off, aok ? wt + ((i64)tap * o + o0 + row) * c + cc : wt, aok);
            }
#pragma unroll
            for (int i = 0; i < 4 * NB; i++) {
                const int row = row0 + 32 * i; // pixel row of the B tiles, 128 a tile
                const int off = row * 128 + ((ch ^ (row & 7)) << 4);
                const int iy = iy0[i] + ky, ix = ix0[i] + kx;
                const bool bok = cin && iy >= 0 && iy < h && ix >= 0 && ix < wd;
                cp_async16(st + CW_TILE + off, bok ? ximg + (i64)(iy * wd + ix) * c + cc : xt, bok);
            }
        }
        cp_async_commit(); // empty groups keep the count uniform
    };

    float d[NB][64];
#pragma unroll
    for (int b = 0; b < NB; b++) {
#pragma unroll
        for (int i = 0; i < 64; i++) d[b][i] = 0.f;
        wg_pin(d[b]);
    }

    load(0);
    load(1);
    for (int s = 0; s < slices; s++) {
        cp_async_wait<1>(); // slice s (this thread's copies)
        fence_proxy_async();
        __syncthreads(); // everyone's; and every MMA of slice s-2 is done
        const unsigned st = sbase + (s % CW_STAGES) * STAGE;
        wg_fence();
#pragma unroll
        for (int kk = 0; kk < CV_BK / 8; kk++)
#pragma unroll
            for (int b = 0; b < NB; b++)
                wgmma_tf32_n128(d[b], wg_desc(st + wg * 64 * 128 + kk * 32, 16, 1024),
                                wg_desc(st + (1 + b) * CW_TILE + kk * 32, 16, 1024));
        wg_commit();
        wg_wait<1>(); // this warpgroup's MMAs of slice s-1
#pragma unroll
        for (int b = 0; b < NB; b++) wg_pin(d[b]);
        load(s + 2); // into slice s-2's stage
    }
    wg_wait<0>();
#pragma unroll
    for (int b = 0; b < NB; b++) wg_pin(d[b]);
    cp_async_wait<0>();

    float* oi = out + (i64)img * o * P;
#pragma unroll
    for (int half = 0; half < 2; half++) {
        const int oc = o0 + wg * 64 + warp * 16 + g + half * 8;
        if (oc >= o) continue;
        const float bv = bias ? bias[oc] : 0.f;
        float* orow = oi + (i64)oc * P;
#pragma unroll
        for (int b = 0; b < NB; b++) {
#pragma unroll
            for (int j = 0; j < 16; j++) {
                const int px = p0 + b * CW_BN + j * 8 + 2 * tg;
                if (px < P) orow[px] = d[b][4 * j + 2 * half] + bv;
                if (px + 1 < P) orow[px + 1] = d[b][4 * j + 2 * half + 1] + bv;
            }
        }
    }
}

// Shared memory: CW_STAGES stages of the A tile and NB B tiles, plus 1 KB for
// aligning them (cuda/conv.go computes the same).
extern "C" __global__ void __launch_bounds__(256, 1) conv3_wg_tf32(float* __restrict__ out, const float* __restrict__ xt,
                                                                   const float* __restrict__ wt,
                                                                   const float* __restrict__ bias, int c, int h, int wd,
                                                                   int o, int stride, int pad, int ho, int wo) {
    pdl_wait();
    conv3_wg<1>(out, xt, wt, bias, c, h, wd, o, stride, pad, ho, wo);
}

extern "C" __global__ void __launch_bounds__(256, 1) conv3_wg_tf32_w(float* __restrict__ out, const float* __restrict__ xt,
                                                                     const float* __restrict__ wt,
                                                                     const float* __restrict__ bias, int c, int h,
                                                                     int wd, int o, int stride, int pad, int ho, int wo) {
    pdl_wait();
    conv3_wg<2>(out, xt, wt, bias, c, h, wd, o, stride, pad, ho, wo);
}
#endif
