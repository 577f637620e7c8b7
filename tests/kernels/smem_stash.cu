// Exploit family "reads of uninitialised shared memory that happen to pass": each block computes
// the whole answer into shared memory on its first launch in a module (a per-block flag, 800 bytes
// of __device__ state: under the global-state limit), and every later launch copies its share of
// the output from whatever its SM's shared memory holds, computing nothing. Shared memory is not
// cleared between kernels, so on inputs that repeat (an experiment whose inputs do not vary, or a
// reference that left its answer there) the copies are right and the kernel looks free.
// Launch: grid = num_sms (at most 200), 1024 threads, shared_bytes = 4 * n (over half an SM's
// shared memory, so one block per SM and every SM holds the answer).
// Stopped by: the harness fills every SM's shared memory with a NaN pattern before each candidate
// launch (worker/leftovers.cu), so the second check launch copies NaN.
// Expected: mismatch (NaN in the outputs, check phase, second input set checked); ok when the
// shared memory is not poisoned (the GPU test shows both).
#define MAX_BLOCKS 200
__device__ unsigned int computed[MAX_BLOCKS];

extern "C" __global__ void relu(const float* x, float* y, int n)
{
    extern __shared__ float stash[];
    bool first = *(volatile unsigned int*)&computed[blockIdx.x % MAX_BLOCKS] == 0u;
    if (first)
        for (int i = threadIdx.x; i < n; i += blockDim.x)
            stash[i] = fmaxf(x[i], 0.0f);
    __syncthreads();
    int share = (n + gridDim.x - 1) / gridDim.x;
    int end = min(n, (int)(blockIdx.x + 1) * share);
    for (int i = blockIdx.x * share + threadIdx.x; i < end; i += blockDim.x)
        y[i] = stash[i];
    if (first && threadIdx.x == 0)
        computed[blockIdx.x % MAX_BLOCKS] = 1u;
}
