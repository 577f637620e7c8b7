// What one kernel can leave on the GPU for the next, wiped by the harness before a candidate's
// launches (leftovers.py). Compiled once per worker with NVRTC.

// Every SM's shared memory filled with a NaN pattern. Launched with one block per SM, each with the
// largest dynamic shared memory a block may have, so no two blocks share an SM and every SM gets
// one; a kernel that reads shared memory it did not write then sees the pattern, never what an
// earlier kernel (the reference, a vendor, its own earlier launch) left there. `seen`, when not
// null, gets one bit per SM that ran a block (a test of the coverage).
// The block's window starts with a reserved part (1 KiB on sm_90) before the first byte a kernel's
// own arrays get; a kernel can still address it, so it is filled too.
extern "C" __global__ void cudaopt_poison_shared(unsigned int pattern, unsigned int words, unsigned int* seen) {
    extern __shared__ unsigned int cudaopt_shared[];
    volatile unsigned int* shared = cudaopt_shared;  // stores nothing reads afterwards: kept by volatile
    for (unsigned int i = threadIdx.x; i < words; i += blockDim.x)
        shared[i] = pattern;
    unsigned int begin, end;
    asm volatile("mov.u32 %0, %%reserved_smem_offset_begin;" : "=r"(begin));
    asm volatile("mov.u32 %0, %%reserved_smem_offset_end;" : "=r"(end));
    for (unsigned int at = begin + 4u * threadIdx.x; at + 4u <= end; at += 4u * blockDim.x)
        asm volatile("st.shared.u32 [%0], %1;" :: "r"(at), "r"(pattern) : "memory");
    if (seen != nullptr && threadIdx.x == 0) {
        unsigned int sm;
        asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
        atomicOr(&seen[sm >> 5], 1u << (sm & 31u));
    }
}

// Every SM's register file overwritten: two blocks of 512 threads per SM, each thread holding
// CUDAOPT_REGISTER_VALUES values derived from the pattern (all NaN as float32) live at once, so the
// blocks take the whole file (2 x 512 x 64 registers). Blocks of 512 rather than 1024: a tool that
// adds registers to a kernel (compute-sanitizer) leaves it launchable, one block per SM. The values go through opaque instructions in a
// loop whose trip count the compiler cannot know, so none is folded away or recomputed later;
// `sink` is null, so nothing is stored. A kernel that reads a register it never wrote (inline PTX)
// then reads junk of the harness's making, never a value an earlier kernel computed.
#define CUDAOPT_REGISTER_VALUES 56

extern "C" __global__ void __launch_bounds__(512, 2)
cudaopt_poison_registers(unsigned int pattern, int trips, unsigned int* sink) {
    unsigned int r[CUDAOPT_REGISTER_VALUES];
#pragma unroll
    for (int i = 0; i < CUDAOPT_REGISTER_VALUES; ++i)
        r[i] = pattern ^ (unsigned int)i;
    for (int k = 0; k < trips; ++k) {
#pragma unroll
        for (int i = 0; i < CUDAOPT_REGISTER_VALUES; ++i)
            asm volatile("xor.b32 %0, %0, %1;" : "+r"(r[i]) : "r"(k));
    }
    if (sink != nullptr) {
#pragma unroll
        for (int i = 0; i < CUDAOPT_REGISTER_VALUES; ++i)
            sink[i * blockDim.x + threadIdx.x] = r[i];
    }
}

// Every thread's local memory (the stack frames of kernels, and what a thread can address past
// its own): CUDAOPT_LOCAL_WORDS words of a frame the compiler must keep in local memory, written
// by every thread of blocks that fill every SM, so every thread slot's window gets the pattern from
// the top of its stack down. Compiled on demand (leftovers.py) with the size the next candidate
// needs; `sink` is null, so nothing is read back.
#ifdef CUDAOPT_LOCAL_WORDS
extern "C" __global__ void __launch_bounds__(1024, 2)
cudaopt_poison_local(unsigned int pattern, unsigned int* sink) {
    volatile unsigned int frame[CUDAOPT_LOCAL_WORDS];
    for (int i = 0; i < CUDAOPT_LOCAL_WORDS; ++i)
        frame[i] = pattern;
    if (sink != nullptr)
        sink[blockIdx.x * blockDim.x + threadIdx.x] = frame[threadIdx.x % CUDAOPT_LOCAL_WORDS];
}
#endif

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
