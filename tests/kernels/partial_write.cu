// Adversarial (incomplete output): computes correct values but never stores the
// last row of C (row m-1), leaving it with whatever the buffer held before.
extern "C" __global__ void matmul_f32(const float* a, const float* b, float* c, int m, int n, int k)
{
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= m - 1 || col >= n)  // skips row m-1
        return;
    float acc = 0.0f;
    for (int i = 0; i < k; ++i)
        acc += a[row * k + i] * b[i * n + col];
    c[row * n + col] = acc;
}
