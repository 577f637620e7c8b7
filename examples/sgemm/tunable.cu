// SGEMM with two paths, chosen by problem size (the launch expressions in experiment.json take
// the same decision, so grid and block always match the path):
//
// - large problems (at least LARGE_MIN_TILES tiles of BM x BN): register-tiled. Each block of
//   (BM/TM)*(BN/TN) threads computes a BM x BN tile of C. BK-deep slices of A (stored transposed)
//   and B go through double-buffered shared memory, the next slice prefetched into registers while
//   the current one is multiplied. Each thread accumulates TM x TN outputs, reading its operands
//   from shared memory as float4 in groups of 4 rows/columns spread across the tile.
// - small problems, where large tiles would leave most SMs idle: 16 x 16 tiles, one output per
//   thread, 256 threads; SK-deep slices of A and B staged in shared memory, the next slice's global
//   loads in flight while the current one is multiplied (these cases are latency-bound).
//
// At least two blocks of 256 threads fit on an SM (__launch_bounds__), which caps registers at
// 128 per thread: the small path needs the occupancy, and both paths share one register budget.
//
// Global loads and stores are float4 when k and n are multiples of 4 and the pointers are
// 16-byte aligned; otherwise element-wise, with every access guarded.
#ifndef BM
#define BM 128
#endif
#ifndef BN
#define BN 128
#endif
#ifndef BK
#define BK 8
#endif
#ifndef TM
#define TM 8
#endif
#ifndef TN
#define TN 8
#endif
#ifndef SK
#define SK 32
#endif
#define LARGE_MIN_TILES 256

#define THREADS ((BM / TM) * (BN / TN))
#define BOUND 256  // the small path's block; restrictions keep THREADS <= 256
#define APAD 4                       // pads transposed-A rows: spreads the transposing stores over banks
#define A_LOADS (BM * BK / 4 / THREADS)  // float4 loads of A per thread per slice
#define B_LOADS (BK * BN / 4 / THREADS)
#define ROW_STRIDE (4 * BM / TM)     // distance between a thread's groups of 4 rows
#define COL_STRIDE (4 * BN / TN)

static_assert(TM % 4 == 0 && TN % 4 == 0, "TM and TN must be multiples of 4");
static_assert(THREADS <= BOUND && SK % 16 == 0, "at most 256 threads; SK a multiple of 16");
static_assert(A_LOADS >= 1 && B_LOADS >= 1 && A_LOADS * THREADS * 4 == BM * BK && B_LOADS * THREADS * 4 == BK * BN,
              "each thread must load whole float4s of both tiles");

__device__ __forceinline__ bool aligned16(const void* p) { return ((unsigned long long)p & 15ull) == 0ull; }

__device__ void large_tiles(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ c,
                            int m, int n, int k, float (*As)[BK][BM + APAD], float (*Bs)[BK][BN])
{
    const int tid = threadIdx.x;
    const int tx = tid % (BN / TN);
    const int ty = tid / (BN / TN);
    const int row0 = blockIdx.y * BM;
    const int col0 = blockIdx.x * BN;
    const bool vecA = (k % 4 == 0) && aligned16(a);
    const bool vecB = (n % 4 == 0) && aligned16(b);
    const bool vecC = (n % 4 == 0) && aligned16(c);

    float ra[A_LOADS][4], rb[B_LOADS][4];

    auto load = [&](int k0) {
#pragma unroll
        for (int l = 0; l < A_LOADS; ++l) {
            const int e = tid + l * THREADS;
            const int r = row0 + e / (BK / 4), kq = k0 + (e % (BK / 4)) * 4;
            const float* p = a + (size_t)r * k + kq;
            if (vecA && r < m && kq < k) {  // k % 4 == 0 and kq % 4 == 0: kq < k implies kq + 3 < k
                const float4 v = __ldg(reinterpret_cast<const float4*>(p));
                ra[l][0] = v.x; ra[l][1] = v.y; ra[l][2] = v.z; ra[l][3] = v.w;
            } else {
#pragma unroll
                for (int j = 0; j < 4; ++j) ra[l][j] = (r < m && kq + j < k) ? __ldg(p + j) : 0.0f;
            }
        }
#pragma unroll
        for (int l = 0; l < B_LOADS; ++l) {
            const int e = tid + l * THREADS;
            const int kr = k0 + e / (BN / 4), cq = col0 + (e % (BN / 4)) * 4;
            const float* p = b + (size_t)kr * n + cq;
            if (vecB && kr < k && cq < n) {
                const float4 v = __ldg(reinterpret_cast<const float4*>(p));
                rb[l][0] = v.x; rb[l][1] = v.y; rb[l][2] = v.z; rb[l][3] = v.w;
            } else {
#pragma unroll
                for (int j = 0; j < 4; ++j) rb[l][j] = (kr < k && cq + j < n) ? __ldg(p + j) : 0.0f;
            }
        }
    };
    auto store = [&](int buf) {
#pragma unroll
        for (int l = 0; l < A_LOADS; ++l) {
            const int e = tid + l * THREADS;
            const int r = e / (BK / 4), kq = (e % (BK / 4)) * 4;
#pragma unroll
            for (int j = 0; j < 4; ++j) As[buf][kq + j][r] = ra[l][j];
        }
#pragma unroll
        for (int l = 0; l < B_LOADS; ++l) {
            const int e = tid + l * THREADS;
            *reinterpret_cast<float4*>(&Bs[buf][e / (BN / 4)][(e % (BN / 4)) * 4]) =
                make_float4(rb[l][0], rb[l][1], rb[l][2], rb[l][3]);
        }
    };

    float acc[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = 0.0f;

    const int slices = (k + BK - 1) / BK;
    load(0);
    store(0);
    __syncthreads();
    int buf = 0;
    for (int t = 0; t < slices; ++t) {
        const bool more = t + 1 < slices;
        if (more) load((t + 1) * BK);  // global loads in flight during the FMAs below
#pragma unroll
        for (int kk = 0; kk < BK; ++kk) {
            float av[TM], bv[TN];
#pragma unroll
            for (int h = 0; h < TM / 4; ++h) {
                const float4 v = *reinterpret_cast<const float4*>(&As[buf][kk][h * ROW_STRIDE + ty * 4]);
                av[h * 4 + 0] = v.x; av[h * 4 + 1] = v.y; av[h * 4 + 2] = v.z; av[h * 4 + 3] = v.w;
            }
#pragma unroll
            for (int h = 0; h < TN / 4; ++h) {
                const float4 v = *reinterpret_cast<const float4*>(&Bs[buf][kk][h * COL_STRIDE + tx * 4]);
                bv[h * 4 + 0] = v.x; bv[h * 4 + 1] = v.y; bv[h * 4 + 2] = v.z; bv[h * 4 + 3] = v.w;
            }
#pragma unroll
            for (int i = 0; i < TM; ++i)
#pragma unroll
                for (int j = 0; j < TN; ++j) acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
        }
        if (more) store(buf ^ 1);  // the other buffer was last read before the previous barrier
        __syncthreads();
        buf ^= 1;
    }

#pragma unroll
    for (int i = 0; i < TM; ++i) {
        const int r = row0 + (i / 4) * ROW_STRIDE + ty * 4 + i % 4;
        if (r >= m) continue;
        float* row = c + (size_t)r * n;
#pragma unroll
        for (int h = 0; h < TN / 4; ++h) {
            const int col = col0 + h * COL_STRIDE + tx * 4;
            if (vecC && col < n) {
                *reinterpret_cast<float4*>(row + col) =
                    make_float4(acc[i][h * 4 + 0], acc[i][h * 4 + 1], acc[i][h * 4 + 2], acc[i][h * 4 + 3]);
            } else {
#pragma unroll
                for (int j = 0; j < 4; ++j)
                    if (col + j < n) row[col + j] = acc[i][h * 4 + j];
            }
        }
    }
}

__device__ void small_tiles(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ c,
                            int m, int n, int k, float (*As)[SK + 1], float (*Bs)[16])
{
    const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
    const int row0 = blockIdx.y * 16, col0 = blockIdx.x * 16;
    float ra[SK / 16], rb[SK / 16];

    auto load = [&](int k0) {
#pragma unroll
        for (int l = 0; l < SK / 16; ++l) {
            const int e = tid + l * 256;
            const int r = row0 + e / SK, ka = k0 + e % SK;
            ra[l] = (r < m && ka < k) ? __ldg(a + (size_t)r * k + ka) : 0.0f;
            const int kb = k0 + e / 16, col = col0 + e % 16;
            rb[l] = (kb < k && col < n) ? __ldg(b + (size_t)kb * n + col) : 0.0f;
        }
    };
    float acc = 0.0f;
    const int slices = (k + SK - 1) / SK;
    load(0);
    for (int t = 0; t < slices; ++t) {
#pragma unroll
        for (int l = 0; l < SK / 16; ++l) {
            const int e = tid + l * 256;
            As[e / SK][e % SK] = ra[l];
            Bs[e / 16][e % 16] = rb[l];
        }
        __syncthreads();
        if (t + 1 < slices) load((t + 1) * SK);  // the next slice's loads overlap these FMAs
#pragma unroll
        for (int kk = 0; kk < SK; ++kk) acc = fmaf(As[ty][kk], Bs[kk][tx], acc);
        __syncthreads();
    }
    const int row = row0 + ty, col = col0 + tx;
    if (row < m && col < n) c[(size_t)row * n + col] = acc;
}

#define LARGE_FLOATS (2 * BK * (BM + APAD) + 2 * BK * BN)
#define SMALL_FLOATS (16 * (SK + 1) + SK * 16)

extern "C" __global__ void __launch_bounds__(BOUND, 2)
matmul_f32(const float* a, const float* b, float* c, int m, int n, int k)
{
    // One shared buffer, carved differently by each path.
    __shared__ __align__(16) float smem[LARGE_FLOATS > SMALL_FLOATS ? LARGE_FLOATS : SMALL_FLOATS];
    const long long tiles = (long long)((m + BM - 1) / BM) * ((n + BN - 1) / BN);
    if (tiles >= LARGE_MIN_TILES) {
        large_tiles(a, b, c, m, n, k, reinterpret_cast<float (*)[BK][BM + APAD]>(smem),
                    reinterpret_cast<float (*)[BK][BN]>(smem + 2 * BK * (BM + APAD)));
    } else {
        small_tiles(a, b, c, m, n, k, reinterpret_cast<float (*)[SK + 1]>(smem),
                    reinterpret_cast<float (*)[16]>(smem + 16 * (SK + 1)));
    }
}
