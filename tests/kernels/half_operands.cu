// Adversarial (precision cheat): rounds every A and B operand to fp16 (via PTX cvt, no
// cuda_fp16.h) before multiplying, accumulating in float; off by ~1e-3 relative.
// Expected: precision on an FP32 experiment (FP16 conversions in its SASS, refused before any
// launch); mismatch where limits.precision allows "fp16" (the tolerance still judges the numbers).
__device__ __forceinline__ float round_to_half(float x)
{
    unsigned short h;
    float r;
    asm volatile("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(x));
    asm volatile("cvt.f32.f16 %0, %1;" : "=f"(r) : "h"(h));
    return r;
}

extern "C" __global__ void matmul_f32(const float* a, const float* b, float* c, int m, int n, int k)
{
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= m || col >= n)
        return;
    float acc = 0.0f;
    for (int i = 0; i < k; ++i)
        acc += round_to_half(a[row * k + i]) * round_to_half(b[i * n + col]);
    c[row * n + col] = acc;
}
