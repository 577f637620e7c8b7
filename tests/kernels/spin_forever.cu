// Adversarial (hang): correct naive kernel for small problems, but when m*n*k >= 256^3
// every thread spins on a volatile read of a flag that nothing ever sets.
__device__ int never_set;  // zero at module load, never written

extern "C" __global__ void matmul_f32(const float* a, const float* b, float* c, int m, int n, int k)
{
    if ((long long)m * n * k >= 256LL * 256LL * 256LL) {
        while (*(volatile int*)&never_set == 0) {
        }
    }
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= m || col >= n)
        return;
    float acc = 0.0f;
    for (int i = 0; i < k; ++i)
        acc += a[row * k + i] * b[i * n + col];
    c[row * n + col] = acc;
}
