// RoPE on x [rows = B·N, H, D] with cos/sin tables [N, D/2]; one thread per
// rotated pair. pairing 0: halves-2D (rotate-half inside each half of the
// head), 1: interleaved (2m, 2m+1). See backend.RoPEPairing.
extern "C" __global__ void rope_f32(float* y, const float* x, const float* cs, const float* sn,
                                    i64 rows, int n, int h, int d, int pairing) {
    pdl_wait();
    const int half = d / 2;
    const i64 total = rows * h * half;
    for (i64 t = (i64)blockIdx.x * blockDim.x + threadIdx.x; t < total; t += (i64)gridDim.x * blockDim.x) {
        const int m = (int)(t % half);
        const i64 rh = t / half;          // row·H + head
        const int tok = (int)((rh / h) % n);
        int i, j;
        rope_pair(m, d, pairing, i, j);
        const float c = cs[(i64)tok * half + m], s = sn[(i64)tok * half + m];
        const float* xr = x + rh * d;
        float* yr = y + rh * d;
        const float xi = xr[i], xj = xr[j];
        yr[i] = xi * c - xj * s;
        yr[j] = xj * c + xi * s;
    }
}
