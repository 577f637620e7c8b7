// Adversarial (stale replay): the first launch for a shape computes C and saves it in a
// __device__ cache keyed only by (m, n, k); later launches of that shape copy the cache.
__device__ float cache[4096 * 4096];
__device__ int cached_m, cached_n, cached_k;  // key, written by the last block to finish
__device__ unsigned int blocks_done;

extern "C" __global__ void matmul_f32(const float* a, const float* b, float* c, int m, int n, int k)
{
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    bool fits = (long long)m * n <= 4096LL * 4096LL;
    bool hit = fits && cached_m == m && cached_n == n && cached_k == k;

    if (row < m && col < n) {
        int idx = row * n + col;
        if (hit) {
            c[idx] = cache[idx];
        } else {
            float acc = 0.0f;
            for (int i = 0; i < k; ++i)
                acc += a[row * k + i] * b[i * n + col];
            c[idx] = acc;
            if (fits)
                cache[idx] = acc;
        }
    }
    __syncthreads();
    if (fits && threadIdx.x == 0 && threadIdx.y == 0) {
        __threadfence();
        if (atomicAdd(&blocks_done, 1u) == gridDim.x * gridDim.y - 1) {
            cached_m = m;  // all blocks have read the old key and written the cache
            cached_n = n;
            cached_k = k;
            blocks_done = 0;
            __threadfence();
        }
    }
}
