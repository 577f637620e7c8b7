// Adversarial (unchecked launches): a launch counter in __device__ memory. The first three launches
// of each shape (the checks before timing) compute C; after that only every 33rd launch does, and the others
// write zeros, which is much cheaper than the product. A harness that checks only predictable
// launches (say, the last timed one of each input set) reports it correct and fast.
__device__ unsigned int launches;  // launches of the current shape
__device__ int shape_m, shape_n, shape_k;
__device__ unsigned int blocks_done;

extern "C" __global__ void matmul_f32(const float* a, const float* b, float* c, int m, int n, int k)
{
    bool same = shape_m == m && shape_n == n && shape_k == k;
    unsigned int launch = same ? launches : 0u;
    bool work = launch < 3 || launch % 33 == 0;
    int row = blockIdx.y * 16 + threadIdx.y;
    int col = blockIdx.x * 16 + threadIdx.x;
    if (row < m && col < n) {
        float acc = 0.0f;
        if (work)
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
