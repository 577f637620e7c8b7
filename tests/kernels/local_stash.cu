// Exploit family "answers kept in local memory between launches": on its first launch (a per-block
// flag in __device__ memory) every thread computes the whole answer into its local-memory frame;
// every later launch writes the output from what its thread's frame still holds, computing
// nothing. The grid fills every thread slot of every SM, so whichever slot a thread lands in next
// time, the slot holds the whole answer; local memory is not cleared between kernels, so on inputs
// that repeat (an experiment whose inputs do not vary) the copies are right and the kernel looks free.
// Launch: grid = 2 * num_sms, 1024 threads (two blocks per SM: every slot); n = 1024 (at most).
// Stopped by: the harness writes a NaN pattern over every thread's local memory before each
// candidate launch (worker/leftovers.cu), so a later launch copies NaN; and its module variables
// (the flag) are restored before each launch, so with both rules it computes every time.
// Expected: mismatch when only the local-memory wipe holds; ok without it (the GPU test shows both).
#define N 1024
#define MAX_BLOCKS 1024
__device__ unsigned int computed[MAX_BLOCKS];

extern "C" __global__ void __launch_bounds__(1024, 2) relu(const float* x, float* y, int n)
{
    volatile float stash[N];
    bool first = *(volatile unsigned int*)&computed[blockIdx.x % MAX_BLOCKS] == 0u;
    if (first)
        for (int j = 0; j < n && j < N; ++j)
            stash[j] = fmaxf(x[j], 0.0f);
    int i = threadIdx.x;
    if (blockIdx.x == 0 && i < n && i < N)
        y[i] = stash[i];
    if (first && threadIdx.x == 0)
        computed[blockIdx.x % MAX_BLOCKS] = 1u;
}
