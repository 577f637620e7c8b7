// Correct naive SGEMM: one thread per output element, fmaf accumulation.
extern "C" __global__ void matmul_f32(const float* a, const float* b, float* c, int m, int n, int k)
{
    int row = blockIdx.y * 16 + threadIdx.y;
    int col = blockIdx.x * 16 + threadIdx.x;
    if (row < m && col < n) {
        const float* arow = a + row * k;
        float acc = 0.0f;
        for (int i = 0; i < k; ++i)
            acc = fmaf(arow[i], b[i * n + col], acc);
        c[row * n + col] = acc;
    }
}
