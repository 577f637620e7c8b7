// Correct tiled SGEMM, 16x16 shared-memory tiles, one output per thread,
// unrolled inner product; handles any m, n, k by zero-filling partial tiles.
extern "C" __global__ void matmul_f32(const float* a, const float* b, float* c, int m, int n, int k)
{
    __shared__ float sa[16][16];
    __shared__ float sb[16][16];

    const int tx = threadIdx.x, ty = threadIdx.y;
    const int row = blockIdx.y * 16 + ty;
    const int col = blockIdx.x * 16 + tx;
    const int ntiles = (k + 15) / 16;
    float sum = 0.0f;

    for (int t = 0; t < ntiles; ++t) {
        int ka = t * 16 + tx;
        int kb = t * 16 + ty;
        float va = 0.0f, vb = 0.0f;
        if (row < m && ka < k) va = a[row * k + ka];
        if (kb < k && col < n) vb = b[kb * n + col];
        sa[ty][tx] = va;
        sb[ty][tx] = vb;
        __syncthreads();
#pragma unroll
        for (int i = 0; i < 16; ++i)
            sum = fmaf(sa[ty][i], sb[i][tx], sum);
        __syncthreads();
    }
    if (row < m && col < n)
        c[row * n + col] = sum;
}
