// Honest on a BF16 experiment (tests/fixtures/bf16_matmul): C (float) = A x B with A and B in
// bfloat16, on BF16 tensor cores (mma.sync m16n8k16 bf16, FP32 accumulators). A product of two
// bfloat16 values is exact in FP32, so it matches an FP32 reference on the same inputs.
// One warp per 16 x 8 tile of C: launch with block [32], grid [cdiv(n, 8), cdiv(m, 16)].
// Expected: ok where the signature's bfloat16 pointers allow "bf16" (the default); precision
// where limits.precision leaves "bf16" out.
#include <cuda_bf16.h>

__device__ __forceinline__ unsigned bits(const __nv_bfloat16* p, int rows, int cols, int r, int c)
{
    return r < rows && c < cols ? __bfloat16_as_ushort(p[(long long)r * cols + c]) : 0u;
}

__device__ __forceinline__ unsigned pair(unsigned low, unsigned high)
{
    return low | (high << 16);  // the lower index in the lower half
}

extern "C" __global__ void matmul_bf16(const __nv_bfloat16* a, const __nv_bfloat16* b, float* c, int m, int n, int k)
{
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int row0 = blockIdx.y * 16, col0 = blockIdx.x * 8;
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int k0 = 0; k0 < k; k0 += 16) {
        // the fragments of mma.m16n8k16: A row-major 16 x 16, B column-major 16 x 8, two values a register
        unsigned fa[4], fb[2];
        for (int i = 0; i < 4; ++i) {
            const int r = row0 + g + (i & 1) * 8, kk = k0 + t * 2 + (i >> 1) * 8;
            fa[i] = pair(bits(a, m, k, r, kk), bits(a, m, k, r, kk + 1));
        }
        for (int i = 0; i < 2; ++i) {
            const int kk = k0 + t * 2 + i * 8;
            fb[i] = pair(bits(b, k, n, kk, col0 + g), bits(b, k, n, kk + 1, col0 + g));
        }
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                     "{%0,%1,%2,%3};"
                     : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
                     : "r"(fa[0]), "r"(fa[1]), "r"(fa[2]), "r"(fa[3]), "r"(fb[0]), "r"(fb[1]));
    }
    for (int q = 0; q < 4; ++q) {
        const int r = row0 + g + (q >> 1) * 8, col = col0 + t * 2 + (q & 1);
        if (r < m && col < n)
            c[(long long)r * n + col] = acc[q];
    }
}
