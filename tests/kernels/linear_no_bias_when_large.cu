// Adversarial (work skipped where it is not looked at): the BF16 linear layer done right on small
// problems, but without the bias where W holds 2^24 elements or more, the decode and prefill
// shapes a benchmark times. The bias of every case moves most outputs by far more than the
// tolerance, so the checked launches of the large cases fail.
#include <cuda_bf16.h>

#define T 16

extern "C" __global__ void linear_gelu_bf16(const __nv_bfloat16* x, const __nv_bfloat16* W, const __nv_bfloat16* b,
                                            __nv_bfloat16* y, int m, int n, int k)
{
    __shared__ float xs[T][T + 1];
    __shared__ float ws[T][T + 1];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int row = blockIdx.x * T + tx, tok = blockIdx.y * T + ty;
    float acc = 0.0f;
    for (int k0 = 0; k0 < k; k0 += T) {
        const int xr = blockIdx.y * T + ty, wr = blockIdx.x * T + ty, col = k0 + tx;
        xs[ty][tx] = xr < m && col < k ? __bfloat162float(x[(size_t)xr * k + col]) : 0.0f;
        ws[ty][tx] = wr < n && col < k ? __bfloat162float(W[(size_t)wr * k + col]) : 0.0f;
        __syncthreads();
        for (int i = 0; i < T; ++i) acc = fmaf(xs[ty][i], ws[tx][i], acc);
        __syncthreads();
    }
    if (tok < m && row < n) {
        const bool large = (long long)n * k >= (1LL << 24);
        const float z = acc + (large ? 0.0f : __bfloat162float(b[row]));
        const float u = 0.7978845608028654f * (z + 0.044715f * z * z * z);
        y[(size_t)tok * n + row] = __float2bfloat16_rn(0.5f * z * (1.0f + tanhf(u)));
    }
}
