// Honest mean of n floats into out[0] (the sibling of mean_stale.cu): each block sums its share in
// double and adds it to a device-global total; the last block to finish (a ticket counter) writes
// the mean and resets the total for the next launch (12 bytes of __device__ state). Any grid, up to
// 1024 threads per block. Expected: ok on every case of the mean experiment.
__device__ double partial_total;
__device__ unsigned int tickets;

extern "C" __global__ void mean(const float* x, float* out, int n)
{
    __shared__ double sums[32];
    double acc = 0.0;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        acc += (double)x[i];
    for (int offset = 16; offset > 0; offset >>= 1)
        acc += __shfl_down_sync(0xffffffffu, acc, offset);
    if ((threadIdx.x & 31) == 0)
        sums[threadIdx.x >> 5] = acc;
    __syncthreads();
    if (threadIdx.x == 0) {
        double block = 0.0;
        for (int w = 0; w < (int)((blockDim.x + 31) / 32); ++w)
            block += sums[w];
        atomicAdd(&partial_total, block);
        __threadfence();
        if (atomicAdd(&tickets, 1u) == gridDim.x - 1) {  // the last block: every sum is in
            double total = atomicAdd(&partial_total, 0.0);
            out[0] = (float)(total / (double)n);
            partial_total = 0.0;
            tickets = 0u;
            __threadfence();
        }
    }
}
