// SGEMM in six tiers, one kernel each (seven for split-K), picked by the launch expressions of experiment.json
// ("entry"). Four are one register-tiled algorithm, chosen by waves (num_sms: the GPU's SM
// count): each is the largest tile whose tiles still give at least 7/8 of the SMs a block,
// counting only what is at least half a tile along each dimension (a dimension under half a tile
// counts for nothing: 128-row tiles for an 8-row problem would be 94% padding):
//
// - L, matmul_f32: BM x BN tiles, TM x TN outputs per thread, BK-deep slices (all tunable; 128 x 256
//   with 8 x 16 per thread is 256 threads, one block per SM), for problems with enough L tiles;
// - M, matmul_f32_medium: 64 x 64 tiles, 8 x 4 per thread, 128 threads, 16-deep slices in 4 stages,
//   when L tiles would leave SMs idle (on the H200, 3-7% faster than 4 x 4 per thread, 256 threads
//   and 2 stages of 32: 1024^3 64.4 against 67.2 us, 128 x 8192 x 4096 240 against 252);
// - S, matmul_f32_small: 32 x 32 tiles, 4 x 4 per thread, 64 threads, 32-deep slices, for mid-sized
//   and skinny problems. None of the example's performance cases takes this tier, so its depth is
//   not tuned: 32 was the fastest on the H200;
// - XS, matmul_f32_tiny: ST x ST tiles, (ST/8) x (ST/8) per thread, 64 threads, SK-deep slices (ST
//   and SK tunable), for the rest: small problems, where parallelism matters more than reuse;
// - XXS, matmul_f32_direct: 16 x 16 tiles, one output per thread, 16-deep slices through shared
//   memory and nothing more, before all the others for problems of at most 65536 multiply-adds
//   (m * n * k), where a launch costs more than the work and XS's ring only adds to it (16^3 on
//   the H200: 5.3 us through XS, 4.0-4.3 us for initial.cu, which works this way).
//
// - split-K, matmul_f32_splitk2/4/8 (M tiles) and matmul_f32_splitk8s (S tiles): after L, for k >=
//   512 and m, n >= 32 (half a tile; below, a tile would be mostly padding), when the M tiles number
//   at most twice the SMs: S blocks per tile, the fewest that bring the blocks past 2 per SM (2
//   for up to two tiles per SM, 4 up to one and from a quarter, 8 below half, and 8 up to one
//   tile per SM from k = 1536, where it measured faster than 4; and the fewest of 1, 2 and 8
//   whose blocks spread evenly over the SMs from k = 1536 up to 2 tiles per SM, and from k = 4096
//   for any number of tiles L does not take), and 8 per S tile
//   when M tiles are fewer than a quarter of the SMs or would be a third more padding than S tiles
//   (96 rows). Each block (grid z, one thread block cluster per tile) sums its run of k; the
//   partial tiles are added through the cluster's shared memory (splitk_gemm). Before these, three
//   forms split each block's run again among groups of threads: matmul_f32_splitk2r (2 blocks of 2
//   groups per 128 x 128 tile, 8 x 16 outputs per thread in L's main loop) on 0.4-0.5 such tiles
//   per SM (8192 x 128 x 4096: 236 -> 220 us, 1024^3 65.3 -> 61.3), and with W > 1 clusters per tile
//   through a workspace (SPREAD, below) when its tiles are fewer than a quarter of the SMs, nearly
//   whole, their blocks fill 0.8 of the SMs, and k deep (256 x 256 x 32768: 0.58 -> 0.76x cuBLAS,
//   512 x 512 x 16384 0.71 -> 0.82x),
//   matmul_f32_splitk8sg (8 blocks of 2 groups per S tile) for k >= 4096 on at most SMs/8 M
//   tiles, and matmul_f32_splitk2g (2 blocks
//   of 4 groups, 8 x 8 outputs per thread, per M tile) for k >= 2048 on 0.4-0.5 M tiles per SM
//   (256 x 256 x 32768: 190 -> 165 us; 512 x 512 x 16384: 290 -> 265 us). Measured on the
//   H200, every form on every shape (benchmarks/sgemm_kernel_matrix.py): 515 x 261 x 1031 split 8
//   22.5 us, split 4 26.0, S 38.9; 256 x 256 x 32768 S split 8 187, M split 8 243; 96 x 3072 x 1536
//   S split 8 39.5, M split 8 45.1; 128 x 8192 x 4096 split 2 232.5, M 240.0; 100 x 100 x 1000 S
//   split 8 8.9, M split 8 10.9; 512^3 S 15.6, split 8 16.7, split 4 17.5.
//
// Every kernel computes C for any shape; the tiers differ only in speed.
//
// MINB blocks of 256 threads must fit on an SM (__launch_bounds__ of matmul_f32): 2 caps registers
// at 128 per thread, 1 lets the large tier keep bigger thread tiles and deeper slices in registers.
//
// Each thread accumulates its outputs in registers from operands it reads from shared memory as
// float4 (float2 for 2-wide fragments). Slices reach shared memory in one of two ways, each where
// it measured faster on the H200:
//
// - L and splitk2r (staged_mainloop): the next slice's global loads go to registers while the
//   current slice is multiplied, then to the other of two shared buffers, A transposed; the first
//   k-step's fragments of a slice are read right after its barrier, so the last k-step's FMAs hide
//   it (1.5% faster at 4096^3 with 128 x 256 tiles, 3-5% with 128 x 128 and 8 x 8 per thread).
//   Asynchronous copies into 2-4 stages, with A row-major or transposed, were 5-16% slower.
// - M, S, XS (async_gemm): cp.async copies global memory straight into a ring of shared buffers
//   (4 stages of 16-deep slices for M and split-K, 3 stages for S and XS, 2 for XS when 3 would
//   not fit), several slices in flight: up to 30% faster than staging on small, skinny and deep-k
//   shapes, whose few warps per SM cannot hide global latency alone (256^3 11.4 -> 9.2 us,
//   512x512x16384 463 -> 327 us).
//
// Global loads and stores are vectorised when k and n are multiples of 4 and the pointers are
// 16-byte aligned; otherwise element-wise, with every access guarded (out-of-range elements are
// zero-filled).
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
#ifndef ST
#define ST 16
#endif
#ifndef SK
#define SK 32
#endif
#ifndef MINB
#define MINB 2
#endif

#define APAD 4  // pads transposed-A rows: spreads the transposing stores over the banks

__device__ __forceinline__ bool aligned16(const void* p) { return ((unsigned long long)p & 15ull) == 0ull; }

// W consecutive floats from shared memory (W = 4 or 2), as one vector load.
template <int W>
__device__ __forceinline__ void fragment(float* out, const float* p)
{
    if constexpr (W == 4) {
        const float4 v = *reinterpret_cast<const float4*>(p);
        out[0] = v.x; out[1] = v.y; out[2] = v.z; out[3] = v.w;
    } else {
        const float2 v = *reinterpret_cast<const float2*>(p);
        out[0] = v.x; out[1] = v.y;
    }
}

// W (4 or 2) outputs from column col of one row of C: one float4 store when W == 4 and vec (n % 4
// == 0 and col % 4 == 0, so col < n implies col + 3 < n), else each one guarded.
template <int W>
__device__ __forceinline__ void store_outputs(float* row, int col, int n, const float* v, bool vec)
{
    if (W == 4 && vec && col < n) {
        *reinterpret_cast<float4*>(row + col) = make_float4(v[0], v[1], v[2], v[3]);
    } else {
#pragma unroll
        for (int j = 0; j < W; ++j)
            if (col + j < n) row[col + j] = v[j];
    }
}

// The large tier's (and splitk2r's): two shared buffers of one BK-deep slice each (A transposed),
// filled through registers.
// WROWS > 0: each warp is WROWS x (32 / WROWS) threads of the tile's thread grid, so that its
// fragment loads read fewer distinct addresses; 0: threads in row-major order.
// ROW_LOADS: where k or n is not a multiple of 4, each warp loads whole rows of the slices
// element by element (staged_mainloop's ELEM) rather than quads.
template <int TBM, int TBN, int TBK, int TTM, int TTN, int WROWS = 0, bool ROW_LOADS = false>
struct StagedTier {
    static constexpr int bm = TBM, bn = TBN, bk = TBK, tm = TTM, tn = TTN;
    static constexpr bool row_loads = ROW_LOADS;
    static constexpr int threads = (TBM / TTM) * (TBN / TTN);
    static constexpr int vm = TTM < 4 ? TTM : 4;  // fragment width along m
    static constexpr int vn = TTN < 4 ? TTN : 4;
    static constexpr int a_loads = TBM * TBK / 4 / threads;  // float4 loads of A per thread per slice
    static constexpr int b_loads = TBK * TBN / 4 / threads;
    static constexpr int a_floats = TBK * (TBM + APAD);
    static constexpr int b_floats = TBK * TBN;
    static constexpr int smem_floats = 2 * (a_floats + b_floats);
    static constexpr bool staged = true;
    static constexpr int cols = TBN / TTN;  // threads along n
    static_assert(WROWS == 0 || (32 % WROWS == 0 && (TBM / TTM) % WROWS == 0 && cols % (32 / WROWS) == 0),
                  "warps tile the thread grid");
    static __device__ __forceinline__ int tx_of(int tid)
    {
        if constexpr (WROWS == 0)
            return tid % cols;
        else
            return (tid / 32) % (cols / (32 / WROWS)) * (32 / WROWS) + tid % (32 / WROWS);
    }
    static __device__ __forceinline__ int ty_of(int tid)
    {
        if constexpr (WROWS == 0)
            return tid / cols;
        else
            return (tid / 32) / (cols / (32 / WROWS)) * WROWS + tid % 32 / (32 / WROWS);
    }
    // Where output (i, j) of thread (ty, tx) sits in the tile: groups of vm rows (vn columns)
    // spread so that a warp's fragment loads are contiguous.
    static __device__ __forceinline__ int row(int ty, int i) { return (i / vm) * (vm * TBM / TTM) + ty * vm + i % vm; }
    static __device__ __forceinline__ int col(int tx, int j) { return (j / vn) * (vn * TBN / TTN) + tx * vn + j % vn; }
    static_assert(TTM % vm == 0 && TTN % vn == 0 && (vm == 2 || vm == 4) && (vn == 2 || vn == 4), "fragment widths");
    static_assert(a_loads >= 1 && b_loads >= 1 && a_loads * threads * 4 == TBM * TBK &&
                  b_loads * threads * 4 == TBK * TBN, "each thread loads whole float4s of both tiles");
};

// The barrier of the threads of one main loop: 0 is the whole block (__syncthreads), 1.. a named
// barrier of `threads` threads, one per group of a block that splits k among several groups
// (splitk_gemm).
__device__ __forceinline__ void group_barrier(int bar, int threads)
{
    if (bar == 0)
        __syncthreads();
    else
        asm volatile("bar.sync %0, %1;\n" ::"r"(bar), "r"(threads) : "memory");
}

// Whether staged_mainloop may load both operands as float4.
__device__ __forceinline__ bool staged_vec(const float* a, const float* b, int n, int k)
{
    return k % 4 == 0 && n % 4 == 0 && aligned16(a) && aligned16(b);
}

// The products of rows row0.. of A and columns col0.. of B over k0 <= kk < k1 (k1 - k0 a multiple
// of T::bk, or k1 == k), summed into acc: this thread's TTM x TTN outputs (T::row, T::col), the
// threads taking part tid = 0 .. T::threads - 1 of barrier `bar` (see group_barrier).
//
// A slice's loads are unguarded when every element of this thread's is in range, float4 when VEC
// (k and n multiples of 4, a and b 16-byte aligned; then k1 % 4 == 0 too, as k1 is k or a whole
// number of slices), behind one branch; else element by element, each guarded. The branch also
// keeps the loads where they are issued: guarded one by one and branch-free, the compiler sank
// them past the FMAs they should overlap (H200, splitk2r at 8192 x 128 x 4096: 228 -> 271 us).
// Every address the loop needs is a register carried from slice to slice (global pointers
// advanced, shared ones moved to the other buffer), not recomputed from the thread index: under
// the loop's register pressure the compiler did recompute those, once a slice, and waited on the
// special-register read. Together, on the H200: splitk2r 8192 x 128 x 4096 226 -> 215 us, 4096^3
// level, 4097 x 4095 x 4099 3248 -> 3213 us (docs/benchmarks.md, "The staged main loop's loads").
template <class T, bool VEC>
__device__ __forceinline__ void staged_mainloop(const float* __restrict__ a, const float* __restrict__ b, int m, int n,
                                                int k, int k0, int k1, float* smem, float (&acc)[T::tm][T::tn],
                                                int tid, int bar)
{
    constexpr int TBM = T::bm, TBN = T::bn, TBK = T::bk, TTM = T::tm, TTN = T::tn;
    constexpr int THREADS = T::threads, VM = T::vm, VN = T::vn;
    constexpr int ROW_STRIDE = VM * TBM / TTM;  // distance between a thread's groups of VM rows
    constexpr int COL_STRIDE = VN * TBN / TTN;
    constexpr int AROW = TBM + APAD;            // a row of transposed A in shared memory
    constexpr int A_QUADS = TBK / 4;            // float4s per row of A's slice
    constexpr int A_STEP = THREADS / A_QUADS;   // rows between a thread's loads of A
    constexpr int B_STEP = THREADS / (TBN / 4); // rows between a thread's loads of B
    static_assert(THREADS % A_QUADS == 0 && THREADS % (TBN / 4) == 0, "each thread loads one column of quads");
    // Two buffers, each a slice of A transposed ([TBK][AROW]) and then one of B ([TBK][TBN]).
    constexpr int BUF = T::a_floats + T::b_floats;
    // Which elements of a slice this thread loads: its element (l, j) (l < a_loads or b_loads, j <
    // 4) lies l * RS + j * RJ rows and j * KJ (A) or j * CJ (B) columns past its first. With
    // float4s (VEC), quads: 4 consecutive elements of a row, j along the row. Element-wise (ELEM),
    // consecutive threads take consecutive elements of a row and j steps down the rows, so that one
    // load instruction of a warp reads whole rows of the slice (4 x 32 bytes of A, 128 of B) where
    // quads would read 2 elements of 16 rows of A, 32 bytes apart across B, at each of 4 loads.
    constexpr bool ELEM = T::row_loads && !VEC && THREADS % TBK == 0 && THREADS % TBN == 0;
    constexpr int EA = ELEM ? THREADS / TBK : 0, EB = ELEM ? THREADS / TBN : 0;  // rows a load instruction spans
    constexpr int RS_A = ELEM ? 4 * EA : A_STEP, RJ_A = EA, KJ_A = ELEM ? 0 : 1;
    constexpr int RS_B = ELEM ? 4 * EB : B_STEP, RJ_B = EB, CJ_B = ELEM ? 0 : 1;

    const int slices = k1 > k0 ? (k1 - k0 + TBK - 1) / TBK : 0;
    if (slices == 0) return;  // every thread of the barrier has the same run
    const int tx = T::tx_of(tid), ty = T::ty_of(tid);
    const int ar = blockIdx.y * TBM + (ELEM ? tid / TBK : tid / A_QUADS);        // row of A of this thread's first load
    const int aq = ELEM ? tid % TBK : (tid % A_QUADS) * 4;                        // its k within a slice
    const int br = ELEM ? tid / TBN : tid / (TBN / 4);                           // row of B's slice of its first load
    const int bc = blockIdx.x * TBN + (ELEM ? tid % TBN : (tid % (TBN / 4)) * 4);  // its column

    // Carried from slice to slice: the global addresses of this thread's next loads and the k of
    // its first load of A and of B; the shared addresses it stores the next slice to (a_st, b_st)
    // and reads this one from (a_rd, b_rd), each moved to the other buffer after a slice (flip).
    const float* ga = a + (size_t)min(ar, m - 1) * k + k0 + aq;
    const float* gb = b + (size_t)(k0 + br) * n + min(bc, n - 4 + (VEC ? 0 : 3));  // an address in B even past n
    int ka = k0 + aq, kb = k0 + br;
    float* a_st = smem + aq * AROW + (ar - blockIdx.y * TBM);
    float* b_st = smem + T::a_floats + br * TBN + (bc - blockIdx.x * TBN);
    const float* a_rd = smem + ty * VM;
    const float* b_rd = smem + T::a_floats + tx * VN;
    int flip = BUF;

    float ra[T::a_loads][4], rb[T::b_loads][4];
    auto load = [&]() {
        // Every element of this thread's loads in range (see above); when VEC, ka < k1 implies
        // ka + 3 < k1, and bc < n that bc + 3 < n.
        const bool all = VEC && ka < k1 && kb + (T::b_loads - 1) * B_STEP < k1 && bc < n &&
                         ar + (T::a_loads - 1) * A_STEP < m;
        const bool whole = !VEC && ka + 3 * KJ_A < k1 && kb + (T::b_loads - 1) * RS_B + 3 * RJ_B < k1 &&
                           bc + 3 * CJ_B < n && ar + (T::a_loads - 1) * RS_A + 3 * RJ_A < m;
        if (all) {
#pragma unroll
            for (int l = 0; l < T::a_loads; ++l) {
                const float4 v = __ldg(reinterpret_cast<const float4*>(ga + (size_t)l * A_STEP * k));
                ra[l][0] = v.x; ra[l][1] = v.y; ra[l][2] = v.z; ra[l][3] = v.w;
            }
#pragma unroll
            for (int l = 0; l < T::b_loads; ++l) {
                const float4 v = __ldg(reinterpret_cast<const float4*>(gb + (size_t)l * B_STEP * n));
                rb[l][0] = v.x; rb[l][1] = v.y; rb[l][2] = v.z; rb[l][3] = v.w;
            }
        } else if (whole) {
#pragma unroll
            for (int l = 0; l < T::a_loads; ++l)
#pragma unroll
                for (int j = 0; j < 4; ++j) ra[l][j] = __ldg(ga + (size_t)(l * RS_A + j * RJ_A) * k + j * KJ_A);
#pragma unroll
            for (int l = 0; l < T::b_loads; ++l)
#pragma unroll
                for (int j = 0; j < 4; ++j) rb[l][j] = __ldg(gb + (size_t)(l * RS_B + j * RJ_B) * n + j * CJ_B);
        } else {
#pragma unroll
            for (int l = 0; l < T::a_loads; ++l)
#pragma unroll
                for (int j = 0; j < 4; ++j) {
                    const int dr = l * RS_A + j * RJ_A;
                    ra[l][j] = ar + dr < m && ka + j * KJ_A < k1 ? __ldg(ga + (size_t)dr * k + j * KJ_A) : 0.0f;
                }
#pragma unroll
            for (int l = 0; l < T::b_loads; ++l)
#pragma unroll
                for (int j = 0; j < 4; ++j) {
                    const int dr = l * RS_B + j * RJ_B;
                    rb[l][j] = kb + dr < k1 && bc + j * CJ_B < n ? __ldg(gb + (size_t)dr * n + j * CJ_B) : 0.0f;
                }
        }
        ga += TBK;
        gb += (size_t)TBK * n;
        ka += TBK;
        kb += TBK;
    };
    auto store = [&]() {  // into the buffer at a_st, b_st
#pragma unroll
        for (int l = 0; l < T::a_loads; ++l)
#pragma unroll
            for (int j = 0; j < 4; ++j) a_st[j * (KJ_A * AROW + RJ_A) + l * RS_A] = ra[l][j];
#pragma unroll
        for (int l = 0; l < T::b_loads; ++l) {
            if constexpr (ELEM) {
#pragma unroll
                for (int j = 0; j < 4; ++j) b_st[(l * RS_B + j * RJ_B) * TBN] = rb[l][j];
            } else {
                *reinterpret_cast<float4*>(b_st + l * B_STEP * TBN) = make_float4(rb[l][0], rb[l][1], rb[l][2], rb[l][3]);
            }
        }
    };

    load();
    store();
    a_st += BUF;
    b_st += BUF;
    group_barrier(bar, THREADS);
    // Fragments of k-step kk of the buffer at a_rd, b_rd; each k-step's are read while the
    // previous one's FMAs run, and the first k-step's of a slice right after the barrier.
    auto fragments = [&](float* av, float* bv, int kk) {
#pragma unroll
        for (int h = 0; h < TTM / VM; ++h) fragment<VM>(av + h * VM, a_rd + kk * AROW + h * ROW_STRIDE);
#pragma unroll
        for (int h = 0; h < TTN / VN; ++h) fragment<VN>(bv + h * VN, b_rd + kk * TBN + h * COL_STRIDE);
    };
    float av[TTM], bv[TTN];
    fragments(av, bv, 0);
    for (int t = 0; t < slices; ++t) {
        const bool more = t + 1 < slices;
        if (more) load();  // global loads in flight during the FMAs below
#pragma unroll
        for (int kk = 0; kk < TBK; ++kk) {
            float an[TTM], bn[TTN];
            if (kk + 1 < TBK) fragments(an, bn, kk + 1);
#pragma unroll
            for (int i = 0; i < TTM; ++i)
#pragma unroll
                for (int j = 0; j < TTN; ++j) acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
            if (kk + 1 < TBK) {
#pragma unroll
                for (int i = 0; i < TTM; ++i) av[i] = an[i];
#pragma unroll
                for (int j = 0; j < TTN; ++j) bv[j] = bn[j];
            }
        }
        if (more) store();  // the other buffer was last read before the previous barrier
        a_st -= flip;
        b_st -= flip;
        a_rd += flip;
        b_rd += flip;
        flip = -flip;
        group_barrier(bar, THREADS);
        if (more) fragments(av, bv, 0);
    }
}

template <class T>
__device__ __forceinline__ void staged_gemm(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ c,
                                     int m, int n, int k, float* smem)
{
    constexpr int TTM = T::tm, TTN = T::tn, VN = T::vn;
    const int tx = T::tx_of(threadIdx.x);
    const int ty = T::ty_of(threadIdx.x);
    const int row0 = blockIdx.y * T::bm;
    const int col0 = blockIdx.x * T::bn;
    const bool vecC = (n % 4 == 0) && aligned16(c);
    float acc[TTM][TTN];
#pragma unroll
    for (int i = 0; i < TTM; ++i)
#pragma unroll
        for (int j = 0; j < TTN; ++j) acc[i][j] = 0.0f;
    if (staged_vec(a, b, n, k))
        staged_mainloop<T, true>(a, b, m, n, k, 0, k, smem, acc, threadIdx.x, 0);
    else
        staged_mainloop<T, false>(a, b, m, n, k, 0, k, smem, acc, threadIdx.x, 0);

#pragma unroll
    for (int i = 0; i < TTM; ++i) {
        const int r = row0 + T::row(ty, i);
        if (r >= m) continue;
        float* row = c + (size_t)r * n;
#pragma unroll
        for (int h = 0; h < TTN / VN; ++h) store_outputs<VN>(row, col0 + T::col(tx, h * VN), n, &acc[i][h * VN], vecC);
    }
}

// Copies 16 (or 4) bytes from global to shared memory without passing through registers; when
// !ok nothing is read (src may be any valid address) and the destination is zero-filled.
__device__ __forceinline__ void copy16(float* dst, const float* src, bool ok)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"((unsigned)__cvta_generic_to_shared(dst)),
                 "l"(src), "r"(ok ? 16 : 0));
}
__device__ __forceinline__ void copy4(float* dst, const float* src, bool ok)
{
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"((unsigned)__cvta_generic_to_shared(dst)),
                 "l"(src), "r"(ok ? 4 : 0));
}
__device__ __forceinline__ void commit_copies() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void wait_copies() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

// Elements col .. col + 3 of row `row` of a row-major matrix with `cols` columns into shared
// memory: one 16-byte copy when VEC (cols % 4 == 0, col % 4 == 0 and end % 4 == 0 or end == cols,
// so col < end covers all four), else four 4-byte copies; elements outside are zero-filled.
// `end` (at most cols) bounds the columns read: a K slice of A ends before the row does.
template <bool VEC>
__device__ __forceinline__ void copy_quad(float* dst, const float* base, int row, bool row_ok, int col, int cols,
                                          int end)
{
    if constexpr (VEC) {
        const bool ok = row_ok && col < end;
        copy16(dst, ok ? base + (size_t)row * cols + col : base, ok);
    } else {
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const bool ok = row_ok && col + j < end;
            copy4(dst + j, ok ? base + (size_t)row * cols + col + j : base, ok);
        }
    }
}

// A ring of STAGES shared buffers, each a BK-deep slice of A (row-major: cp.async cannot
// transpose) and of B; each thread owns rows ty + i * (TBM / TTM) of the tile.
template <int TBM, int TBN, int TBK, int TTM, int TTN, int STAGES>
struct AsyncTier {
    static constexpr int bm = TBM, bn = TBN, bk = TBK, tm = TTM, tn = TTN, stages = STAGES;
    static constexpr int threads = (TBM / TTM) * (TBN / TTN);
    static constexpr int vn = TTN < 4 ? TTN : 4;
    // The 2-4 rows a warp reads at once fall in different banks: pad rows of 16 or more floats.
    static constexpr int a_row = TBK + (TBK % 16 == 0 ? 4 : 0);
    static constexpr int a_floats = TBM * a_row;
    static constexpr int stage_floats = a_floats + TBK * TBN;
    static constexpr int smem_floats = STAGES * stage_floats;
    static constexpr bool staged = false;
    static __device__ __forceinline__ int tx_of(int tid) { return tid % (TBN / TTN); }
    static __device__ __forceinline__ int ty_of(int tid) { return tid / (TBN / TTN); }
    static constexpr int a_loads = TBM * TBK / 4 / threads;
    static constexpr int b_loads = TBK * TBN / 4 / threads;
    // Where output (i, j) of thread (ty, tx) sits in the tile (rows every TBM / TTM, groups of vn columns).
    static __device__ __forceinline__ int row(int ty, int i) { return ty + i * (TBM / TTM); }
    static __device__ __forceinline__ int col(int tx, int j) { return (j / vn) * (vn * TBN / TTN) + tx * vn + j % vn; }
    static_assert(STAGES >= 2 && TBK % 4 == 0 && a_loads * threads * 4 == TBM * TBK && b_loads * threads * 4 == TBK * TBN,
                  "each thread copies whole float4s of both tiles");
};

// As staged_mainloop, from a ring of shared buffers filled by cp.async.
template <class T, bool VEC>
__device__ __forceinline__ void async_mainloop(const float* __restrict__ a, const float* __restrict__ b, int m, int n,
                                               int k, int k0, int k1, float* smem, float (&acc)[T::tm][T::tn],
                                               int tid, int bar)
{
    constexpr int TBM = T::bm, TBN = T::bn, TBK = T::bk, TTM = T::tm, TTN = T::tn, STAGES = T::stages;
    constexpr int THREADS = T::threads, VN = T::vn, ROWS = TBM / TTM, COL_STRIDE = VN * TBN / TTN;
    const int tx = T::tx_of(tid);
    const int ty = T::ty_of(tid);
    const int row0 = blockIdx.y * TBM;
    const int col0 = blockIdx.x * TBN;

    auto load = [&](int stage, int ks) {
        float* As = smem + stage * T::stage_floats;
        float* Bs = As + T::a_floats;
#pragma unroll
        for (int l = 0; l < T::a_loads; ++l) {
            const int e = tid + l * THREADS;
            const int r = e / (TBK / 4), kq = (e % (TBK / 4)) * 4;
            copy_quad<VEC>(As + r * T::a_row + kq, a, row0 + r, row0 + r < m, ks + kq, k, k1);
        }
#pragma unroll
        for (int l = 0; l < T::b_loads; ++l) {
            const int e = tid + l * THREADS;
            const int r = e / (TBN / 4), cq = (e % (TBN / 4)) * 4;
            copy_quad<VEC>(Bs + r * TBN + cq, b, ks + r, ks + r < k1, col0 + cq, n, n);
        }
    };

    const int slices = k1 > k0 ? (k1 - k0 + TBK - 1) / TBK : 0;
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < slices) load(s, k0 + s * TBK);
        commit_copies();  // one group per slice, empty past the end, so that the count below holds
    }
    int read = 0, write = STAGES - 1;
    for (int t = 0; t < slices; ++t) {
        wait_copies<STAGES - 2>();    // this thread's copies of slice t have landed...
        group_barrier(bar, THREADS);  // ...and everyone's; everyone is also done reading slice t - 1
        if (t + STAGES - 1 < slices) load(write, k0 + (t + STAGES - 1) * TBK);  // into slice t - 1's buffer
        commit_copies();
        const float* As = smem + read * T::stage_floats;
        const float* Bs = As + T::a_floats;
#pragma unroll
        for (int kq = 0; kq < TBK; kq += 4) {
            float av[TTM][4];
#pragma unroll
            for (int i = 0; i < TTM; ++i) fragment<4>(av[i], As + (ty + i * ROWS) * T::a_row + kq);
#pragma unroll
            for (int kk = 0; kk < 4; ++kk) {
                float bv[TTN];
#pragma unroll
                for (int h = 0; h < TTN / VN; ++h)
                    fragment<VN>(bv + h * VN, Bs + (kq + kk) * TBN + h * COL_STRIDE + tx * VN);
#pragma unroll
                for (int i = 0; i < TTM; ++i)
#pragma unroll
                    for (int j = 0; j < TTN; ++j) acc[i][j] = fmaf(av[i][kk], bv[j], acc[i][j]);
            }
        }
        read = read + 1 == STAGES ? 0 : read + 1;
        write = write + 1 == STAGES ? 0 : write + 1;
    }
}

template <class T, bool VEC>
__device__ __forceinline__ void async_gemm_v(const float* __restrict__ a, const float* __restrict__ b,
                                             float* __restrict__ c, int m, int n, int k, float* smem)
{
    constexpr int TTM = T::tm, TTN = T::tn, VN = T::vn;
    const int tx = T::tx_of(threadIdx.x);
    const int ty = T::ty_of(threadIdx.x);
    const int row0 = blockIdx.y * T::bm;
    const int col0 = blockIdx.x * T::bn;
    float acc[TTM][TTN];
#pragma unroll
    for (int i = 0; i < TTM; ++i)
#pragma unroll
        for (int j = 0; j < TTN; ++j) acc[i][j] = 0.0f;
    async_mainloop<T, VEC>(a, b, m, n, k, 0, k, smem, acc, threadIdx.x, 0);

    const bool vecC = (n % 4 == 0) && aligned16(c);
#pragma unroll
    for (int i = 0; i < TTM; ++i) {
        const int r = row0 + T::row(ty, i);
        if (r >= m) continue;
        float* row = c + (size_t)r * n;
#pragma unroll
        for (int h = 0; h < TTN / VN; ++h) store_outputs<VN>(row, col0 + T::col(tx, h * VN), n, &acc[i][h * VN], vecC);
    }
}

template <class T>
__device__ __forceinline__ void async_gemm(const float* a, const float* b, float* c, int m, int n, int k, float* smem)
{
    if (k % 4 == 0 && n % 4 == 0 && aligned16(a) && aligned16(b))
        async_gemm_v<T, true>(a, b, c, m, n, k, smem);
    else
        async_gemm_v<T, false>(a, b, c, m, n, k, smem);
}

// Split-K for problems whose output tiles cannot fill the GPU (deep k, or few rows or columns):
// the S blocks of a thread-block cluster (__cluster_dims__(1, 1, S), grid z = S) share one output
// tile, and each block's G groups of T::threads threads (G = 1: the whole block) share its work:
// group g of block z sums the products over run z * G + g of k, a whole number of slices (the last
// runs may be short or empty), in its own ring of shared memory and behind its own barrier. The
// groups' partial tiles are added within the block, halving the groups each round (group g + G/2
// into group g), then group 0 leaves the block's partial in shared memory; after a cluster barrier
// each block adds rows z * TBM / S .. of all S partials, read from the cluster's shared memory in
// rank order 0, 1, .., S - 1 (so every launch rounds the same way), and stores them to C; a second
// barrier keeps every block's shared memory alive until all have read it. Nothing lives outside
// the launch: no global workspace, no counter, no atomics, and every element of C is written once,
// by one block.
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

// The shared memory splitk_gemm<T, S, G> needs, in floats: G rings, which then hold the partial tiles.
template <class T, int G>
__host__ __device__ constexpr int splitk_floats()
{
    const int partials = T::bm * T::bn * (G > 1 ? G / 2 : 1);
    return G * T::smem_floats > partials ? G * T::smem_floats : partials;
}

// Split-K across clusters (SPREAD): the launch may give a tile W > 1 clusters (grid z = S * W), so
// that a few tiles still fill the GPU (256 x 256 x 32768 has 4 tiles of 128 x 128: 16 clusters of
// 2 each). Cluster w leaves its summed partial tile in a global workspace, band by band, the band
// of cluster block `rank` at slot w; each block then counts its arrival for (tile, rank), and the
// last of the W to arrive adds the W bands in slot order 0 .. W - 1 and stores them to C. The
// counter is an atomicInc that wraps at W - 1, so the last arrival leaves it at 0: nothing
// survives the launch but zeros, every slot read was written earlier in the same launch, and the
// sum's order never depends on which cluster came last (every launch gives the same bits). Nothing
// spins: the blocks that arrive early leave. The experiment names spread_bands its workspace: the
// harness poisons it (NaN) before every launch, so a slot read before this launch wrote it fails
// the checks; the counters are the kernel's own kept state (within limits.global_bytes), reset by
// the kernel alone. Both are the module's, so launches of one module on concurrent streams must
// not overlap (the harness runs one launch at a time).
constexpr int SPREAD_FLOATS = 1 << 21;  // 8 MiB: W * tiles <= num_sms / 2 tiles of 128 x 128 up to 256 SMs
constexpr int SPREAD_COUNTERS = 128;    // tiles * S <= num_sms / 2 up to 256 SMs: 512 bytes of kept state
__device__ float4 spread_bands[SPREAD_FLOATS / 4];
__device__ unsigned spread_arrivals[SPREAD_COUNTERS];

template <class T, int S, int G = 1, bool SPREAD = false>
__device__ __forceinline__ void splitk_gemm(const float* __restrict__ a, const float* __restrict__ b,
                                            float* __restrict__ c, int m, int n, int k, float* smem)
{
    constexpr int TBM = T::bm, TBN = T::bn, TBK = T::bk, TTM = T::tm, TTN = T::tn;
    constexpr int GROUP = T::threads, THREADS = G * GROUP, TILE = TBM * TBN;
    static_assert(TBM % S == 0 && TBN % 4 == 0 && (G & (G - 1)) == 0, "whole rows per block, whole groups");
    const int group = threadIdx.x / GROUP, tid = threadIdx.x % GROUP;
    const int tx = T::tx_of(tid);
    const int ty = T::ty_of(tid);
    const unsigned rank = cluster_rank();
    const int ways = SPREAD ? (int)gridDim.z / S : 1, way = SPREAD ? (int)blockIdx.z / S : 0;
    const int parts = S * G * ways;
    const int run = ((k + parts - 1) / parts + TBK - 1) / TBK * TBK;  // k per group, whole slices
    const int k0 = min(k, ((way * S + (int)rank) * G + group) * run), k1 = min(k, k0 + run);

    float acc[TTM][TTN];
#pragma unroll
    for (int i = 0; i < TTM; ++i)
#pragma unroll
        for (int j = 0; j < TTN; ++j) acc[i][j] = 0.0f;
    float* ring = smem + group * T::smem_floats;
    const int bar = G == 1 ? 0 : 1 + group;
    if constexpr (T::staged) {
        if (staged_vec(a, b, n, k))
            staged_mainloop<T, true>(a, b, m, n, k, k0, k1, ring, acc, tid, bar);
        else
            staged_mainloop<T, false>(a, b, m, n, k, k0, k1, ring, acc, tid, bar);
    } else {
        if (k % 4 == 0 && n % 4 == 0 && aligned16(a) && aligned16(b))
            async_mainloop<T, true>(a, b, m, n, k, k0, k1, ring, acc, tid, bar);
        else
            async_mainloop<T, false>(a, b, m, n, k, k0, k1, ring, acc, tid, bar);
        wait_copies<0>();
    }
    __syncthreads();  // the rings are free: they hold partial tiles from here on

    // This thread's outputs in a partial tile at p: stored there, or (add) added from there, a
    // fragment of VN columns at a time; in the staged tiers one float4 when VN == 4 (a quarter
    // warp's are 128 contiguous bytes, no bank conflicts; see BATCH below for the others).
    auto each_output = [&](float* p, bool add) {
#pragma unroll
        for (int i = 0; i < TTM; ++i)
#pragma unroll
            for (int j = 0; j < TTN; j += T::vn) {
                float* q = p + T::row(ty, i) * TBN + T::col(tx, j);
                if constexpr (T::vn == 4 && T::staged) {
                    float4* q4 = reinterpret_cast<float4*>(q);
                    if (add) {
                        const float4 v = *q4;
                        acc[i][j] += v.x; acc[i][j + 1] += v.y; acc[i][j + 2] += v.z; acc[i][j + 3] += v.w;
                    } else {
                        *q4 = make_float4(acc[i][j], acc[i][j + 1], acc[i][j + 2], acc[i][j + 3]);
                    }
                } else {
#pragma unroll
                    for (int jj = 0; jj < T::vn; ++jj) {
                        if (add)
                            acc[i][j + jj] += q[jj];
                        else
                            q[jj] = acc[i][j + jj];
                    }
                }
            }
    };
#pragma unroll
    for (int half = G / 2; half >= 1; half /= 2) {
        if (group >= half && group < 2 * half) each_output(smem + (group - half) * TILE, false);
        __syncthreads();
        if (group < half) each_output(smem + group * TILE, true);
        __syncthreads();
    }
    if (group == 0) each_output(smem, false);
    cluster_barrier();  // every partial is in place

    const int row0 = blockIdx.y * TBM, col0 = blockIdx.x * TBN;
    const bool vecC = (n % 4 == 0) && aligned16(c);
    constexpr int QUADS = TBM / S * (TBN / 4);  // this block's share of the tile, in float4s
    // With W > 1, this block's band in every slot: band (tile, rank) holds W slots of QUADS float4s.
    const int band = (blockIdx.y * gridDim.x + blockIdx.x) * S + (int)rank;
    float4* slots = spread_bands + (size_t)band * ways * QUADS;
    if (SPREAD && ways > 1 && ((long long)(band + 1) * ways * QUADS > SPREAD_FLOATS / 4 || band >= SPREAD_COUNTERS))
        __trap();  // the launch gave more clusters than the workspace holds: fail loudly, never overwrite
    auto store_quad = [&](int r, int cq, float4 v) {
        const float out[4] = {v.x, v.y, v.z, v.w};
        store_outputs<4>(c + (size_t)(row0 + r) * n, col0 + cq, n, out, vecC);
    };
    // Quad e of this block's band: row r, columns cq .. cq + 3 of the tile (skipped outside C).
    auto quad_of = [&](int e, int& r, int& cq) {
        r = ((int)rank * QUADS + e) / (TBN / 4);
        cq = (e % (TBN / 4)) * 4;
        return e < QUADS && row0 + r < m && col0 + cq < n;
    };
    // The staged tiers (splitk2r) take BATCH quads per thread at a time, all their loads issued
    // before the first is used, so that the round trips overlap (one quad's loads alone would wait
    // on each other's adds), and move partial tiles as float4 (each_output); the cp.async tiers
    // keep one quad at a time: with both, their registers fell (splitk2g 159 -> 125) and they ran
    // 2-7% slower on the H200 (measured side by side with benchmarks/sgemm_kernel_matrix.py, 2026-12-03).
    constexpr int PER = (QUADS + THREADS - 1) / THREADS;
    constexpr int BATCH = !T::staged ? 1 : PER < 16 / S ? PER : 16 / S;  // S <= 8
    for (int e0 = threadIdx.x; e0 < QUADS; e0 += BATCH * THREADS) {
        if constexpr (BATCH == 1) {
            int r, cq;
            if (!quad_of(e0, r, cq))
                continue;
            const float* p = smem + r * TBN + cq;
            float4 sum = cluster_load4(p, 0);
#pragma unroll
            for (int z = 1; z < S; ++z) {
                const float4 v = cluster_load4(p, z);
                sum.x += v.x; sum.y += v.y; sum.z += v.z; sum.w += v.w;
            }
            if (SPREAD && ways > 1)
                __stcg(slots + way * QUADS + e0, sum);
            else
                store_quad(r, cq, sum);
        } else {
            float4 v[BATCH][S];
#pragma unroll
            for (int u = 0; u < BATCH; ++u) {
                int r, cq;
                if (quad_of(e0 + u * THREADS, r, cq))
#pragma unroll
                    for (int z = 0; z < S; ++z)
                        v[u][z] = cluster_load4(smem + r * TBN + cq, z);
            }
#pragma unroll
            for (int u = 0; u < BATCH; ++u) {
                int r, cq;
                if (!quad_of(e0 + u * THREADS, r, cq))
                    continue;
                float4 sum = v[u][0];  // rank order 0, 1, .., S - 1
#pragma unroll
                for (int z = 1; z < S; ++z) {
                    sum.x += v[u][z].x; sum.y += v[u][z].y; sum.z += v[u][z].z; sum.w += v[u][z].w;
                }
                if (SPREAD && ways > 1)
                    __stcg(slots + way * QUADS + e0 + u * THREADS, sum);
                else
                    store_quad(r, cq, sum);
            }
        }
    }
    cluster_barrier();  // no block leaves while another may still read its shared memory
    if constexpr (SPREAD) {
        if (ways == 1) return;
        unsigned* last = reinterpret_cast<unsigned*>(smem);  // no block reads this one's shared memory any more
        __threadfence();  // this block's slot is visible GPU-wide before its arrival counts
        __syncthreads();
        if (threadIdx.x == 0) *last = atomicInc(&spread_arrivals[band], ways - 1) == (unsigned)(ways - 1);
        __syncthreads();
        if (!*last) return;
        __threadfence();
        // The W slots of BATCH quads per thread, each quad's summed in slot order 0 .. W - 1; the
        // loads of several slots and quads are in flight at once (they are independent).
        for (int e0 = threadIdx.x; e0 < QUADS; e0 += BATCH * THREADS) {
            float4 sum[BATCH];
#pragma unroll
            for (int u = 0; u < BATCH; ++u) {
                int r, cq;
                sum[u] = quad_of(e0 + u * THREADS, r, cq) ? __ldcg(slots + e0 + u * THREADS) : make_float4(0, 0, 0, 0);
            }
#pragma unroll 4
            for (int w = 1; w < ways; ++w) {
#pragma unroll
                for (int u = 0; u < BATCH; ++u) {
                    int r, cq;
                    if (quad_of(e0 + u * THREADS, r, cq)) {
                        const float4 v = __ldcg(slots + w * QUADS + e0 + u * THREADS);
                        sum[u].x += v.x; sum[u].y += v.y; sum[u].z += v.z; sum[u].w += v.w;
                    }
                }
            }
#pragma unroll
            for (int u = 0; u < BATCH; ++u) {
                int r, cq;
                if (quad_of(e0 + u * THREADS, r, cq))
                    store_quad(r, cq, sum[u]);
            }
        }
    }
}

// The smallest problems: TBM x TBN tiles, one output per thread, TBM x TBN threads, slices as deep
// as the tile is wide, each element loaded by one thread into shared memory: one global round
// trip per slice and nothing else (no ring, no vectors), where a launch costs more than the work.
template <int TBM, int TBN>
struct DirectTier {
    static constexpr int bm = TBM, bn = TBN;
    static constexpr int threads = TBM * TBN;
    static constexpr int smem_floats = 2 * TBM * TBN;
};

template <class T>
__device__ __forceinline__ void direct_gemm(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ c,
                                            int m, int n, int k, float* smem)
{
    static_assert(T::bm == T::bn, "square tiles: each thread loads one element of A and one of B per slice");
    constexpr int W = T::bn;
    float* as = smem;           // as[r * W + i]: A, row r of the tile, column t + i
    float* bs = smem + W * W;   // bs[i * W + cc]: B, row t + i, column cc of the tile
    const int tr = threadIdx.x / W, tc = threadIdx.x % W;
    const int row = blockIdx.y * W + tr, col = blockIdx.x * W + tc;
    float acc = 0.0f;
    for (int t = 0; t < k; t += W) {
        as[tr * W + tc] = (row < m && t + tc < k) ? a[(size_t)row * k + t + tc] : 0.0f;
        bs[tr * W + tc] = (t + tr < k && col < n) ? b[(size_t)(t + tr) * n + col] : 0.0f;
        __syncthreads();
#pragma unroll
        for (int i = 0; i < W; ++i)
            acc = fmaf(as[tr * W + i], bs[i * W + tc], acc);
        __syncthreads();
    }
    if (row < m && col < n)
        c[(size_t)row * n + col] = acc;
}

// Warps of 8 x 4 threads (H200, benchmarks/sgemm_kernel_matrix.py, one call): 4096^3 2922 us,
// 8192^3 23.27 ms, against 2957 and 23.55 for the tier as it was and 3142 and 25.03 for this main
// loop with row-major warps of 2 x 16 (the form of the split-K kernels, where they measured no
// worse); 128 x 128 tiles with 8 x 8 per thread (BN 128, TN 8) gain as much (3038 -> 2907).
// Row-major warps where the thread grid is too small for warps of 8 x 4 (a space with other tiles).
constexpr int LARGE_WROWS = (BM / TM) % 8 == 0 && (BN / TN) % 4 == 0 ? 8 : 0;
using Large = StagedTier<BM, BN, BK, TM, TN, LARGE_WROWS>;
using Medium = AsyncTier<64, 64, 16, 8, 4, 4>;
using Small = AsyncTier<32, 32, 32, 4, 4, 3>;
// As many stages as fit in 48 KiB of static shared memory (3, or 2 for ST = 32 with SK = 64).
constexpr int TINY_STAGES = AsyncTier<ST, ST, SK, ST / 8, ST / 8, 3>::smem_floats * 4 <= 48 * 1024 ? 3 : 2;
using Tiny = AsyncTier<ST, ST, SK, ST / 8, ST / 8, TINY_STAGES>;
using Direct = DirectTier<16, 16>;
using Split = Medium;  // the tile of the split-K kernels but splitk8s (Small's)
static_assert(Large::threads <= 256 && Medium::threads == 128 && Small::threads == 64 && Tiny::threads == 64,
              "the launch bounds below");
static_assert(Large::smem_floats * 4 <= 48 * 1024 && Medium::smem_floats * 4 <= 48 * 1024,
              "static shared memory is at most 48 KiB: fewer or shallower slices");

// One kernel per tier, each with the registers its own code needs (a tier sharing a kernel with
// the large one would get its 250 registers, and run slower for it: 256^3 7.8 -> 10.7 us, 512^3
// 15.3 -> 23.9 us on the H200). The launch expressions in experiment.json pick the kernel, the
// grid and the block for each shape.
extern "C" __global__ void __launch_bounds__(256, MINB)
matmul_f32(const float* a, const float* b, float* c, int m, int n, int k)
{
    __shared__ __align__(16) float smem[Large::smem_floats];
    staged_gemm<Large>(a, b, c, m, n, k, smem);
}

extern "C" __global__ void __launch_bounds__(128)
matmul_f32_medium(const float* a, const float* b, float* c, int m, int n, int k)
{
    __shared__ __align__(16) float smem[Medium::smem_floats];
    async_gemm<Medium>(a, b, c, m, n, k, smem);
}

extern "C" __global__ void __launch_bounds__(64)
matmul_f32_small(const float* a, const float* b, float* c, int m, int n, int k)
{
    __shared__ __align__(16) float smem[Small::smem_floats];
    async_gemm<Small>(a, b, c, m, n, k, smem);
}

extern "C" __global__ void __launch_bounds__(64)
matmul_f32_tiny(const float* a, const float* b, float* c, int m, int n, int k)
{
    __shared__ __align__(16) float smem[Tiny::smem_floats];
    async_gemm<Tiny>(a, b, c, m, n, k, smem);
}

extern "C" __global__ void __launch_bounds__(256)
matmul_f32_direct(const float* a, const float* b, float* c, int m, int n, int k)
{
    __shared__ float smem[Direct::smem_floats];
    direct_gemm<Direct>(a, b, c, m, n, k, smem);
}

// Split-K (see splitk_gemm): S = 2, 4 or 8 blocks per 64 x 64 tile (splitk2/4/8), or 8 per 32 x 32
// tile (splitk8s), one cluster each, one group of threads per block; and two forms whose blocks
// also split their k among groups: splitk8sg (8 blocks per 32 x 32 tile, 2 groups each, for the
// deepest k on the fewest tiles) and splitk2g (2 blocks per 64 x 64 tile, 4 groups of 64 threads
// with 8 x 8 outputs each, when the tiles number from 0.4 to 0.5 per SM). The launch picks the
// kernel (and grid z = S) from how many tiles the problem has and how deep k is. Each kernel adds
// to every compile of the module (~0.3 s). The cluster
// size is an attribute of a declaration (after the parameters), so each definition stays declared
// plainly as the rule for entries asks.

extern "C" __global__ void __launch_bounds__(128)
matmul_f32_splitk2(const float* a, const float* b, float* c, int m, int n, int k) __cluster_dims__(1, 1, 2);

extern "C" __global__ void __launch_bounds__(128)
matmul_f32_splitk2(const float* a, const float* b, float* c, int m, int n, int k)
{
    __shared__ __align__(16) float smem[splitk_floats<Split, 1>()];
    splitk_gemm<Split, 2>(a, b, c, m, n, k, smem);
}

extern "C" __global__ void __launch_bounds__(128)
matmul_f32_splitk4(const float* a, const float* b, float* c, int m, int n, int k) __cluster_dims__(1, 1, 4);

extern "C" __global__ void __launch_bounds__(128)
matmul_f32_splitk4(const float* a, const float* b, float* c, int m, int n, int k)
{
    __shared__ __align__(16) float smem[splitk_floats<Split, 1>()];
    splitk_gemm<Split, 4>(a, b, c, m, n, k, smem);
}

extern "C" __global__ void __launch_bounds__(128)
matmul_f32_splitk8(const float* a, const float* b, float* c, int m, int n, int k) __cluster_dims__(1, 1, 8);

extern "C" __global__ void __launch_bounds__(128)
matmul_f32_splitk8(const float* a, const float* b, float* c, int m, int n, int k)
{
    __shared__ __align__(16) float smem[splitk_floats<Split, 1>()];
    splitk_gemm<Split, 8>(a, b, c, m, n, k, smem);
}

extern "C" __global__ void __launch_bounds__(64)
matmul_f32_splitk8s(const float* a, const float* b, float* c, int m, int n, int k) __cluster_dims__(1, 1, 8);

extern "C" __global__ void __launch_bounds__(64)
matmul_f32_splitk8s(const float* a, const float* b, float* c, int m, int n, int k)
{
    __shared__ __align__(16) float smem[splitk_floats<Small, 1>()];
    splitk_gemm<Small, 8>(a, b, c, m, n, k, smem);
}

// Two groups per block: 2 x 3 stages of Small's ring, 52224 bytes of dynamic shared memory (the
// launch asks for them: more than the 48 KiB a block may declare statically).
extern "C" __global__ void __launch_bounds__(128)
matmul_f32_splitk8sg(const float* a, const float* b, float* c, int m, int n, int k) __cluster_dims__(1, 1, 8);

extern "C" __global__ void __launch_bounds__(128)
matmul_f32_splitk8sg(const float* a, const float* b, float* c, int m, int n, int k)
{
    extern __shared__ __align__(16) float smem[];
    splitk_gemm<Small, 8, 2>(a, b, c, m, n, k, smem);
}

using SplitWide = AsyncTier<64, 64, 8, 8, 8, 3>;  // 8 x 8 outputs per thread: 64 threads per group
// The large tier's loop, 8 x 16 per thread: 128 threads per group. Loads by rows where k or n is
// not a multiple of 4 (H200, 8191 x 127 x 4093: 258 -> 246-248 us); the large tier keeps quads,
// as by rows it was no faster there (4097 x 4095 x 4099) and its float4 path lost 0.4-1.6%.
using SplitStaged = StagedTier<128, 128, 8, 8, 16, 0, true>;
static_assert(splitk_floats<Small, 2>() * 4 == 52224 && splitk_floats<SplitWide, 4>() * 4 <= 48 * 1024,
              "splitk8sg's launch asks for 52224 bytes; splitk2g's four rings fit statically");

extern "C" __global__ void __launch_bounds__(256)
matmul_f32_splitk2g(const float* a, const float* b, float* c, int m, int n, int k) __cluster_dims__(1, 1, 2);

extern "C" __global__ void __launch_bounds__(256)
matmul_f32_splitk2g(const float* a, const float* b, float* c, int m, int n, int k)
{
    __shared__ __align__(16) float smem[splitk_floats<SplitWide, 4>()];
    splitk_gemm<SplitWide, 2, 4>(a, b, c, m, n, k, smem);
}

// Two blocks per 128 x 128 tile, two groups of 128 threads in each, 8 x 16 outputs per thread in
// the large tier's main loop: one block of 8 warps per SM, as the large tier runs, where 128 x 128
// tiles number 0.4-0.5 per SM (8192 x 128 x 4096 and 128 x 8192 x 4096: 0.77 -> 0.81-0.83x
// cuBLAS beside splitk2). 65536 bytes of dynamic shared memory: the partial tile of group 1.
extern "C" __global__ void __launch_bounds__(256)
matmul_f32_splitk2r(const float* a, const float* b, float* c, int m, int n, int k) __cluster_dims__(1, 1, 2);

extern "C" __global__ void __launch_bounds__(256)
matmul_f32_splitk2r(const float* a, const float* b, float* c, int m, int n, int k)
{
    extern __shared__ __align__(16) float smem[];
    splitk_gemm<SplitStaged, 2, 2, true>(a, b, c, m, n, k, smem);
}
static_assert(splitk_floats<SplitStaged, 2>() * 4 == 65536, "splitk2r's launch asks for 65536 bytes");
