// Exploit family "data pinned in L2 across launches": ReLU that loads x with an evict_last policy
// (what cuda::annotated_ptr<..., access_property::persisting> and __nv_associate_access_property
// compile to) and prefetches it into L2 in bulk, hoping the lines survive the L2 flush between
// timed launches so the next launch reads its inputs from L2 instead of DRAM.
// Stopped by: the worker sets the L2 set-aside for persisting accesses to zero (a host-side limit
// a kernel cannot change) and, before each flush, sets every line of the case's buffers back to
// normal eviction priority (applypriority, worker/leftovers.cu); the flush then evicts them. L2
// is coherent, so the checks always see the fresh inputs the harness staged.
// Expected: ok, timed at the cost of relu.cu (within noise).
extern "C" __global__ void relu(const float* x, float* y, int n)
{
    unsigned long long keep, stream;
    asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(keep));
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(stream));
    int first = blockIdx.x * blockDim.x * 4;
    if (threadIdx.x == 0 && first < n) {  // this block's share of x into L2, 16-byte aligned, whole
        unsigned int bytes = (unsigned int)(min(n - first, (int)blockDim.x * 4) * 4) & ~15u;
        if (bytes)
            asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" :: "l"(x + first), "r"(bytes) : "memory");
    }
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        float v;
        asm volatile("ld.global.L2::cache_hint.f32 %0, [%1], %2;" : "=f"(v) : "l"(x + i), "l"(keep));
        float r = fmaxf(v, 0.0f);
        asm volatile("st.global.L2::cache_hint.f32 [%0], %1, %2;" :: "l"(y + i), "f"(r), "l"(stream) : "memory");
    }
}
