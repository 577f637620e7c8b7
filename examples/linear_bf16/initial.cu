// The fused linear layer, y = gelu_tanh(x @ W^T + b), written plainly: x [m x k], W [n x k], b [n]
// and y [m x n] BF16, row-major. A 16 x 16 block of outputs (tokens x rows of W) per block of
// 16 x 16 threads, one output per thread, 16-column slices of x and W staged through shared
// memory; the products summed in FP32 on the CUDA cores, the bias and the GELU in FP32, the
// output rounded to BF16 once.
#include <cuda_bf16.h>

#define T 16

extern "C" __global__ void linear_gelu_bf16(const __nv_bfloat16* x, const __nv_bfloat16* W, const __nv_bfloat16* b,
                                            __nv_bfloat16* y, int m, int n, int k)
{
    __shared__ float xs[T][T + 1];
    __shared__ float ws[T][T + 1];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int row = blockIdx.x * T + tx;  // row of W: the output column
    const int tok = blockIdx.y * T + ty;  // row of x: the output row
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
        const float z = acc + __bfloat162float(b[row]);
        const float u = 0.7978845608028654f * (z + 0.044715f * z * z * z);
        y[(size_t)tok * n + row] = __float2bfloat16_rn(0.5f * z * (1.0f + tanhf(u)));
    }
}
