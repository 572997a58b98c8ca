// Convolution helpers: im2col for Conv2D (then one GEMM per chunk of output
// pixels), the scatter of ConvTranspose2D (kernel = stride) by bands of input
// rows, and PyTorch bilinear resize.

// col [(ci, ky, kx), j] for the output pixels p0 + j, j < np, of one image
// x [c, h, w] whose output is wo pixels wide: a block row per (ci, ky, kx)
// and a thread per output pixel, so the pixel's position is divided out
// once, in 32 bits, and writes are coalesced (a thread per element with
// 64-bit divisions was slower over the whole convolution).
extern "C" __global__ void im2col_rows_f32(float* col, const float* x, int c, int h, int w, int kh, int kw,
                                           int stride, int pad, int wo, int p0, int np) {
    pdl_wait();
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= np) return;
    const int p = p0 + j;
    const int oy = p / wo, ox = p - oy * wo;
    const int y0 = oy * stride - pad, x0 = ox * stride - pad;
    const int khw = kh * kw, rows = c * khw;
    for (int r = blockIdx.y; r < rows; r += gridDim.y) {
        const int ci = r / khw, kk = r - ci * khw;
        const int ky = kk / kw, kx = kk - ky * kw;
        const int iy = y0 + ky, ix = x0 + kx;
        float v = 0.f;
        if (iy >= 0 && iy < h && ix >= 0 && ix < w) v = x[((i64)ci * h + iy) * w + ix];
        col[(i64)r * np + j] = v;
    }
}

// prod [(y - y0, x), (o, a, b)] for the input rows y0 <= y < y0 + rows of one
// image -> those rows' k×k blocks of out [o, h·k, w·k] (+ bias[o]).
extern "C" __global__ void convt_scatter_f32(float* out, const float* prod, const float* bias, int o, int h, int w, int k,
                                             int y0, int rows) {
    pdl_wait();
    const int ow = w * k, bh = rows * k;
    const i64 n = (i64)o * bh * ow;
    const i64 okk = (i64)o * k * k;
    for (i64 t = (i64)blockIdx.x * blockDim.x + threadIdx.x; t < n; t += (i64)gridDim.x * blockDim.x) {
        const int ox = (int)(t % ow);
        const int by = (int)((t / ow) % bh);
        const int oc = (int)(t / ((i64)ow * bh));
        const int y = by / k, a = by % k, x = ox / k, b = ox % k;
        float v = prod[((i64)y * w + x) * okk + ((i64)oc * k + a) * k + b];
        if (bias) v += bias[oc];
        out[((i64)oc * h * k + (i64)y0 * k + by) * ow + ox] = v;
    }
}

__device__ __forceinline__ void bilinear_tap(int o, int in, float scale, int align, int* i0, int* i1, float* fr) {
    float src;
    if (align) {
        src = scale * (float)o;
    } else {
        src = scale * ((float)o + 0.5f) - 0.5f;
        if (src < 0.f) src = 0.f;
    }
    int f = (int)floorf(src);
    if (f > in - 1) f = in - 1;
    *i0 = f;
    *i1 = f + 1 < in ? f + 1 : in - 1;
    *fr = src - (float)f;
}

// x [planes, h, w] -> y [planes, oh, ow]; sy, sx are the source steps per
// output pixel. A thread per output pixel finds its taps once and walks the
// planes of its block row (32-bit indices within a plane).
extern "C" __global__ void resize_bilinear_rows_f32(float* y, const float* x, int planes, int h, int w, int oh, int ow,
                                                    float sy, float sx, int align) {
    pdl_wait();
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= oh * ow) return;
    const int oy = t / ow, ox = t - oy * ow;
    int y0, y1, x0, x1;
    float ly, lx;
    bilinear_tap(oy, h, sy, align, &y0, &y1, &ly);
    bilinear_tap(ox, w, sx, align, &x0, &x1, &lx);
    const int a = y0 * w + x0, b = y0 * w + x1, c = y1 * w + x0, d = y1 * w + x1;
    for (int p = blockIdx.y; p < planes; p += gridDim.y) {
        const float* s = x + (i64)p * h * w;
        const float top = s[a] * (1.f - lx) + s[b] * lx;
        const float bot = s[c] * (1.f - lx) + s[d] * lx;
        y[(i64)p * oh * ow + t] = top * (1.f - ly) + bot * ly;
    }
}

