"""Ceilings measured in the same call as our kernels (run by run.sh 'peak'):
the bf16 matrix rate of the GPU (cuBLAS through PyTorch, 8192^3, random data)
and PyTorch's SDPA backends (flash, cuDNN, efficient) on the attention
benchmarks' problems, one layer each: a global layer (one frame's 1005
queries over 72 360 keys, 16 heads x 64, bf16; BenchmarkPagedAttention) and
a frame layer (1005 x 1005; BenchmarkFrameAttention)."""
import torch
import torch.nn.functional as F


def bench(fn, reps=50):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    times.sort()
    return times[len(times) // 2]


torch.manual_seed(0)
dev = "cuda"
n = 8192
x = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
y = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
ms = bench(lambda: x @ y)
print(f"peak: bf16 matmul 8192^3 {ms:.3f} ms = {2 * n**3 / ms / 1e9:.0f} TFLOP/s")

h, d = 16, 64
for layer, nq, nk in [("global", 1005, 72 * 999 + 432), ("frame", 1005, 1005)]:
    q = torch.randn(1, h, nq, d, device=dev, dtype=torch.bfloat16)
    k = torch.randn(1, h, nk, d, device=dev, dtype=torch.bfloat16)
    v = torch.randn(1, h, nk, d, device=dev, dtype=torch.bfloat16)
    flops = 4 * nq * nk * h * d
    for name, backend in [("flash", torch.nn.attention.SDPBackend.FLASH_ATTENTION),
                          ("cudnn", torch.nn.attention.SDPBackend.CUDNN_ATTENTION),
                          ("efficient", torch.nn.attention.SDPBackend.EFFICIENT_ATTENTION)]:
        try:
            with torch.nn.attention.sdpa_kernel(backend):
                ms = bench(lambda: F.scaled_dot_product_attention(q, k, v))
            print(f"peak: SDPA {name} {layer} layer {nq}x{nk} 16x64 bf16 {ms * 1e3:.1f} us = {flops / ms / 1e9:.0f} TFLOP/s")
        except Exception as e:  # a backend may be unavailable for this shape
            print(f"peak: SDPA {name} {layer} layer unavailable: {str(e).splitlines()[0][:120]}")
    del q, k, v
