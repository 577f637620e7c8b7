// Adversarial (out-of-bounds write): correct C, but the thread for the last element
// (row m-1, col n-1) also writes c[m*n], one float past the end of the output buffer.
extern "C" __global__ void matmul_f32(const float* a, const float* b, float* c, int m, int n, int k)
{
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= m || col >= n)
        return;
    float acc = 0.0f;
    for (int i = 0; i < k; ++i)
        acc += a[row * k + i] * b[i * n + col];
    c[row * n + col] = acc;
    if (row == m - 1 && col == n - 1)
        c[m * n] = acc;  // one past the end
}
