// Implicit-GEMM 3×3 convolution on the TF32 tensor cores (as the reference's
// cuDNN convolutions, which PyTorch runs in TF32): out[o, p] = Σ_k w[o, k] ·
// col[k, p] over k = (ci, ky, kx), with the im2col columns gathered straight
// into shared memory a 16-row slice at a time instead of being written to
// and read back from a scratch buffer (9× the input per convolution: that
// traffic, not the GEMM, dominated the DPT head). The bias is added on the
// way out.
//
// A block computes BM output channels × 128 output pixels of one image with
// 8 warps (BM/32 along channels × the rest along pixels), each warp 32
// channels × WN pixels as m16n8k8 tiles; slices are double-buffered through
// registers so the next slice's loads are in flight during the MMAs.
#define CBN 128
#define CBK 16
#define AS_LD 20  // 16 + 4: conflict-free A fragment reads
#define BS_LD 136 // 128 + 8: conflict-free B fragment reads

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

template <int BM>
__device__ __forceinline__ void conv3_igemm(float* __restrict__ out, const float* __restrict__ x,
                                            const float* __restrict__ w, const float* __restrict__ bias, int c, int h,
                                            int wd, int o, int stride, int pad, int ho, int wo) {
    constexpr int WM = BM / 32;   // warps along channels
    constexpr int WNW = 8 / WM;   // warps along pixels
    constexpr int WN = CBN / WNW; // pixels per warp
    constexpr int NT = WN / 8;    // m16n8 tiles per warp along pixels
    constexpr int AL = BM * CBK / 256;
    __shared__ unsigned As[2][BM][AS_LD];
    __shared__ unsigned Bs[2][CBK][BS_LD];

    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, tg = lane & 3;
    const int wm = warp / WNW, wn = warp % WNW;
    const int K = c * 9, P = ho * wo;
    const int p0 = blockIdx.x * CBN, o0 = blockIdx.y * BM;
    const float* xi = x + (i64)blockIdx.z * c * h * wd;
    float* oi = out + (i64)blockIdx.z * o * P;

    // This thread gathers rows kb .. kb+7 of every slice for one pixel.
    const int bpx = tid & (CBN - 1), kb = (tid >> 7) * 8;
    const int pp = p0 + bpx;
    const bool pin = pp < P;
    const int oy = pin ? pp / wo : 0, ox = pin ? pp - oy * wo : 0;
    const int iy0 = oy * stride - pad, ix0 = ox * stride - pad;
    const int hw = h * wd;

    float ra[AL], rb[8];
    auto load = [&](int k0) {
#pragma unroll
        for (int i = 0; i < AL; i++) {
            const int e = tid + 256 * i, row = e / CBK, col = e % CBK;
            const int oc = o0 + row, k = k0 + col;
            ra[i] = (oc < o && k < K) ? w[(i64)oc * K + k] : 0.f;
        }
        int k = k0 + kb;
        int ci = k / 9, r = k - ci * 9;
        int ky = r / 3, kx = r - ky * 3;
#pragma unroll
        for (int i = 0; i < 8; i++) {
            const int iy = iy0 + ky, ix = ix0 + kx;
            rb[i] = (pin && k < K && iy >= 0 && iy < h && ix >= 0 && ix < wd) ? xi[ci * hw + iy * wd + ix] : 0.f;
            k++;
            if (++kx == 3) {
                kx = 0;
                if (++ky == 3) {
                    ky = 0;
                    ci++;
                }
            }
        }
    };
    auto store = [&](int buf) {
#pragma unroll
        for (int i = 0; i < AL; i++) {
            const int e = tid + 256 * i;
            As[buf][e / CBK][e % CBK] = to_tf32(ra[i]);
        }
#pragma unroll
        for (int i = 0; i < 8; i++) Bs[buf][kb + i][bpx] = to_tf32(rb[i]);
    };

    float acc[2][NT][4];
#pragma unroll
    for (int mt = 0; mt < 2; mt++)
#pragma unroll
        for (int nt = 0; nt < NT; nt++) acc[mt][nt][0] = acc[mt][nt][1] = acc[mt][nt][2] = acc[mt][nt][3] = 0.f;

    const int slices = (K + CBK - 1) / CBK;
    load(0);
    store(0);
    __syncthreads();
    for (int s = 0; s < slices; s++) {
        const int buf = s & 1;
        if (s + 1 < slices) load((s + 1) * CBK);
#pragma unroll
        for (int ks = 0; ks < CBK; ks += 8) {
            unsigned a[2][4];
#pragma unroll
            for (int mt = 0; mt < 2; mt++) {
                const int r = wm * 32 + mt * 16 + g;
                a[mt][0] = As[buf][r][ks + tg];
                a[mt][1] = As[buf][r + 8][ks + tg];
                a[mt][2] = As[buf][r][ks + tg + 4];
                a[mt][3] = As[buf][r + 8][ks + tg + 4];
            }
#pragma unroll
            for (int nt = 0; nt < NT; nt++) {
                const int cb = wn * WN + nt * 8 + g;
                const unsigned b0 = Bs[buf][ks + tg][cb], b1 = Bs[buf][ks + tg + 4][cb];
#pragma unroll
                for (int mt = 0; mt < 2; mt++) mma_tf32(acc[mt][nt], a[mt], b0, b1);
            }
        }
        // The other buffer was last read in slice s-1, before the barrier
        // that ended it.
        if (s + 1 < slices) store(buf ^ 1);
        __syncthreads();
    }

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

#define CONV3(BM)                                                                                                  \
    extern "C" __global__ void __launch_bounds__(256) conv3_igemm_tf32_m##BM(                                      \
        float* out, const float* x, const float* w, const float* bias, int c, int h, int wd, int o, int stride,   \
        int pad, int ho, int wo) {                                                                                 \
        conv3_igemm<BM>(out, x, w, bias, c, h, wd, o, stride, pad, ho, wo);                                        \
    }
CONV3(32)
CONV3(64)
CONV3(128)
