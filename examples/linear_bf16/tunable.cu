// The fused linear layer of LLM inference, y = gelu_tanh(x @ W^T + b): x [m x k], W [n x k] and
// b [n] in BF16, y [m x n] in BF16, row-major, products accumulated in FP32 on the tensor cores
// (BF16 -> FP32: mma.sync m16n8k16, and on Hopper wgmma m64nNk16), the bias added and the GELU
// taken in FP32, each output rounded to BF16 once. Seven kernels of one signature; experiment.json's
// launch picks one per shape:
//
//   linear_gelu_bf16_stream8   m <= 8 (decode): each block owns 16 rows of W, its KW warps split k
//   linear_gelu_bf16_stream16  m <= 16          between them, and every warp streams its share of
//                              those rows from global memory straight into mma.sync fragments
//                              (16-byte loads in groups of U 32-column chunks, the next group's
//                              loads issued before this group's MMAs); x comes through L1. The
//                              warps' partial sums meet in shared memory, where the bias and the
//                              GELU are applied. W is read exactly once.
//   linear_gelu_bf16_split4    m <= 64, or tiles too few to fill the GPU: 64 x 128 output tiles
//   linear_gelu_bf16_split2    (tokens x rows of W), x and W staged through a ring of MS
//   linear_gelu_bf16           shared-memory stages by cp.async; S = 4, 2 or 1 blocks per tile
//                              split k, one thread-block cluster per tile, their partial tiles
//                              added through distributed shared memory in rank order
//   linear_gelu_bf16_gemm      prefill (m > 64, 128 x 128 tiles fill the GPU): 128 x 128 tiles
//   linear_gelu_bf16_wide      prefill with tiles to spare (two 128 x 256 tiles per SM or more)
//
// The tile kernels take their MMAs from the target: compiled for sm_90a (an H100's or H200's own
// target, which the harness uses there), two warpgroups (64 x 128) or one (128 x 128, 128 x 256)
// issue wgmma on 64-column stages held in shared memory with the 128-byte swizzle; for any other
// target, the same entries run 8 warps of mma.sync fed by ldmatrix, the epilogue shared by both.
// What keeps the prefill tiles below cuBLAS: the stages are filled by cp.async from every thread
// (not by the TMA with a producer warp), one block per SM, and the epilogue does not overlap the
// next tile's loads.
//
// The fragments. For mma.m16n8k16 a thread (group g = lane / 4, t = lane % 4) holds A's rows g
// and g + 8 at columns 2t, 2t+1, 2t+8, 2t+9, and B's column g at the same four rows. A dot product
// does not care in which order k is visited, so the stream kernels deal each 32-column chunk of k
// out differently: thread t takes the 8 consecutive columns 8t .. 8t+7 of its rows (one 16-byte
// load each), the first four as the columns 2t, 2t+1, 2t+8, 2t+9 of one MMA and the last four as
// those of a second. A and B follow the same rule, so each pair of MMAs sums exactly the 32
// products of the chunk, with nothing between global memory and the tensor cores. The tile
// kernels keep the fragments' own order: ldmatrix.x4 hands each thread its registers in it.
//
// Every kernel is correct for any m, n, k >= 1 with the grid its tier gives it (a block per 16
// rows of W, of any number of whole warps up to KW; a block per tile, the S blocks of a cluster
// along z): rows, tokens and columns beyond the ends read as zeros or as a clamped valid row whose
// results are never stored. 16-byte loads when k % 8 == 0 and x and W are 16-byte aligned, element
// loads otherwise. Nothing is kept between launches: no global memory but x, W, b and y, no
// atomics; partial sums are added in a fixed order, so every launch gives the same bits.
#include <cuda_bf16.h>
#include <cstdint>

#ifndef KW
#define KW 8  // warps per block of the stream kernels, each a share of k
#endif
#ifndef U
#define U 4  // 32-column chunks of k per load group of the stream kernels (two groups in flight)
#endif
#ifndef MS
#define MS 4  // stages of the 64 x 128 tile kernels (wgmma: 24 KiB each; mma.sync: 12 KiB)
#endif
#define GS 4  // stages of the 128 x 128 and 128 x 256 tiles where mma.sync runs them (16 KiB each)

static_assert(KW >= 1 && KW <= 32 && U >= 1 && MS >= 2 && GS >= 2, "tunables out of range");

typedef __nv_bfloat16 bf16;

__device__ __forceinline__ bool aligned16(const void* p)
{
    return ((uintptr_t)p & 15) == 0;
}

// ---- tensor cores ---------------------------------------------------------------------------

__device__ __forceinline__ void mma16816(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                         uint32_t b0, uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// One 32-column chunk: lo and hi are the thread's 8 columns of A's rows g and g + 8, col those of
// B's column g (see the top of the file). d[0..1]: D[g][2t..2t+1], d[2..3]: D[g+8][2t..2t+1].
__device__ __forceinline__ void mma_chunk(float (&d)[4], uint4 lo, uint4 hi, uint4 col)
{
    mma16816(d, lo.x, hi.x, lo.y, hi.y, col.x, col.y);
    mma16816(d, lo.z, hi.z, lo.w, hi.w, col.z, col.w);
}

// ---- loads ------------------------------------------------------------------------------------

// 16 bytes of W, read once: not kept in L1, the L2 asked to fetch the whole 256-byte line.
__device__ __forceinline__ uint4 load_stream(const bf16* p)
{
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    return v;
}

// 16 bytes of x, read by every block: through L1.
__device__ __forceinline__ uint4 load_shared_input(const bf16* p)
{
    return __ldg(reinterpret_cast<const uint4*>(p));
}

__device__ __forceinline__ uint32_t pack2(unsigned short lo, unsigned short hi)
{
    return (uint32_t)lo | ((uint32_t)hi << 16);
}

// Columns kk .. kk+7 of a row (p: its first element) up to column `end`, one element at a time,
// zeros beyond: the path for k % 8 != 0 or unaligned pointers.
__device__ __forceinline__ uint4 load_elements(const bf16* p, int kk, int end)
{
    const unsigned short* q = reinterpret_cast<const unsigned short*>(p);
    unsigned short e[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) e[i] = kk + i < end ? q[kk + i] : (unsigned short)0;
    return make_uint4(pack2(e[0], e[1]), pack2(e[2], e[3]), pack2(e[4], e[5]), pack2(e[6], e[7]));
}

// ---- the epilogue -----------------------------------------------------------------------------

// The tanh form of GELU, as PyTorch's gelu(approximate="tanh") computes it, in FP32. For large |z|
// tanhf saturates at +-1 (z^3 overflowing to infinity included), giving z or -0.
__device__ __forceinline__ float gelu_tanh(float z)
{
    const float s = 0.7978845608028654f, c = 0.044715f;  // sqrt(2 / pi)
    return 0.5f * z * (1.0f + tanhf(s * fmaf(c * z, z * z, z)));
}

__device__ __forceinline__ bf16 finish(float acc, const bf16* b, int row)
{
    return __float2bfloat16_rn(gelu_tanh(acc + __bfloat162float(b[row])));
}

// ---- decode: stream W through the tensor cores --------------------------------------------------

// U consecutive 32-column chunks of the thread's two rows of W and NT columns of x^T (tokens).
template <int NT>
struct Group {
    uint4 lo[U], hi[U], col[U][NT];

    __device__ __forceinline__ void load(const bf16* wlo, const bf16* whi, const bf16* const (&xs)[NT], int kk)
    {
#pragma unroll
        for (int u = 0; u < U; ++u) {
            lo[u] = load_stream(wlo + kk + 32 * u);
            hi[u] = load_stream(whi + kk + 32 * u);
#pragma unroll
            for (int j = 0; j < NT; ++j) col[u][j] = load_shared_input(xs[j] + kk + 32 * u);
        }
    }
    __device__ __forceinline__ void mma(float (&acc)[NT][4]) const
    {
#pragma unroll
        for (int u = 0; u < U; ++u)
#pragma unroll
            for (int j = 0; j < NT; ++j) mma_chunk(acc[j], lo[u], hi[u], col[u][j]);
    }
};

// Block: rows row0 .. row0+15 of W (the output columns), tokens 0 .. 8*NT-1 (rows of x), k split
// between the KW warps in whole 32-column chunks. part: KW x (8 NT) x 16 floats of shared memory.
template <int NT, bool VEC>
__device__ __forceinline__ void stream_rows(const bf16* __restrict__ x, const bf16* __restrict__ W,
                                            const bf16* __restrict__ b, bf16* __restrict__ y,
                                            int m, int n, int k, float* part)
{
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int g = lane >> 2, t = lane & 3;
    const int row0 = blockIdx.x * 16;
    const int warps = blockDim.x >> 5;  // at most KW (the launch bounds)
    const int chunks = (k + 31) >> 5, per = (chunks + warps - 1) / warps;
    const int c0 = min(chunks, warp * per), c1 = min(chunks, c0 + per);
    // Rows past n and tokens past m read a valid row instead (their sums are never stored).
    const bf16* wlo = W + (size_t)min(row0 + g, n - 1) * k;
    const bf16* whi = W + (size_t)min(row0 + g + 8, n - 1) * k;
    const bf16* xs[NT];
#pragma unroll
    for (int j = 0; j < NT; ++j) xs[j] = x + (size_t)min(g + 8 * j, m - 1) * k;

    float acc[NT][4];
#pragma unroll
    for (int j = 0; j < NT; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;

    int c = c0;
    if constexpr (VEC) {
        // Groups of U whole chunks, software-pipelined: the loads of the next group are issued
        // before the MMAs of this one, so two groups of 16-byte loads are in flight per warp.
        const int whole = min(c1, k >> 5);  // chunks with all 32 columns inside k
        if (c + U <= whole) {
            Group<NT> now, next;
            now.load(wlo, whi, xs, c * 32 + 8 * t);
            for (c += U; c + U <= whole; c += U) {
                next.load(wlo, whi, xs, c * 32 + 8 * t);
                now.mma(acc);
                now = next;
            }
            now.mma(acc);
        }
    }
#pragma unroll 1
    for (; c < c1; ++c) {  // the rest one chunk at a time: columns past k read as zeros
        const int kk = c * 32 + 8 * t;
        uint4 lo, hi, col[NT];
        if (VEC && kk < k) {
            lo = load_stream(wlo + kk);
            hi = load_stream(whi + kk);
#pragma unroll
            for (int j = 0; j < NT; ++j) col[j] = load_shared_input(xs[j] + kk);
        } else if (VEC) {
            lo = hi = make_uint4(0, 0, 0, 0);
#pragma unroll
            for (int j = 0; j < NT; ++j) col[j] = lo;
        } else {
            lo = load_elements(wlo, kk, k);
            hi = load_elements(whi, kk, k);
#pragma unroll
            for (int j = 0; j < NT; ++j) col[j] = load_elements(xs[j], kk, k);
        }
#pragma unroll
        for (int j = 0; j < NT; ++j) mma_chunk(acc[j], lo, hi, col[j]);
    }

    // part[warp][token][row]: this thread's sums are rows g, g + 8 at tokens 8j + 2t, 8j + 2t + 1.
    float* mine = part + warp * (8 * NT * 16);
#pragma unroll
    for (int j = 0; j < NT; ++j) {
        const int tok = 8 * j + 2 * t;
        mine[tok * 16 + g] = acc[j][0];
        mine[(tok + 1) * 16 + g] = acc[j][1];
        mine[tok * 16 + g + 8] = acc[j][2];
        mine[(tok + 1) * 16 + g + 8] = acc[j][3];
    }
    __syncthreads();
    for (int i = threadIdx.x; i < 8 * NT * 16; i += blockDim.x) {
        const int tok = i >> 4, row = row0 + (i & 15);
        if (tok < m && row < n) {
            float s = 0.0f;
            for (int w = 0; w < warps; ++w) s += part[w * (8 * NT * 16) + i];  // warp order: the same bits every launch
            y[(size_t)tok * n + row] = finish(s, b, row);
        }
    }
}

template <int NT>
__device__ __forceinline__ void stream_kernel(const bf16* x, const bf16* W, const bf16* b, bf16* y, int m, int n,
                                              int k)
{
    __shared__ float part[KW * 8 * NT * 16];
    if (k % 8 == 0 && aligned16(x) && aligned16(W))
        stream_rows<NT, true>(x, W, b, y, m, n, k, part);
    else
        stream_rows<NT, false>(x, W, b, y, m, n, k, part);
}

extern "C" __global__ void __launch_bounds__(KW * 32)
linear_gelu_bf16_stream8(const __nv_bfloat16* x, const __nv_bfloat16* W, const __nv_bfloat16* b, __nv_bfloat16* y,
                         int m, int n, int k)
{
    stream_kernel<1>(x, W, b, y, m, n, k);
}

extern "C" __global__ void __launch_bounds__(KW * 32)
linear_gelu_bf16_stream16(const __nv_bfloat16* x, const __nv_bfloat16* W, const __nv_bfloat16* b, __nv_bfloat16* y,
                          int m, int n, int k)
{
    stream_kernel<2>(x, W, b, y, m, n, k);
}

// ---- tiles: x and W staged through shared memory ------------------------------------------------

__device__ __forceinline__ void cp_async16(unsigned dst, const void* src, int bytes)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" :: "r"(dst), "l"(src), "r"(bytes) : "memory");
}
__device__ __forceinline__ void cp_async_commit()
{
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}
template <int N>
__device__ __forceinline__ void cp_async_wait()
{
    asm volatile("cp.async.wait_group %0;\n" :: "n"(N) : "memory");
}
// Four 8 x 8 matrices of 16-bit elements; lane l gives the address of row l % 8 of matrix l / 8.
__device__ __forceinline__ void ldmatrix4(uint32_t (&r)[4], unsigned addr)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}

__device__ __forceinline__ unsigned cluster_rank()
{
    unsigned r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
    return r;
}
__device__ __forceinline__ void cluster_barrier()
{
    asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}
// Four floats at p (a shared address of this block) in the shared memory of cluster block `rank`.
__device__ __forceinline__ float4 cluster_load4(const float* p, unsigned rank)
{
    unsigned remote;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n"
                 : "=r"(remote) : "r"((unsigned)__cvta_generic_to_shared(p)), "r"(rank));
    float4 v;
    asm volatile("ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];\n"
                 : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "r"(remote) : "memory");
    return v;
}

// Byte offset of 16-byte chunk q (0..3) of row r in a stage: rows of 64 bytes (32 columns of k),
// the chunks of rows r and r + 2 swapped, r and r + 4 ... (q ^ (r / 2) % 4), so the 8 rows of one
// ldmatrix matrix fall on 8 different 16-byte bank groups.
__device__ __forceinline__ int swizzle(int r, int q)
{
    return r * 64 + ((q ^ (r >> 1)) & 3) * 16;
}

// Floats per row of a partial tile BN wide: float2 stores without bank conflicts.
__host__ __device__ constexpr int part_stride(int bn)
{
    return bn + 8;
}

// A BM x BN tile of outputs (BM tokens, BN rows of W) per block of WM x WN warps, each warp
// (BM / WM) x (BN / WN) of it; k in 32-column stages, STAGES of them in a ring of shared memory.
// S > 1: the S blocks of a cluster (grid z) sum the products over their own run of k, whole
// stages (the last runs may be short or empty), then add their partial tiles: after a cluster
// barrier, block `rank` adds its band of BM / S tokens from all S partials, in rank order 0 .. S-1,
// and stores it; a second barrier keeps every block's shared memory alive until all have read it.
template <int BM, int BN, int WM, int WN, int STAGES, int S>
struct Tile {
    static constexpr int bm = BM, threads = 32 * WM * WN;
    static constexpr int mt = BM / WM / 16, nt = BN / WN / 8;  // MMA tiles per warp
    static constexpr int stage_bytes = (BM + BN) * 64;
    static constexpr int copies = (BM + BN) * 4 / threads;    // 16-byte copies per thread and stage
    static constexpr int part_bytes = S > 1 ? BM * part_stride(BN) * 4 : 0;
    static constexpr int smem_bytes = STAGES * stage_bytes > part_bytes ? STAGES * stage_bytes : part_bytes;
    static_assert(mt >= 1 && nt >= 1 && BM % S == 0 && (BM + BN) * 4 % threads == 0, "tile shape");
};

// What one thread copies into every stage: `copies` 16-byte chunks of rows of x or W, each at a
// fixed place of the stage, read from its row at column kk + 8 q. Rows past m or n read nothing
// (zero-filled), and so do columns at or past the block's end of k.
template <class T, bool VEC>
struct Loader {
    const bf16* row[T::copies];
    int dst[T::copies], col[T::copies];
    bool live[T::copies];

    __device__ __forceinline__ Loader(const bf16* x, const bf16* W, int m, int n, int k, int tok0, int row0)
    {
#pragma unroll
        for (int i = 0; i < T::copies; ++i) {
            const int c = threadIdx.x + i * T::threads, r = c >> 2, q = c & 3;
            const bool is_x = r < T::bm;
            const int src = is_x ? tok0 + r : row0 + r - T::bm;
            live[i] = src < (is_x ? m : n);
            row[i] = (is_x ? x : W) + (size_t)(live[i] ? src : 0) * k;
            col[i] = 8 * q;
            dst[i] = swizzle(r, q);
        }
    }

    __device__ __forceinline__ void load(unsigned char* stage, int kk, int kend) const
    {
        const unsigned base = (unsigned)__cvta_generic_to_shared(stage);
#pragma unroll
        for (int i = 0; i < T::copies; ++i) {
            const int c = kk + col[i];
            if constexpr (VEC) {
                const bool ok = live[i] && c < kend;  // k % 8 == 0: all 8 columns in, or none
                cp_async16(base + dst[i], ok ? (const void*)(row[i] + c) : (const void*)row[i], ok ? 16 : 0);
            } else {
                *reinterpret_cast<uint4*>(stage + dst[i]) = live[i] ? load_elements(row[i], c, kend)
                                                                    : make_uint4(0, 0, 0, 0);
            }
        }
    }
};

// The end of a tile. acc[i][j] holds this thread's sums for tokens wm0 + 16i + g (+ 8) at rows of
// W wn0 + 8j + 2t (+ 1): the layout of mma.sync's accumulators and of wgmma's alike. S == 1: the
// bias, the GELU and the store. S > 1: the S blocks of the cluster add their partial tiles (Tile).
template <int BM, int BN, int THREADS, int S, int MT, int NT>
__device__ __forceinline__ void store_tile(const float (&acc)[MT][NT][4], int wm0, int wn0, int tok0, int row0,
                                           unsigned rank, const bf16* __restrict__ b, bf16* __restrict__ y, int m,
                                           int n, unsigned char* smem)
{
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    if constexpr (S == 1) {
        const bool pairs = n % 2 == 0 && ((uintptr_t)y & 3) == 0;
#pragma unroll
        for (int j = 0; j < NT; ++j) {
            const int row = row0 + wn0 + 8 * j + 2 * t;
            if (row >= n)
                continue;
            const float b0 = __bfloat162float(b[row]), b1 = row + 1 < n ? __bfloat162float(b[row + 1]) : 0.0f;
#pragma unroll
            for (int i = 0; i < MT; ++i)
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    const int tok = tok0 + wm0 + 16 * i + g + 8 * h;
                    if (tok >= m)
                        continue;
                    const bf16 v0 = __float2bfloat16_rn(gelu_tanh(acc[i][j][2 * h] + b0));
                    bf16* out = y + (size_t)tok * n + row;
                    if (pairs) {
                        const bf16 v1 = __float2bfloat16_rn(gelu_tanh(acc[i][j][2 * h + 1] + b1));
                        *reinterpret_cast<__nv_bfloat162*>(out) = __halves2bfloat162(v0, v1);
                    } else {
                        out[0] = v0;
                        if (row + 1 < n)
                            out[1] = __float2bfloat16_rn(gelu_tanh(acc[i][j][2 * h + 1] + b1));
                    }
                }
        }
    } else {
        constexpr int PART = part_stride(BN);
        static_assert(BM % S == 0, "the cluster's blocks split the tile's tokens evenly");
        __syncthreads();  // every warp is done with the ring: it now holds this block's partial tile
        float* part = reinterpret_cast<float*>(smem);
#pragma unroll
        for (int i = 0; i < MT; ++i)
#pragma unroll
            for (int j = 0; j < NT; ++j)
#pragma unroll
                for (int h = 0; h < 2; ++h)
                    *reinterpret_cast<float2*>(part + (wm0 + 16 * i + g + 8 * h) * PART + wn0 + 8 * j + 2 * t)
                        = make_float2(acc[i][j][2 * h], acc[i][j][2 * h + 1]);
        cluster_barrier();
        constexpr int BAND = BM / S, QUADS = BN / 4;
        for (int e = threadIdx.x; e < BAND * QUADS; e += THREADS) {
            const int tl = (int)rank * BAND + e / QUADS, rl = 4 * (e % QUADS);
            const int tok = tok0 + tl, row = row0 + rl;
            if (tok >= m || row >= n)
                continue;
            const float* p = part + tl * PART + rl;
            float4 s = cluster_load4(p, 0);
#pragma unroll
            for (int q = 1; q < S; ++q) {
                const float4 v = cluster_load4(p, q);
                s.x += v.x, s.y += v.y, s.z += v.z, s.w += v.w;
            }
            const float sums[4] = {s.x, s.y, s.z, s.w};
            bf16* out = y + (size_t)tok * n + row;
#pragma unroll
            for (int r = 0; r < 4; ++r)
                if (row + r < n)
                    out[r] = finish(sums[r], b, row + r);
        }
        cluster_barrier();  // the other blocks may still be reading this one's partial tile
    }
}

template <int BM, int BN, int WM, int WN, int STAGES, int S, bool VEC>
__device__ __forceinline__ void tile_gemm(const bf16* __restrict__ x, const bf16* __restrict__ W,
                                          const bf16* __restrict__ b, bf16* __restrict__ y, int m, int n, int k,
                                          unsigned char* smem)
{
    using T = Tile<BM, BN, WM, WN, STAGES, S>;
    constexpr int MT = T::mt, NT = T::nt;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int wm0 = (warp / WN) * (BM / WM), wn0 = (warp % WN) * (BN / WN);  // the warp's part of the tile
    const int tok0 = blockIdx.x * BM, row0 = blockIdx.y * BN;
    const unsigned rank = S > 1 ? cluster_rank() : 0;
    const int run = ((k + S - 1) / S + 31) / 32 * 32;  // k per block of the cluster, whole stages
    const int k0 = min(k, (int)rank * run), k1 = min(k, k0 + run);
    const int stages = (k1 - k0 + 31) / 32;
    const Loader<T, VEC> loader(x, W, m, n, k, tok0, row0);

    // ldmatrix rows: A (x) 16 x 16 blocks, matrices (rows 0-7, k 0-7), (8-15, 0-7), (0-7, 8-15),
    // (8-15, 8-15) = the fragment's a0a1 .. a6a7; B (W) an 8-row block, matrices k 0-7 .. 24-31 =
    // b0b1, b2b3 of the two 16-deep steps.
    int a_off[MT][2], b_off[NT];
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int h = 0; h < 2; ++h)
            a_off[i][h] = swizzle(wm0 + 16 * i + (lane & 7) + 8 * ((lane >> 3) & 1), 2 * h + (lane >> 4));
#pragma unroll
    for (int j = 0; j < NT; ++j) b_off[j] = BM * 64 + swizzle(wn0 + 8 * j + (lane & 7), lane >> 3);

    float acc[MT][NT][4];
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int j = 0; j < NT; ++j) acc[i][j][0] = acc[i][j][1] = acc[i][j][2] = acc[i][j][3] = 0.0f;

#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < stages)
            loader.load(smem + s * T::stage_bytes, k0 + 32 * s, k1);
        cp_async_commit();
    }
    const unsigned ring = (unsigned)__cvta_generic_to_shared(smem);
    for (int s = 0; s < stages; ++s) {
        cp_async_wait<STAGES - 2>();  // stage s has landed (this thread's copies) ...
        __syncthreads();              // ... everyone's; and stage s - 1's slot is free to refill
        const int next = s + STAGES - 1;
        if (next < stages)
            loader.load(smem + (next % STAGES) * T::stage_bytes, k0 + 32 * next, k1);
        cp_async_commit();
        const unsigned stage = ring + (s % STAGES) * T::stage_bytes;
        uint32_t a[MT][2][4], w[NT][4];
#pragma unroll
        for (int i = 0; i < MT; ++i)
#pragma unroll
            for (int h = 0; h < 2; ++h) ldmatrix4(a[i][h], stage + a_off[i][h]);
#pragma unroll
        for (int j = 0; j < NT; ++j) ldmatrix4(w[j], stage + b_off[j]);
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
            for (int i = 0; i < MT; ++i)
#pragma unroll
                for (int j = 0; j < NT; ++j)
                    mma16816(acc[i][j], a[i][h][0], a[i][h][1], a[i][h][2], a[i][h][3], w[j][2 * h], w[j][2 * h + 1]);
    }
    cp_async_wait<0>();
    store_tile<BM, BN, T::threads, S, MT, NT>(acc, wm0, wn0, tok0, row0, rank, b, y, m, n, smem);
}

template <int BM, int BN, int WM, int WN, int STAGES, int S>
__device__ __forceinline__ void mma_tile_kernel(const bf16* x, const bf16* W, const bf16* b, bf16* y, int m, int n,
                                                int k, unsigned char* smem)
{
    if (k % 8 == 0 && aligned16(x) && aligned16(W))
        tile_gemm<BM, BN, WM, WN, STAGES, S, true>(x, W, b, y, m, n, k, smem);
    else
        tile_gemm<BM, BN, WM, WN, STAGES, S, false>(x, W, b, y, m, n, k, smem);
}

// ---- Hopper: warpgroup MMAs (wgmma, compiled for sm_90a) ---------------------------------------
//
// A stage holds 64 columns of k: BM rows of x, then BN rows of W, each row 128 bytes whose eight
// 16-byte chunks are stored at chunk q ^ (r % 8) for row r (the 128-byte swizzle, which the tensor
// cores undo as they read); 8 rows make 1024 bytes, and the ring starts 1024-aligned. A warpgroup
// (4 warps) multiplies its 64 tokens by its BN / WGN rows of W, one wgmma per 16 columns of k,
// both operands read from shared memory through descriptors, while the cp.async loads of the next
// STAGES - 2 stages are in flight. Elsewhere the same entries run the mma.sync tiles.

template <int BM, int BN, int WGN, int STAGES>
struct WgTile {
    static constexpr int wn = BN / WGN, threads = 128 * (BM / 64) * WGN;
    static constexpr int stage_bytes = (BM + BN) * 128;
    static constexpr int smem_bytes = STAGES * stage_bytes + 1024;  // + 1024: to align the ring
    static_assert(BM % 64 == 0 && BM * 8 % threads == 0 && BN * 8 % threads == 0 && STAGES >= 3 &&
                  (wn == 64 || wn == 128 || wn == 256), "wide tile shape");
};

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

// D (64 x N, FP32) += A (64 x 16) B (N x 16)^T, A and B K-major in shared memory (descriptors a, b).
template <int N>
__device__ void wgmma(float (&d)[N / 8][4], uint64_t a, uint64_t b);

#define D4(j) "+f"(d[j][0]), "+f"(d[j][1]), "+f"(d[j][2]), "+f"(d[j][3])
template <>
__device__ __forceinline__ void wgmma<64>(float (&d)[8][4], uint64_t a, uint64_t b)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
                 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, "
                 "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
                 "}, %32, %33, p, 1, 1, 0, 0;\n}\n"
                 : D4(0), D4(1), D4(2), D4(3), D4(4), D4(5), D4(6), D4(7)
                 : "l"(a), "l"(b));
}

template <>
__device__ __forceinline__ void wgmma<128>(float (&d)[16][4], uint64_t a, uint64_t b)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
                 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, "
                 "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, "
                 "%38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, "
                 "%56, %57, %58, %59, %60, %61, %62, %63"
                 "}, %64, %65, p, 1, 1, 0, 0;\n}\n"
                 : D4(0), D4(1), D4(2), D4(3), D4(4), D4(5), D4(6), D4(7),
                   D4(8), D4(9), D4(10), D4(11), D4(12), D4(13), D4(14), D4(15)
                 : "l"(a), "l"(b));
}

template <>
__device__ __forceinline__ void wgmma<256>(float (&d)[32][4], uint64_t a, uint64_t b)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {"
                 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, "
                 "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, "
                 "%38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, "
                 "%56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, "
                 "%74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, "
                 "%92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, "
                 "%108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, "
                 "%123, %124, %125, %126, %127"
                 "}, %128, %129, p, 1, 1, 0, 0;\n}\n"
                 : D4(0), D4(1), D4(2), D4(3), D4(4), D4(5), D4(6), D4(7),
                   D4(8), D4(9), D4(10), D4(11), D4(12), D4(13), D4(14), D4(15),
                   D4(16), D4(17), D4(18), D4(19), D4(20), D4(21), D4(22), D4(23),
                   D4(24), D4(25), D4(26), D4(27), D4(28), D4(29), D4(30), D4(31)
                 : "l"(a), "l"(b));
}
#undef D4

__device__ __forceinline__ void wgmma_fence()
{
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit()
{
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int N>
__device__ __forceinline__ void wgmma_wait()
{
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" :: "n"(N) : "memory");
}
// What threads wrote to shared memory (cp.async, st.shared) made visible to the tensor cores' reads.
__device__ __forceinline__ void fence_async_shared()
{
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// The descriptor of a K-major operand at shared address `addr`: rows of 128 bytes with the
// 128-byte swizzle, groups of 8 rows 1024 bytes apart.
__device__ __forceinline__ uint64_t smem_desc(unsigned addr)
{
    return (uint64_t)((addr & 0x3FFFF) >> 4) | (uint64_t)1 << 16 | (uint64_t)(1024 >> 4) << 32 | (uint64_t)1 << 62;
}

// `rows` rows (first: `first`, `live` of them inside the matrix) of 64 columns from kk, into a stage at
// byte `at`, each thread its share of 16-byte chunks. Rows past `live` and columns at or past kend
// read as zeros.
template <int ROWS, int THREADS, bool VEC>
__device__ __forceinline__ void load_rows(unsigned char* stage, int at, const bf16* __restrict__ src, int first,
                                          int live, int k, int kk, int kend)
{
    const unsigned base = (unsigned)__cvta_generic_to_shared(stage) + at;
#pragma unroll
    for (int i = 0; i < ROWS * 8 / THREADS; ++i) {
        const int c = threadIdx.x + i * THREADS, r = c >> 3, q = c & 7;
        const bool in = first + r < live;
        const bf16* row = src + (size_t)(in ? first + r : 0) * k;
        const int col = kk + 8 * q, dst = r * 128 + ((q ^ (r & 7)) << 4);
        if constexpr (VEC) {
            const bool ok = in && col < kend;  // k % 8 == 0: all 8 columns in, or none
            cp_async16(base + dst, ok ? (const void*)(row + col) : (const void*)row, ok ? 16 : 0);
        } else {
            *reinterpret_cast<uint4*>(stage + at + dst) = in ? load_elements(row, col, kend) : make_uint4(0, 0, 0, 0);
        }
    }
}

template <int BM, int BN, int WGN, int STAGES, int S, bool VEC>
__device__ __forceinline__ void wgmma_gemm(const bf16* __restrict__ x, const bf16* __restrict__ W,
                                           const bf16* __restrict__ b, bf16* __restrict__ y, int m, int n, int k,
                                           unsigned char* smem)
{
    using T = WgTile<BM, BN, WGN, STAGES>;
    constexpr int WNR = T::wn, THREADS = T::threads;
    smem += (1024 - ((unsigned)__cvta_generic_to_shared(smem) & 1023)) & 1023;
    const int wg = threadIdx.x >> 7, warp = (threadIdx.x >> 5) & 3;
    const int wgm = wg / WGN, wgn = wg % WGN;
    const int tok0 = blockIdx.x * BM, row0 = blockIdx.y * BN;
    const unsigned rank = S > 1 ? cluster_rank() : 0;
    const int run = ((k + S - 1) / S + 63) / 64 * 64;  // k per block of the cluster, whole stages
    const int k0 = min(k, (int)rank * run), k1 = min(k, k0 + run);
    const int stages = (k1 - k0 + 63) / 64;
    auto load = [&](int s) {
        unsigned char* stage = smem + (s % STAGES) * T::stage_bytes;
        load_rows<BM, THREADS, VEC>(stage, 0, x, tok0, m, k, k0 + 64 * s, k1);
        load_rows<BN, THREADS, VEC>(stage, BM * 128, W, row0, n, k, k0 + 64 * s, k1);
    };

    float acc[1][WNR / 8][4];
#pragma unroll
    for (int j = 0; j < WNR / 8; ++j) acc[0][j][0] = acc[0][j][1] = acc[0][j][2] = acc[0][j][3] = 0.0f;

#pragma unroll
    for (int s = 0; s < STAGES - 2; ++s) {
        if (s < stages)
            load(s);
        cp_async_commit();
    }
    const unsigned ring = (unsigned)__cvta_generic_to_shared(smem);
    for (int s = 0; s < stages; ++s) {
        cp_async_wait<STAGES - 3>();  // stage s has landed (this thread's copies) ...
        fence_async_shared();         // ... where the tensor cores see it ...
        __syncthreads();              // ... everyone's; and every warpgroup is done with stage s - 2
        if (s + STAGES - 2 < stages)
            load(s + STAGES - 2);     // into stage s - 2's slot
        cp_async_commit();
        const unsigned stage = ring + (s % STAGES) * T::stage_bytes;
        const uint64_t da = smem_desc(stage + wgm * 64 * 128), db = smem_desc(stage + (BM + wgn * WNR) * 128);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < 4; ++kk)  // 16 columns of k are 32 bytes: 2 in the descriptor's units
            wgmma<WNR>(acc[0], da + 2 * kk, db + 2 * kk);
        wgmma_commit();
        wgmma_wait<1>();  // stage s - 1's MMAs are done; stage s's may still run
    }
    wgmma_wait<0>();
    cp_async_wait<0>();
    store_tile<BM, BN, THREADS, S, 1, WNR / 8>(acc, wgm * 64 + 16 * warp, wgn * WNR, tok0, row0, rank, b, y, m, n,
                                               smem);
}

#endif  // __CUDA_ARCH_FEAT_SM90_ALL

// BM x BN tiles, S blocks of a cluster per tile: wgmma with STAGES stages where the target has it,
// else mma.sync tiles of 8 warps with FALLBACK stages (the launch's shared_bytes covers both).
template <int BM, int BN, int WGN, int STAGES, int S, int FALLBACK>
__device__ __forceinline__ void tile_entry(const bf16* x, const bf16* W, const bf16* b, bf16* y, int m, int n, int k)
{
    extern __shared__ __align__(128) unsigned char smem[];
    static_assert(WgTile<BM, BN, WGN, STAGES>::threads == 256 && Tile<BM, BN, 2, 4, FALLBACK, S>::threads == 256,
                  "both paths: one block of 256 threads");
    static_assert(Tile<BM, BN, 2, 4, FALLBACK, S>::smem_bytes <= WgTile<BM, BN, WGN, STAGES>::smem_bytes,
                  "the launch's shared_bytes covers both paths");
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    if (k % 8 == 0 && aligned16(x) && aligned16(W))
        wgmma_gemm<BM, BN, WGN, STAGES, S, true>(x, W, b, y, m, n, k, smem);
    else
        wgmma_gemm<BM, BN, WGN, STAGES, S, false>(x, W, b, y, m, n, k, smem);
#else
    mma_tile_kernel<BM, BN, 2, 4, FALLBACK, S>(x, W, b, y, m, n, k, smem);
#endif
}

// The launch's shared_bytes: 64 x 128 tiles (split4, split2, mid) MS stages of 24 KiB, 128 x 128
// tiles (gemm) 5 of 32 KiB, 128 x 256 tiles (wide) 4 of 48 KiB; each 1 KiB more to align the ring.
static_assert(WgTile<64, 128, 2, MS>::smem_bytes == 24576 * MS + 1024, "the launch's shared_bytes, 64 x 128 tiles");
static_assert(WgTile<128, 128, 1, 5>::smem_bytes == 164864, "the launch's shared_bytes, 128 x 128 tiles");
static_assert(WgTile<128, 256, 1, 4>::smem_bytes == 197632, "the launch's shared_bytes, 128 x 256 tiles");

extern "C" __global__ void __launch_bounds__(256)
linear_gelu_bf16_split4(const __nv_bfloat16* x, const __nv_bfloat16* W, const __nv_bfloat16* b, __nv_bfloat16* y,
                        int m, int n, int k) __cluster_dims__(1, 1, 4);

extern "C" __global__ void __launch_bounds__(256)
linear_gelu_bf16_split4(const __nv_bfloat16* x, const __nv_bfloat16* W, const __nv_bfloat16* b, __nv_bfloat16* y,
                        int m, int n, int k)
{
    tile_entry<64, 128, 2, MS, 4, MS>(x, W, b, y, m, n, k);
}

extern "C" __global__ void __launch_bounds__(256)
linear_gelu_bf16_split2(const __nv_bfloat16* x, const __nv_bfloat16* W, const __nv_bfloat16* b, __nv_bfloat16* y,
                        int m, int n, int k) __cluster_dims__(1, 1, 2);

extern "C" __global__ void __launch_bounds__(256)
linear_gelu_bf16_split2(const __nv_bfloat16* x, const __nv_bfloat16* W, const __nv_bfloat16* b, __nv_bfloat16* y,
                        int m, int n, int k)
{
    tile_entry<64, 128, 2, MS, 2, MS>(x, W, b, y, m, n, k);
}

extern "C" __global__ void __launch_bounds__(256)
linear_gelu_bf16(const __nv_bfloat16* x, const __nv_bfloat16* W, const __nv_bfloat16* b, __nv_bfloat16* y,
                 int m, int n, int k)
{
    tile_entry<64, 128, 2, MS, 1, MS>(x, W, b, y, m, n, k);
}

extern "C" __global__ void __launch_bounds__(256, 1)
linear_gelu_bf16_gemm(const __nv_bfloat16* x, const __nv_bfloat16* W, const __nv_bfloat16* b, __nv_bfloat16* y,
                      int m, int n, int k)
{
    tile_entry<128, 128, 1, 5, 1, GS>(x, W, b, y, m, n, k);
}

extern "C" __global__ void __launch_bounds__(256, 1)
linear_gelu_bf16_wide(const __nv_bfloat16* x, const __nv_bfloat16* W, const __nv_bfloat16* b, __nv_bfloat16* y,
                      int m, int n, int k)
{
    tile_entry<128, 256, 1, 4, 1, GS>(x, W, b, y, m, n, k);
}
