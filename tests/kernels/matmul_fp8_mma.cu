// Adversarial (precision) on a BF16 experiment (tests/fixtures/bf16_matmul): rounds the bfloat16
// operands to FP8 (E4M3) and multiplies them with FP8 MMAs (mma.sync m16n8k32 e4m3), twice the
// BF16 rate and far less precise. On sm_90 ptxas builds the FP8 MMA from FP8 conversions and
// FP16 MMAs (F2FP...E4M3, HMMA.16816.F32): both are outside a bfloat16 signature's policy.
// One warp per 16 x 8 tile of C: launch with block [32], grid [cdiv(n, 8), cdiv(m, 16)].
// Expected: precision (refused before any launch) unless limits.precision allows "fp8" and "fp16".
#include <cuda_bf16.h>

__device__ __forceinline__ float value(const __nv_bfloat16* p, int rows, int cols, int r, int c)
{
    return r < rows && c < cols ? __bfloat162float(p[(long long)r * cols + c]) : 0.0f;
}

__device__ __forceinline__ unsigned e4m3x2(float low, float high)
{
    unsigned short packed;
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(packed) : "f"(high), "f"(low));
    return packed;
}

extern "C" __global__ void matmul_bf16(const __nv_bfloat16* a, const __nv_bfloat16* b, float* c, int m, int n, int k)
{
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int row0 = blockIdx.y * 16, col0 = blockIdx.x * 8;
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int k0 = 0; k0 < k; k0 += 32) {
        // the fragments of mma.m16n8k32 (8-bit types): four values a register
        unsigned fa[4], fb[2];
        for (int i = 0; i < 4; ++i) {
            const int r = row0 + g + (i & 1) * 8, kk = k0 + t * 4 + (i >> 1) * 16;
            fa[i] = e4m3x2(value(a, m, k, r, kk), value(a, m, k, r, kk + 1)) |
                    e4m3x2(value(a, m, k, r, kk + 2), value(a, m, k, r, kk + 3)) << 16;
        }
        for (int i = 0; i < 2; ++i) {
            const int kk = k0 + t * 4 + i * 16;
            fb[i] = e4m3x2(value(b, k, n, kk, col0 + g), value(b, k, n, kk + 1, col0 + g)) |
                    e4m3x2(value(b, k, n, kk + 2, col0 + g), value(b, k, n, kk + 3, col0 + g)) << 16;
        }
        asm volatile("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
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
