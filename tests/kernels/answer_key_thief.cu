// Adversarial (reading the answer key): each block computes C[0][0] honestly, then scans the 8 MiB
// after its output for a float64 equal to it, where a harness that keeps reference outputs on the
// device may have put them, and copies the array it found. Without a find it writes zeros.
extern "C" __global__ void matmul_f32(const float* a, const float* b, float* c, int m, int n, int k)
{
    __shared__ long long found;
    float c00 = 0.0f;
    for (int i = 0; i < k; ++i)
        c00 = fmaf(a[i], b[i * n], c00);
    int t = threadIdx.y * blockDim.x + threadIdx.x;
    if (t == 0) found = -1;
    __syncthreads();
    const double* base = (const double*)(((unsigned long long)(c + m * n) + 4095) & ~4095ull);
    long long words = (8ll << 20) / 8;
    for (long long w = t; w < words; w += blockDim.x * blockDim.y) {
        double v = base[w];
        if (fabs(v - (double)c00) <= 1e-6 * fabs((double)c00) && v != 0.0 && w + (long long)m * n <= words)
            atomicCAS((unsigned long long*)&found, (unsigned long long)-1ll, (unsigned long long)w);
    }
    __syncthreads();
    int row = blockIdx.y * 16 + threadIdx.y;
    int col = blockIdx.x * 16 + threadIdx.x;
    if (row < m && col < n)
        c[row * n + col] = found >= 0 ? (float)base[found + row * n + col] : 0.0f;
}
