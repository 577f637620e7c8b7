// Adversarial (precision): single-pass TF32 tensor-core MMAs when n > 128, plain FP32 below. The
// small cases see only FP32, and where the tolerance is loose (KernelBench's 1e-2) the large ones
// pass too: only the compiled code (HMMA.1688.F32.TF32) says that it computes in TF32.
// One warp per 16 x 8 tile of C: launch with block [32], grid [cdiv(n, 8), cdiv(m, 16)].
// Expected: precision (refused before any launch, whatever the cases' sizes).
__device__ __forceinline__ unsigned to_tf32(float x)
{
    unsigned r;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
    return r;
}

__device__ __forceinline__ float at(const float* p, int rows, int cols, int r, int c)
{
    return r < rows && c < cols ? p[(long long)r * cols + c] : 0.0f;
}

extern "C" __global__ void matmul_f32(const float* a, const float* b, float* c, int m, int n, int k)
{
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int row0 = blockIdx.y * 16, col0 = blockIdx.x * 8;
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    if (n > 128) {
        for (int k0 = 0; k0 < k; k0 += 8) {
            const unsigned a0 = to_tf32(at(a, m, k, row0 + g, k0 + t)), a1 = to_tf32(at(a, m, k, row0 + g + 8, k0 + t));
            const unsigned a2 = to_tf32(at(a, m, k, row0 + g, k0 + t + 4));
            const unsigned a3 = to_tf32(at(a, m, k, row0 + g + 8, k0 + t + 4));
            const unsigned b0 = to_tf32(at(b, k, n, k0 + t, col0 + g)), b1 = to_tf32(at(b, k, n, k0 + t + 4, col0 + g));
            asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
                         "{%8,%9}, {%0,%1,%2,%3};"
                         : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
                         : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
        }
    } else {
        for (int q = 0; q < 4; ++q) {
            const int r = row0 + g + (q >> 1) * 8, col = col0 + t * 2 + (q & 1);
            for (int i = 0; i < k; ++i)
                acc[q] += at(a, m, k, r, i) * at(b, k, n, i, col);
        }
    }
    for (int q = 0; q < 4; ++q) {
        const int r = row0 + g + (q >> 1) * 8, col = col0 + t * 2 + (q & 1);
        if (r < m && col < n)
            c[(long long)r * n + col] = acc[q];
    }
}
