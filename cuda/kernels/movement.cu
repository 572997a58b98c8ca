// Data movement: strided 2D copies (slices and concatenations of columns)
// and a tiled batched transpose of the last two dimensions.
extern "C" __global__ void copy2d_f32(float* dst, i64 ldd, const float* src, i64 lds, i64 rows, i64 cols) {
    pdl_wait();
    const i64 n = rows * cols;
    for (i64 t = (i64)blockIdx.x * blockDim.x + threadIdx.x; t < n; t += (i64)gridDim.x * blockDim.x) {
        const i64 r = t / cols, c = t % cols;
        dst[r * ldd + c] = src[r * lds + c];
    }
}

// x [batch, a, b] -> y [batch, b, a]; 32×32 tiles, blocks (32, 8).
extern "C" __global__ void transpose_f32(float* y, const float* x, int a, int b) {
    pdl_wait();
    __shared__ float tile[32][33];
    const i64 base = (i64)blockIdx.z * a * b;
    const int bx = blockIdx.x * 32, by = blockIdx.y * 32;
    for (int k = threadIdx.y; k < 32; k += 8) {
        const int r = by + k, c = bx + threadIdx.x;
        if (r < a && c < b) tile[k][threadIdx.x] = x[base + (i64)r * b + c];
    }
    __syncthreads();
    for (int k = threadIdx.y; k < 32; k += 8) {
        const int r = bx + k, c = by + threadIdx.x;
        if (r < b && c < a) y[base + (i64)r * a + c] = tile[threadIdx.x][k];
    }
}

// KV append: rows of k and v (fp32, [n, hd]) into a page of a bf16 or fp32 store.
extern "C" __global__ void write_kv_bf(bf16_t* kd, bf16_t* vd, const float* ks, const float* vs, i64 n) {
    pdl_wait();
    for (i64 t = (i64)blockIdx.x * blockDim.x + threadIdx.x; t < n; t += (i64)gridDim.x * blockDim.x) {
        kd[t] = f32_to_bf16(ks[t]);
        vd[t] = f32_to_bf16(vs[t]);
    }
}

extern "C" __global__ void write_kv_f32(float* kd, float* vd, const float* ks, const float* vs, i64 n) {
    pdl_wait();
    for (i64 t = (i64)blockIdx.x * blockDim.x + threadIdx.x; t < n; t += (i64)gridDim.x * blockDim.x) {
        kd[t] = ks[t];
        vd[t] = vs[t];
    }
}
