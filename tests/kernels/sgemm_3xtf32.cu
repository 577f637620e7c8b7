// Adversarial (precision): "3xTF32" SGEMM. Each operand is split into a TF32 high part and the TF32
// rounding of what is left (hi + lo), and three tensor-core MMAs (lo*hi, hi*lo, hi*hi) per 8-deep
// slice recover close to FP32 accuracy: it passes an FP32 tolerance while it runs on tensor
// cores (HMMA.1688.F32.TF32), which an experiment that says "FP32 arithmetic" does not allow.
// One warp per 16 x 8 tile of C: launch with block [32], grid [cdiv(n, 8), cdiv(m, 16)].
// Expected: precision (refused before any launch) unless limits.precision allows "tf32"; then ok.
__device__ __forceinline__ unsigned to_tf32(float x)
{
    unsigned r;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
    return r;
}

__device__ __forceinline__ void split(float x, unsigned& hi, unsigned& lo)
{
    hi = to_tf32(x);
    lo = to_tf32(x - __uint_as_float(hi));
}

__device__ __forceinline__ void mma_tf32(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2])
{
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
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
    for (int k0 = 0; k0 < k; k0 += 8) {
        // the fragments of mma.m16n8k8: A row-major 16 x 8, B column-major 8 x 8
        const float av[4] = {at(a, m, k, row0 + g, k0 + t), at(a, m, k, row0 + g + 8, k0 + t),
                             at(a, m, k, row0 + g, k0 + t + 4), at(a, m, k, row0 + g + 8, k0 + t + 4)};
        const float bv[2] = {at(b, k, n, k0 + t, col0 + g), at(b, k, n, k0 + t + 4, col0 + g)};
        unsigned ah[4], al[4], bh[2], bl[2];
        for (int i = 0; i < 4; ++i)
            split(av[i], ah[i], al[i]);
        for (int i = 0; i < 2; ++i)
            split(bv[i], bh[i], bl[i]);
        mma_tf32(acc, al, bh);  // the small terms first
        mma_tf32(acc, ah, bl);
        mma_tf32(acc, ah, bh);
    }
    for (int q = 0; q < 4; ++q) {
        const int r = row0 + g + (q >> 1) * 8, col = col0 + t * 2 + (q & 1);
        if (r < m && col < n)
            c[(long long)r * n + col] = acc[q];
    }
}
