// Exploit family "answers kept in the reserved part of shared memory": the first KiB of a block's
// shared-memory window on sm_90 is reserved (the kernel's own arrays start after it), but a kernel
// can still address it with st.shared/ld.shared. On its first launch (a per-block flag in
// __device__ memory) each block writes the whole answer there; later launches copy it back.
// Launch: grid = num_sms (at most 200), 256 threads, shared_bytes = 200 * 1024 (one block per SM);
// n = 256 (what the reserved KiB holds).
// Stopped by: the shared-memory poison covers the reserved part too (worker/leftovers.cu).
// Expected: mismatch when only the poison holds (the flag left alone); ok without it.
#define MAX_BLOCKS 200
__device__ unsigned int computed[MAX_BLOCKS];

extern "C" __global__ void relu(const float* x, float* y, int n)
{
    unsigned int begin;
    asm volatile("mov.u32 %0, %%reserved_smem_offset_begin;" : "=r"(begin));
    bool first = *(volatile unsigned int*)&computed[blockIdx.x % MAX_BLOCKS] == 0u;
    int i = threadIdx.x;
    if (first && i < n && i < 256) {
        float v = fmaxf(x[i], 0.0f);
        asm volatile("st.shared.f32 [%0], %1;" :: "r"(begin + 4u * i), "f"(v) : "memory");
    }
    __syncthreads();
    if (blockIdx.x == 0 && i < n && i < 256) {
        float v;
        asm volatile("ld.shared.f32 %0, [%1];" : "=f"(v) : "r"(begin + 4u * i) : "memory");
        y[i] = v;
    }
    if (first && threadIdx.x == 0)
        computed[blockIdx.x % MAX_BLOCKS] = 1u;
}
