// Convolution helpers: im2col for Conv2D (then one GEMM per image), the
// scatter of ConvTranspose2D (kernel = stride), and PyTorch bilinear resize.

// col [(ci, ky, kx), (oy, ox)] of one image x [c, h, w].
extern "C" __global__ void im2col_f32(float* col, const float* x, int c, int h, int w, int kh, int kw,
                                      int stride, int pad, int ho, int wo) {
    const i64 hw = (i64)ho * wo, n = (i64)c * kh * kw * hw;
    for (i64 t = (i64)blockIdx.x * blockDim.x + threadIdx.x; t < n; t += (i64)gridDim.x * blockDim.x) {
        const i64 r = t / hw;
        const int p = (int)(t % hw);
        const int ci = (int)(r / (kh * kw)), ky = (int)((r / kw) % kh), kx = (int)(r % kw);
        const int oy = p / wo, ox = p % wo;
        const int iy = oy * stride - pad + ky, ix = ox * stride - pad + kx;
        col[t] = (iy >= 0 && iy < h && ix >= 0 && ix < w) ? x[((i64)ci * h + iy) * w + ix] : 0.f;
    }
}

// prod [(y, x), (o, a, b)] of one image -> out [o, h·k, w·k] (+ bias[o]).
extern "C" __global__ void convt_scatter_f32(float* out, const float* prod, const float* bias, int o, int h, int w, int k) {
    const int ow = w * k;
    const i64 n = (i64)o * h * k * ow;
    const i64 okk = (i64)o * k * k;
    for (i64 t = (i64)blockIdx.x * blockDim.x + threadIdx.x; t < n; t += (i64)gridDim.x * blockDim.x) {
        const int ox = (int)(t % ow);
        const int oy = (int)((t / ow) % (h * k));
        const int oc = (int)(t / ((i64)ow * h * k));
        const int y = oy / k, a = oy % k, x = ox / k, b = ox % k;
        float v = prod[((i64)y * w + x) * okk + ((i64)oc * k + a) * k + b];
        if (bias) v += bias[oc];
        out[t] = v;
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

// x [planes, h, w] -> y [planes, oh, ow]; sy, sx are the source steps per output pixel.
extern "C" __global__ void resize_bilinear_f32(float* y, const float* x, i64 planes, int h, int w, int oh, int ow,
                                               float sy, float sx, int align) {
    const i64 n = planes * oh * ow;
    for (i64 t = (i64)blockIdx.x * blockDim.x + threadIdx.x; t < n; t += (i64)gridDim.x * blockDim.x) {
        const int ox = (int)(t % ow), oy = (int)((t / ow) % oh);
        const i64 p = t / ((i64)oh * ow);
        int y0, y1, x0, x1;
        float ly, lx;
        bilinear_tap(oy, h, sy, align, &y0, &y1, &ly);
        bilinear_tap(ox, w, sx, align, &x0, &x1, &lx);
        const float* s = x + p * h * w;
        const float top = s[y0 * w + x0] * (1.f - lx) + s[y0 * w + x1] * lx;
        const float bot = s[y1 * w + x0] * (1.f - lx) + s[y1 * w + x1] * lx;
        y[t] = top * (1.f - ly) + bot * ly;
    }
}
