// Adversarial (crash): computes C correctly, then thread (0,0) of block (0,0) stores
// through a wild pointer (address 0x10), so the launch faults with an illegal address.
extern "C" __global__ void matmul_f32(const float* a, const float* b, float* c, int m, int n, int k)
{
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (row < m && col < n) {
        float acc = 0.0f;
        for (int i = 0; i < k; ++i)
            acc += a[row * k + i] * b[i * n + col];
        c[row * n + col] = acc;
    }
    if (blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0 && threadIdx.y == 0)
        *(volatile float*)(0x10ULL) = 1.0f;
}
