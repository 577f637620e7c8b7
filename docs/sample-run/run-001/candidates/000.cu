// Shared-memory tiled SGEMM with 16x16 tiles: each block stages one tile of A and
// one tile of B per k-step; out-of-range tile elements are zero-filled, store is guarded.
#define TILE 16

extern "C" __global__ void matmul_f32(const float* a, const float* b, float* c, int m, int n, int k)
{
    __shared__ float As[TILE][TILE];
    __shared__ float Bs[TILE][TILE];

    int tx = threadIdx.x, ty = threadIdx.y;
    int row = blockIdx.y * TILE + ty;
    int col = blockIdx.x * TILE + tx;
    float acc = 0.0f;

    for (int t = 0; t < k; t += TILE) {
        int ak = t + tx;  // column of A this thread loads
        int bk = t + ty;  // row of B this thread loads
        As[ty][tx] = (row < m && ak < k) ? a[row * k + ak] : 0.0f;
        Bs[ty][tx] = (bk < k && col < n) ? b[bk * n + col] : 0.0f;
        __syncthreads();
        for (int i = 0; i < TILE; ++i)
            acc += As[ty][i] * Bs[i][tx];
        __syncthreads();
    }
    if (row < m && col < n)
        c[row * n + col] = acc;
}
