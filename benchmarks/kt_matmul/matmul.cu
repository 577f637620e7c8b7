// Shared-memory SGEMM over Kernel Tuner's matmul parameter space: a block of
// block_size_x x block_size_y threads computes a (block_size_y*tile_size_y) x
// (block_size_x*tile_size_x) tile of C = A x B (row-major). A k-slice of block_size_x columns
// is staged for both operands, so block_size_x == block_size_y * tile_size_y makes the A tile
// square and lets every thread load whole rows. Each thread owns tile_size_y x tile_size_x
// outputs strided by the block size (coalesced loads and stores). Accesses are guarded, so any
// m, n, k works.
// Defaults: one output per thread, the launch in cases.json (which the reference shares).
#ifndef block_size_x
#define block_size_x 16
#endif
#ifndef block_size_y
#define block_size_y 16
#endif
#ifndef tile_size_x
#define tile_size_x 1
#endif
#ifndef tile_size_y
#define tile_size_y 1
#endif

#define BX block_size_x
#define BY block_size_y
#define TX tile_size_x
#define TY tile_size_y

extern "C" __global__ void __launch_bounds__(BX * BY)
matmul_f32(const float* a, const float* b, float* c, int m, int n, int k)
{
    __shared__ float As[BY * TY][BX];
    __shared__ float Bs[BX][BX * TX];

    const int tx = threadIdx.x, ty = threadIdx.y;
    const int row0 = blockIdx.y * BY * TY;
    const int col0 = blockIdx.x * BX * TX;

    float acc[TY][TX];
#pragma unroll
    for (int i = 0; i < TY; ++i)
#pragma unroll
        for (int j = 0; j < TX; ++j) acc[i][j] = 0.0f;

    for (int t = 0; t < k; t += BX) {
#pragma unroll
        for (int i = 0; i < TY; ++i) {
            const int r = row0 + ty + i * BY;
            As[ty + i * BY][tx] = (r < m && t + tx < k) ? a[(size_t)r * k + t + tx] : 0.0f;
            const int kr = t + ty + i * BY;
#pragma unroll
            for (int j = 0; j < TX; ++j) {
                const int col = col0 + tx + j * BX;
                Bs[ty + i * BY][tx + j * BX] = (kr < k && col < n) ? b[(size_t)kr * n + col] : 0.0f;
            }
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < BX; ++kk) {
#pragma unroll
            for (int i = 0; i < TY; ++i) {
                const float av = As[ty + i * BY][kk];
#pragma unroll
                for (int j = 0; j < TX; ++j) acc[i][j] = fmaf(av, Bs[kk][tx + j * BX], acc[i][j]);
            }
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < TY; ++i) {
        const int r = row0 + ty + i * BY;
#pragma unroll
        for (int j = 0; j < TX; ++j) {
            const int col = col0 + tx + j * BX;
            if (r < m && col < n) c[(size_t)r * n + col] = acc[i][j];
        }
    }
}
