// Adversarial (stale replay): caches C in a __device__ array keyed by (m, n, k) plus the
// bits of a[0], a[1], b[0], b[1]; replays the cache whenever those match, ignoring the rest.
__device__ float cache[4096 * 4096];
__device__ int key_m, key_n, key_k;
__device__ unsigned int key_a0, key_a1, key_b0, key_b1;
__device__ unsigned int blocks_done;

extern "C" __global__ void matmul_f32(const float* a, const float* b, float* c, int m, int n, int k)
{
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    unsigned int a0 = m * k > 0 ? __float_as_uint(a[0]) : 0u;
    unsigned int a1 = m * k > 1 ? __float_as_uint(a[1]) : 0u;
    unsigned int b0 = k * n > 0 ? __float_as_uint(b[0]) : 0u;
    unsigned int b1 = k * n > 1 ? __float_as_uint(b[1]) : 0u;
    bool fits = (long long)m * n <= 4096LL * 4096LL;
    bool hit = fits && key_m == m && key_n == n && key_k == k &&
               key_a0 == a0 && key_a1 == a1 && key_b0 == b0 && key_b1 == b1;

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
            key_m = m; key_n = n; key_k = k;  // every block has read the old key
            key_a0 = a0; key_a1 = a1; key_b0 = b0; key_b1 = b1;
            blocks_done = 0;
            __threadfence();
        }
    }
}
