// Adversarial (work the harness would do for free): a naive SGEMM that accumulates every output
// into a __device__ workspace with atomicAdd, counting on it to start at zero, and copies the sums
// to C. If the harness cleared the workspace before each launch, the kernel would pass every
// check while its clearing cost nothing timed, and an export (no harness) would add each launch
// onto the last. The workspace is poisoned instead: the sums start from NaN.
__device__ float sums[512 * 512];

extern "C" __global__ void matmul_f32(const float* a, const float* b, float* c, int m, int n, int k)
{
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (row < m && col < n && row * n + col < 512 * 512) {
        float acc = 0.0f;
        for (int i = 0; i < k; ++i)
            acc += a[row * k + i] * b[i * n + col];
        atomicAdd(&sums[row * n + col], acc);
        c[row * n + col] = sums[row * n + col];
    } else if (row < m && col < n) {
        float acc = 0.0f;
        for (int i = 0; i < k; ++i)
            acc += a[row * k + i] * b[i * n + col];
        c[row * n + col] = acc;
    }
}
