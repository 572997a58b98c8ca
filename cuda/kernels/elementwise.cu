// Elementwise operations. Grid-stride loops over 64-bit indices.
#define GRID_LOOP(i, n) for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (i64)gridDim.x * blockDim.x)

// Ops numbered as backend.UnaryOp.
__device__ __forceinline__ float unary_apply(int op, float x) {
    switch (op) {
    case 0: return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f)); // exact GELU
    case 1: return x / (1.0f + expf(-x));                               // SiLU
    case 2: return fmaxf(x, 0.0f);                                      // ReLU
    case 3: return expf(x);
    case 4: return 1.0f + expf(x);
    case 5: { float y = expm1f(fabsf(x)); return x < 0.0f ? -y : (x == 0.0f ? 0.0f : y); }
    }
    return x;
}

extern "C" __global__ void unary_f32(float* y, const float* x, i64 n, int op) {
    pdl_wait();
    GRID_LOOP(i, n) y[i] = unary_apply(op, x[i]);
}

// op 0: a+b, op 1: a*b; b repeats every bn elements (suffix broadcast).
extern "C" __global__ void binary_f32(float* y, const float* a, const float* b, i64 n, i64 bn, int op) {
    pdl_wait();
    GRID_LOOP(i, n) {
        float bv = b[bn == n ? i : i % bn];
        y[i] = op == 0 ? a[i] + bv : a[i] * bv;
    }
}

extern "C" __global__ void scale_shift_f32(float* y, const float* x, i64 n, float s, float c) {
    pdl_wait();
    GRID_LOOP(i, n) y[i] = x[i] * s + c;
}

extern "C" __global__ void f32_to_bf16_k(bf16_t* y, const float* x, i64 n) {
    pdl_wait();
    GRID_LOOP(i, n) y[i] = f32_to_bf16(x[i]);
}

// In place: round fp32 values to the nearest bf16 (trunk weights in BF16 mode).
extern "C" __global__ void round_bf16(float* y, i64 n) {
    pdl_wait();
    GRID_LOOP(i, n) y[i] = bf16_to_f32(f32_to_bf16(y[i]));
}

extern "C" __global__ void bf16_to_f32_k(float* y, const bf16_t* x, i64 n) {
    pdl_wait();
    GRID_LOOP(i, n) y[i] = bf16_to_f32(x[i]);
}

// In place on y [rows, cols]: y += bias[col] (if bias) then the activation (0 none, 1 GELU).
extern "C" __global__ void bias_act_f32(float* y, const float* bias, i64 rows, int cols, int act) {
    pdl_wait();
    GRID_LOOP(i, rows * cols) {
        float v = y[i];
        if (bias) v += bias[i % cols];
        if (act == 1) v = unary_apply(0, v);
        y[i] = v;
    }
}

// Per-channel bias on NCHW: y[n, c, hw] += bias[c].
// y [planes, hw] += bias[plane mod c], a block row per plane (image,
// channel): no division per element, which in 64 bits cost more than the
// memory traffic.
extern "C" __global__ void bias_planes_f32(float* y, const float* bias, int planes, int c, int hw) {
    pdl_wait();
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= hw) return;
    for (int p = blockIdx.y; p < planes; p += gridDim.y) y[(i64)p * hw + j] += bias[p % c];
}

// Vector forms of the hottest elementwise kernels: four values a thread with
// 16-byte loads and 32-bit indexing (the callers check that n is a multiple
// of 4, the pointers are aligned and n/4 fits an int).
__device__ __forceinline__ uint2 bf16x4(float4 v) { return make_uint2(pack_bf16(v.x, v.y), pack_bf16(v.z, v.w)); }

#define GRID_LOOP32(i, n) for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += gridDim.x * blockDim.x)

extern "C" __global__ void f32_to_bf16_v4(uint2* y, const float4* x, int n4) {
    pdl_wait();
    GRID_LOOP32(i, n4) y[i] = bf16x4(x[i]);
}

// Exact GELU rounded to bf16, four values at a time: in BF16 mode the MLP's
// hidden layer, which only the next bf16 GEMM reads.
extern "C" __global__ void gelu_bf16_v4(uint2* y, const float4* x, int n4) {
    pdl_wait();
    GRID_LOOP32(i, n4) {
        float4 v = x[i];
        v.x = unary_apply(0, v.x);
        v.y = unary_apply(0, v.y);
        v.z = unary_apply(0, v.z);
        v.w = unary_apply(0, v.w);
        y[i] = bf16x4(v);
    }
}

extern "C" __global__ void gelu_bf16_k(bf16_t* y, const float* x, i64 n) {
    pdl_wait();
    GRID_LOOP(i, n) y[i] = f32_to_bf16(unary_apply(0, x[i]));
}

// Exact GELU in place on bf16 values, rounded back to bf16 (cuda.fc1_bf16:
// the hidden GEMM wrote its output in bf16, as the reference's autocast
// does, and GELU runs on that).
__device__ __forceinline__ float bf16_lo(unsigned w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float bf16_hi(unsigned w) { return __uint_as_float(w & 0xffff0000u); }

extern "C" __global__ void gelu_bf16_inplace_v4(uint2* y, int n4) {
    pdl_wait();
    GRID_LOOP32(i, n4) {
        const uint2 w = y[i];
        y[i] = make_uint2(pack_bf16(unary_apply(0, bf16_lo(w.x)), unary_apply(0, bf16_hi(w.x))),
                          pack_bf16(unary_apply(0, bf16_lo(w.y)), unary_apply(0, bf16_hi(w.y))));
    }
}

extern "C" __global__ void gelu_bf16_inplace(bf16_t* y, i64 n) {
    pdl_wait();
    GRID_LOOP(i, n) y[i] = f32_to_bf16(unary_apply(0, bf16_to_f32(y[i])));
}

// KV append into a bf16 page, four values at a time.
extern "C" __global__ void write_kv_bf_v4(uint2* kd, uint2* vd, const float4* ks, const float4* vs, int n4) {
    pdl_wait();
    GRID_LOOP32(i, n4) {
        kd[i] = bf16x4(ks[i]);
        vd[i] = bf16x4(vs[i]);
    }
}

// copy2d_f32 on float4 columns (all leading dimensions multiples of 4).
extern "C" __global__ void copy2d_v4(float4* dst, int ldd4, const float4* src, int lds4, int rows, int cols4) {
    pdl_wait();
    GRID_LOOP32(t, rows * cols4) {
        const int r = t / cols4, c = t - r * cols4;
        dst[(i64)r * ldd4 + c] = src[(i64)r * lds4 + c];
    }
}
