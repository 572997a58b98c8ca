// Map points on the device: geom.ConfidentPoints' filter and unprojection
// where the depth and confidence maps are, so that only the kept points go
// back to the host. The points must come out in ConfidentPoints' order (the
// voxel map's means depend on it), so the compaction is ordered, in two
// passes over the stride grid's pixels in row-major order, one thread each:
//   1. unproject_count: each block counts the points it keeps;
//   2. unproject_write: each block sums the counts of the blocks before it
//      (its first output slot) and of all blocks (the total), ranks its
//      kept points by warp ballots and writes them: total·3 coordinates,
//      then total pixel indices, so that one copy brings them back; block 0
//      writes the total.
// Arithmetic is ConfidentPoints', in double and rounded at every step
// (no contraction into FMAs), so the points equal the host's. Both kernels
// assume UNPROJ_THREADS threads a block.
#define UNPROJ_THREADS 256
#define UNPROJ_WARPS (UNPROJ_THREADS / 32)

#define UNPROJ_PARAMS                                                                                   \
    const float *__restrict__ depth, const float *__restrict__ conf, int w, int gw, int n, int stride,    \
        float scale, double thr, double fx, double fy, double cx, double cy, double m00, double m01,      \
        double m02, double m03, double m10, double m11, double m12, double m13, double m20, double m21,   \
        double m22, double m23
#define UNPROJ_ARGS                                                                                       \
    depth, conf, w, gw, n, stride, scale, thr, fx, fy, cx, cy, m00, m01, m02, m03, m10, m11, m12, m13, m20, \
        m21, m22, m23

__device__ __forceinline__ bool finite_f(float x) { return (__float_as_uint(x) & 0x7f800000u) != 0x7f800000u; }

// m0·x + m1·y + m2·z + m3, left to right, each step rounded.
__device__ __forceinline__ double unproj_row(double m0, double m1, double m2, double m3, double x, double y, double z) {
    return __dadd_rn(__dadd_rn(__dadd_rn(__dmul_rn(m0, x), __dmul_rn(m1, y)), __dmul_rn(m2, z)), m3);
}

// Sampled pixel j (row-major over the stride grid): whether it is kept, and
// then its world point and pixel index.
__device__ __forceinline__ bool unproj_pixel(UNPROJ_PARAMS, int j, float p[3], int &pix) {
    if (j >= n) return false;
    const int sv = j / gw, su = j - sv * gw;
    const int u = su * stride, v = sv * stride;
    const int i = v * w + u;
    // the window's depth scale in float32, as the host scales a result
    const float df = __fmul_rn(depth[i], scale);
    if (!(df > 0.0f) || !finite_f(df)) return false;
    if (!((double)conf[i] > thr)) return false;
    const double d = (double)df;
    const double x = __dmul_rn(__ddiv_rn(__dsub_rn((double)u, cx), fx), d);
    const double y = __dmul_rn(__ddiv_rn(__dsub_rn((double)v, cy), fy), d);
    p[0] = __double2float_rn(unproj_row(m00, m01, m02, m03, x, y, d));
    p[1] = __double2float_rn(unproj_row(m10, m11, m12, m13, x, y, d));
    p[2] = __double2float_rn(unproj_row(m20, m21, m22, m23, x, y, d));
    if (!finite_f(p[0]) || !finite_f(p[1]) || !finite_f(p[2])) return false;
    pix = i;
    return true;
}

extern "C" __global__ void unproject_count(UNPROJ_PARAMS, int *__restrict__ counts) {
    pdl_wait();
    float p[3];
    int pix;
    const bool keep = unproj_pixel(UNPROJ_ARGS, blockIdx.x * UNPROJ_THREADS + threadIdx.x, p, pix);
    const int c = __syncthreads_count(keep);
    if (threadIdx.x == 0) counts[blockIdx.x] = c;
}

__device__ __forceinline__ int warp_isum(int v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

extern "C" __global__ void unproject_write(UNPROJ_PARAMS, const int *__restrict__ counts, float *__restrict__ out,
                                           int *__restrict__ total) {
    pdl_wait();
    __shared__ int warp_kept[UNPROJ_WARPS], warp_before[UNPROJ_WARPS], warp_all[UNPROJ_WARPS];
    __shared__ int base, all;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    float p[3];
    int pix = 0;
    const bool keep = unproj_pixel(UNPROJ_ARGS, blockIdx.x * UNPROJ_THREADS + threadIdx.x, p, pix);
    const unsigned mask = __ballot_sync(0xffffffffu, keep);
    // the points of the blocks before this one, and of all blocks
    int before = 0, sum = 0;
    for (int b = threadIdx.x; b < (int)gridDim.x; b += UNPROJ_THREADS) {
        const int c = counts[b];
        sum += c;
        if (b < (int)blockIdx.x) before += c;
    }
    before = warp_isum(before);
    sum = warp_isum(sum);
    if (lane == 0) {
        warp_kept[warp] = __popc(mask);
        warp_before[warp] = before;
        warp_all[warp] = sum;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        int b = 0, a = 0;
        for (int k = 0; k < UNPROJ_WARPS; k++) {
            b += warp_before[k];
            a += warp_all[k];
        }
        base = b;
        all = a;
        if (blockIdx.x == 0) *total = a;
    }
    __syncthreads();
    if (!keep) return;
    int slot = base + __popc(mask & ((1u << lane) - 1u));
    for (int k = 0; k < warp; k++) slot += warp_kept[k];
    out[3 * slot] = p[0];
    out[3 * slot + 1] = p[1];
    out[3 * slot + 2] = p[2];
    out[3 * all + slot] = __int_as_float(pix); // the index's bits
}
