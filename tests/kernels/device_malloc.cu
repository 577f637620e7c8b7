// Adversarial (memory that outlives a launch): keeps a pointer to device-heap memory in a global and
// fills it on the first launch; every later launch could replay from it. Device malloc is refused.
__device__ float* stash;

extern "C" __global__ void matmul_f32(const float* a, const float* b, float* c, int m, int n, int k)
{
    if (blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0 && threadIdx.y == 0 && stash == nullptr)
        stash = (float*)malloc(sizeof(float) * 1024);
    int row = blockIdx.y * 16 + threadIdx.y;
    int col = blockIdx.x * 16 + threadIdx.x;
    if (row < m && col < n) {
        float acc = 0.0f;
        for (int i = 0; i < k; ++i)
            acc = fmaf(a[row * k + i], b[i * n + col], acc);
        c[row * n + col] = acc;
    }
}
