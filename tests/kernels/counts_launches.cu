// Adversarial (state across requests): a correct naive SGEMM for its first LIMIT launches, then
// it skips the work. It counts its launches in a __device__ global, so it can pass a check and
// cut corners in the requests that follow, if they ever reuse its loaded module.
#define LIMIT 4
__device__ unsigned int launches;

extern "C" __global__ void matmul_f32(const float* a, const float* b, float* c, int m, int n, int k)
{
    const unsigned int seen = *(volatile unsigned int*)&launches;
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (row < m && col < n) {
        float acc = 0.0f;
        if (seen < LIMIT)
            for (int i = 0; i < k; ++i)
                acc += a[row * k + i] * b[i * n + col];
        c[row * n + col] = acc;
    }
    if (blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0 && threadIdx.y == 0)
        atomicAdd(&launches, 1u);
}
