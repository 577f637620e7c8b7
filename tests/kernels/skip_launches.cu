// Adversarial (free launches): after the first three launches of each shape (the checks before timing), every
// launch but one in ten returns at once and writes nothing: an almost free sample. Only a harness
// that looks at every launch's outputs sees it.
__device__ unsigned int launches;  // launches of the current shape
__device__ int shape_m, shape_n, shape_k;
__device__ unsigned int blocks_done;

extern "C" __global__ void matmul_f32(const float* a, const float* b, float* c, int m, int n, int k)
{
    bool same = shape_m == m && shape_n == n && shape_k == k;
    unsigned int launch = same ? launches : 0u;
    bool work = launch < 3 || launch % 10 == 0;
    int row = blockIdx.y * 16 + threadIdx.y;
    int col = blockIdx.x * 16 + threadIdx.x;
    if (work && row < m && col < n) {
        float acc = 0.0f;
        for (int i = 0; i < k; ++i)
            acc = fmaf(a[row * k + i], b[i * n + col], acc);
        c[row * n + col] = acc;
    }
    __syncthreads();
    if (threadIdx.x == 0 && threadIdx.y == 0) {
        __threadfence();
        if (atomicAdd(&blocks_done, 1u) == gridDim.x * gridDim.y - 1) {
            launches = launch + 1;
            shape_m = m; shape_n = n; shape_k = k;
            blocks_done = 0;
            __threadfence();
        }
    }
}
