// Adversarial (data race): 16x16 tiled kernel with both __syncthreads() removed. Tiles are
// loaded transposed (thread (tx,ty) fills As[tx][ty], Bs[tx][ty]), so every warp consumes
// shared data written by other warps, which may not have stored it yet or already overwrote it.
extern "C" __global__ void matmul_f32(const float* a, const float* b, float* c, int m, int n, int k)
{
    __shared__ float As[16][16];
    __shared__ float Bs[16][16];

    int tx = threadIdx.x, ty = threadIdx.y;
    int row0 = blockIdx.y * 16, col0 = blockIdx.x * 16;
    int row = row0 + ty, col = col0 + tx;
    float acc = 0.0f;

    for (int t = 0; t < k; t += 16) {
        int ar = row0 + tx, ak = t + ty;  // A element (ar, ak) -> As[tx][ty]
        int bk = t + tx, bc = col0 + ty;  // B element (bk, bc) -> Bs[tx][ty]
        As[tx][ty] = (ar < m && ak < k) ? a[ar * k + ak] : 0.0f;
        Bs[tx][ty] = (bk < k && bc < n) ? b[bk * n + bc] : 0.0f;
        // missing __syncthreads()
        for (int i = 0; i < 16; ++i)
            acc += As[ty][i] * Bs[i][tx];
        // missing __syncthreads()
    }
    if (row < m && col < n)
        c[row * n + col] = acc;
}
