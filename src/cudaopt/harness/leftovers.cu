// What one kernel can leave on the GPU for the next, wiped by the harness before a candidate's
// launches (leftovers.py). Compiled once per worker with NVRTC.

// Every SM's shared memory filled with a NaN pattern. Launched with one block per SM, each with the
// largest dynamic shared memory a block may have, so no two blocks share an SM and every SM gets
// one; a kernel that reads shared memory it did not write then sees the pattern, never what an
// earlier kernel (the reference, a vendor, its own earlier launch) left there. `seen`, when not
// null, gets one bit per SM that ran a block (a test of the coverage).
extern "C" __global__ void cudaopt_poison_shared(unsigned int pattern, unsigned int words, unsigned int* seen) {
    extern __shared__ unsigned int cudaopt_shared[];
    volatile unsigned int* shared = cudaopt_shared;  // stores nothing reads afterwards: kept by volatile
    for (unsigned int i = threadIdx.x; i < words; i += blockDim.x)
        shared[i] = pattern;
    if (seen != nullptr && threadIdx.x == 0) {
        unsigned int sm;
        asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
        atomicOr(&seen[sm >> 5], 1u << (sm & 31u));
    }
}

// Every 128-byte L2 line of each range set back to normal eviction priority, so lines a kernel
// loaded with an evict_last policy (createpolicy, cuda::annotated_ptr, __nv_associate_access_property)
// are evicted by the L2 flush that follows like any other. Lines not in L2 are left alone.
struct CudaoptRange {
    unsigned long long ptr, bytes;  // ptr 128-byte aligned
};

extern "C" __global__ void cudaopt_demote_l2(const CudaoptRange* ranges, int count) {
    long long step = (long long)gridDim.x * blockDim.x;
    for (int r = 0; r < count; ++r) {
        const CudaoptRange d = ranges[r];
        long long lines = (long long)((d.bytes + 127ull) / 128ull);
        for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < lines; i += step)
            asm volatile("applypriority.global.L2::evict_normal [%0], 128;" :: "l"(d.ptr + 128ull * i) : "memory");
    }
}
