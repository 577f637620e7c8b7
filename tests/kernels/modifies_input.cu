// Adversarial (input mutation): C is correct, but the last block to finish casts away
// const and does a[0] += 1.0f after every block has finished reading A.
__device__ unsigned int blocks_done;  // zero at module load; reset by the last block

extern "C" __global__ void matmul_f32(const float* a, const float* b, float* c, int m, int n, int k)
{
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (row < m && col < n) {
        float acc = 0.0f;
        for (int i = 0; i < k; ++i)
            acc += a[row * k + i] * b[i * n + col];
        c[row * n + col] = acc;
    }
    __syncthreads();
    if (threadIdx.x == 0 && threadIdx.y == 0) {
        __threadfence();
        unsigned int total = gridDim.x * gridDim.y;
        if (atomicAdd(&blocks_done, 1u) == total - 1) {  // every other block is done
            float* w = const_cast<float*>(a);
            w[0] = w[0] + 1.0f;
            blocks_done = 0;
        }
    }
}
