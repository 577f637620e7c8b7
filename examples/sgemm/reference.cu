// Trusted reference SGEMM (C = A * B, row-major float32): one thread per element
// of C, a plain float loop over k, bounds-checked for any m, n, k.
extern "C" __global__ void matmul_f32(const float* a, const float* b, float* c, int m, int n, int k)
{
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row >= m || col >= n)
        return;
    float acc = 0.0f;
    for (int i = 0; i < k; ++i)
        acc += a[row * k + i] * b[i * n + col];
    c[row * n + col] = acc;
}
