// Row softmax, y[r][c] = exp(x[r][c] - max_r) / sum_c' exp(x[r][c'] - max_r), float32, row-major,
// in five kernels of one signature; experiment.json's launch picks one per shape:
//
//   softmax_rows_warp     cols <= 512: a group of 8, 16 or 32 lanes per row, the rows held in
//                         registers, 4 float4 of them in flight per lane (one read, one write)
//   softmax_rows_warp4    cols <= 128 and cols % 4 == 0: softmax_rows_warp's float4 paths alone,
//                         in 40 registers instead of 64, so half as many warps again hold rows
//   softmax_rows_block    cols <= 4 * NB * 1024: one block per row, NB float4 per thread held in
//                         registers, or half as many scalars when cols % 4 != 0 (one read, one
//                         write); NB 8: a 1024-column row is one warp of 63 registers, 32 rows per SM
//   softmax_rows_cluster  cols <= CL * 57344: a cluster of CL blocks per row (Hopper thread block
//                         clusters, co-scheduled by the hardware), each block copying its part of
//                         the row into shared memory (cp.async, all of it in flight at once, its
//                         (max, sum) taken in four phases as they land); the blocks exchange their
//                         (max, sum) through distributed shared memory (one read, one write)
//   softmax_rows          any cols: one block per row, one pass for the maximum and the sum
//                         together (online softmax), one pass for the outputs (two reads, one write;
//                         the second from L2 when the rows in flight fit there)
//
// Every kernel is correct for any rows, cols, grid (whole clusters for the cluster kernel) and
// block size (a multiple of 32 within its launch bounds): rows are visited in grid-stride loops
// (by the warp kernels, in even shares of the grid),
// and a kernel given a row that does not fit where it keeps rows (registers, shared memory) falls
// back to a two-pass online path. The launch only decides how fast. float4 loads and stores when
// cols % 4 == 0 and both pointers are 16-byte aligned, scalar ones otherwise.
//
// Arithmetic: exponentials in base 2 of x*log2(e) - max*log2(e) formed by one FMA, so the only
// rounding that grows with |x| is common to a whole row and cancels in the division. A running
// (max, sum) pair merges as m = max(m1, m2), s = s1 * 2^(m1 - m) + s2 * 2^(m2 - m); an empty
// pair (-inf, 0) merges as the identity. A row of -inf gives NaN, as PyTorch's softmax does.
#include <math_constants.h>

#ifndef WB
#define WB 256  // threads per block of softmax_rows_warp
#endif
#ifndef NB
#define NB 8  // float4 per thread in softmax_rows_block
#endif
#ifndef CL
#define CL 8  // blocks per cluster (one row each) in softmax_rows_cluster
#endif
#ifndef CT
#define CT 1024  // most threads per block of softmax_rows_cluster
#endif
#ifndef UNROLL
#define UNROLL 4  // float4 loads in flight per thread in the streaming loops
#endif
#define OT 1024  // most threads per block of softmax_rows

#define FULL 0xffffffffu
#define LOG2E 1.4426950408889634f
#define NEG_INF (-CUDART_INF_F)

static_assert(WB % 32 == 0 && WB <= 1024 && CT % 32 == 0 && CT <= 1024, "block sizes: warps, at most 1024");
static_assert(CL >= 1 && CL <= 8, "CL: a portable cluster size");

// A running maximum (times log2 e) and the sum of 2^(x * log2 e - mL) over what was seen.
struct __align__(8) Stat {
    float mL;
    float s;
};

__device__ __forceinline__ Stat merge(Stat a, Stat b)
{
    float m = fmaxf(a.mL, b.mL);
    if (m == NEG_INF)
        return {NEG_INF, 0.0f};  // both empty (or rows of -inf so far)
    return {m, a.s * exp2f(a.mL - m) + b.s * exp2f(b.mL - m)};
}

// Add up to four values (unused ones are -inf) to a running pair.
__device__ __forceinline__ void add4(Stat& st, float4 v)
{
    float m = fmaxf(st.mL, fmaxf(fmaxf(v.x, v.y), fmaxf(v.z, v.w)) * LOG2E);
    if (m == NEG_INF)
        return;
    st.s = st.s * exp2f(st.mL - m) + exp2f(fmaf(v.x, LOG2E, -m)) + exp2f(fmaf(v.y, LOG2E, -m))
         + exp2f(fmaf(v.z, LOG2E, -m)) + exp2f(fmaf(v.w, LOG2E, -m));
    st.mL = m;
}

__device__ __forceinline__ float4 softmax4(float4 v, float mL, float inv)
{
    return make_float4(exp2f(fmaf(v.x, LOG2E, -mL)) * inv, exp2f(fmaf(v.y, LOG2E, -mL)) * inv,
                       exp2f(fmaf(v.z, LOG2E, -mL)) * inv, exp2f(fmaf(v.w, LOG2E, -mL)) * inv);
}

__device__ __forceinline__ float4 neg_inf4() { return make_float4(NEG_INF, NEG_INF, NEG_INF, NEG_INF); }

__device__ __forceinline__ bool vector_ok(const float* x, const float* y, int cols)
{
    return cols % 4 == 0 && ((reinterpret_cast<unsigned long long>(x) | reinterpret_cast<unsigned long long>(y)) & 15) == 0;
}

// ---- reductions ---------------------------------------------------------------------------------

template <int G>  // over aligned groups of G lanes (xor never leaves the group)
__device__ __forceinline__ float group_max(float v)
{
#pragma unroll
    for (int off = G / 2; off > 0; off /= 2)
        v = fmaxf(v, __shfl_xor_sync(FULL, v, off));
    return v;
}

template <int G>
__device__ __forceinline__ float group_sum(float v)
{
#pragma unroll
    for (int off = G / 2; off > 0; off /= 2)
        v += __shfl_xor_sync(FULL, v, off);
    return v;
}

__device__ __forceinline__ Stat warp_stat(Stat st)
{
#pragma unroll
    for (int off = 16; off > 0; off /= 2) {
        Stat other = {__shfl_xor_sync(FULL, st.mL, off), __shfl_xor_sync(FULL, st.s, off)};
        st = merge(st, other);
    }
    return st;
}

// Every thread of the block gets the block's pair. scratch: 32 pairs; safe to call back to back.
__device__ __forceinline__ Stat block_stat(Stat st, Stat* scratch)
{
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    st = warp_stat(st);
    __syncthreads();  // the previous call's readers are done with scratch
    if (lane == 0)
        scratch[warp] = st;
    __syncthreads();
    st = lane < warps ? scratch[lane] : Stat{NEG_INF, 0.0f};
    return warp_stat(st);
}

__device__ __forceinline__ float block_max(float v, float* scratch)
{
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    v = group_max<32>(v);
    __syncthreads();
    if (lane == 0)
        scratch[warp] = v;
    __syncthreads();
    return group_max<32>(lane < warps ? scratch[lane] : NEG_INF);
}

__device__ __forceinline__ float block_sum(float v, float* scratch)
{
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    v = group_sum<32>(v);
    __syncthreads();
    if (lane == 0)
        scratch[warp] = v;
    __syncthreads();
    return group_sum<32>(lane < warps ? scratch[lane] : 0.0f);
}

// ---- streaming passes over n elements of a row by `lanes` threads (this one is t) ---------------

template <bool VEC>
__device__ __forceinline__ Stat scan(const float* xr, int n, int t, int lanes)
{
    Stat st = {NEG_INF, 0.0f};
    if (VEC) {
        const float4* x4 = reinterpret_cast<const float4*>(xr);
        const int n4 = n / 4;
        for (int i = t; i < n4; i += UNROLL * lanes) {
            float4 r[UNROLL];
#pragma unroll
            for (int u = 0; u < UNROLL; ++u)
                r[u] = i + u * lanes < n4 ? __ldg(x4 + i + u * lanes) : neg_inf4();
#pragma unroll
            for (int u = 0; u < UNROLL; ++u)
                add4(st, r[u]);
        }
    } else {
        for (int i = t; i < n; i += 4 * UNROLL * lanes) {
            float r[4 * UNROLL];
#pragma unroll
            for (int u = 0; u < 4 * UNROLL; ++u)
                r[u] = i + u * lanes < n ? __ldg(xr + i + u * lanes) : NEG_INF;
#pragma unroll
            for (int u = 0; u < UNROLL; ++u)
                add4(st, make_float4(r[4 * u], r[4 * u + 1], r[4 * u + 2], r[4 * u + 3]));
        }
    }
    return st;
}

template <bool VEC>
__device__ __forceinline__ void write(const float* xr, float* yr, int n, int t, int lanes, float mL, float inv)
{
    if (VEC) {
        const float4* x4 = reinterpret_cast<const float4*>(xr);
        float4* y4 = reinterpret_cast<float4*>(yr);
        const int n4 = n / 4;
        for (int i = t; i < n4; i += UNROLL * lanes) {
            float4 r[UNROLL];
#pragma unroll
            for (int u = 0; u < UNROLL; ++u)
                if (i + u * lanes < n4)
                    r[u] = __ldg(x4 + i + u * lanes);
#pragma unroll
            for (int u = 0; u < UNROLL; ++u)
                if (i + u * lanes < n4)
                    y4[i + u * lanes] = softmax4(r[u], mL, inv);
        }
    } else {
        for (int i = t; i < n; i += lanes)
            yr[i] = exp2f(fmaf(__ldg(xr + i), LOG2E, -mL)) * inv;
    }
}

// One row by `lanes` threads that reduce with `reduce`: the two-pass online path.
template <bool VEC, class Reduce>
__device__ __forceinline__ void online_row(const float* xr, float* yr, int cols, int t, int lanes, Reduce reduce)
{
    Stat st = reduce(scan<VEC>(xr, cols, t, lanes));
    write<VEC>(xr, yr, cols, t, lanes, st.mL, 1.0f / st.s);
}

// ---- softmax_rows: one block per row, online (max, sum), then the outputs -----------------------

extern "C" __global__ void __launch_bounds__(OT) softmax_rows(const float* x, float* y, int rows, int cols)
{
    __shared__ Stat scratch[32];
    const bool vec = vector_ok(x, y, cols);
    auto reduce = [&](Stat st) { return block_stat(st, scratch); };
    for (long long row = blockIdx.x; row < rows; row += gridDim.x) {
        const float* xr = x + row * cols;
        float* yr = y + row * cols;
        if (vec)
            online_row<true>(xr, yr, cols, threadIdx.x, blockDim.x, reduce);
        else
            online_row<false>(xr, yr, cols, threadIdx.x, blockDim.x, reduce);
    }
}

// ---- softmax_rows_warp: G lanes per row, rows in registers --------------------------------------

// Rows first + step * k (k < count) by a group of G lanes (this one is `lane`), R rows at a time,
// NV float4 (or 4 * NV scalars) per lane and row. Every lane of the warp runs the same trip count.
// A round's rows are addressed from one 64-bit base by int offsets (step * R * cols < 2^31 for the
// rows a warp holds), so no row keeps a pointer of its own in registers.
template <int G, int NV, int R, bool VEC>
__device__ __forceinline__ void group_rows(const float* x, float* y, int rows, int cols, long long first, int step,
                                           int count, int lane)
{
    for (int k0 = 0; k0 < count; k0 += R) {
        const long long base = first + (long long)step * k0;  // this round's first row
        const long long left = (rows - base + step - 1) / step;  // rows of this group from base on
        const int live = (int)min((long long)min(R, count - k0), left);  // rows this round holds (may be <= 0)
        const float* xb = x + base * cols;
        float* yb = y + base * cols;
        float4 v[R][NV];
        float mL[R], inv[R];
#pragma unroll
        for (int r = 0; r < R; ++r) {
            const int off = r * step * cols;
#pragma unroll
            for (int i = 0; i < NV; ++i) {
                if (VEC) {
                    const int c = 4 * (lane + G * i);
                    v[r][i] = r < live && c < cols ? __ldg(reinterpret_cast<const float4*>(xb + off + c)) : neg_inf4();
                } else {
                    float e[4];
#pragma unroll
                    for (int j = 0; j < 4; ++j) {
                        const int c = lane + G * (4 * i + j);
                        e[j] = r < live && c < cols ? __ldg(xb + off + c) : NEG_INF;
                    }
                    v[r][i] = make_float4(e[0], e[1], e[2], e[3]);
                }
            }
        }
#pragma unroll
        for (int r = 0; r < R; ++r) {
            float m = NEG_INF;
#pragma unroll
            for (int i = 0; i < NV; ++i)
                m = fmaxf(m, fmaxf(fmaxf(v[r][i].x, v[r][i].y), fmaxf(v[r][i].z, v[r][i].w)));
            mL[r] = group_max<G>(m) * LOG2E;
        }
#pragma unroll
        for (int r = 0; r < R; ++r) {
            float s = 0.0f;
#pragma unroll
            for (int i = 0; i < NV; ++i) {
                v[r][i] = softmax4(v[r][i], mL[r], 1.0f);  // padding (-inf) gives 0
                s += (v[r][i].x + v[r][i].y) + (v[r][i].z + v[r][i].w);
            }
            inv[r] = 1.0f / group_sum<G>(s);
        }
#pragma unroll
        for (int r = 0; r < R; ++r) {
            if (r >= live)
                continue;
            const int off = r * step * cols;
#pragma unroll
            for (int i = 0; i < NV; ++i) {
                const float4 o = make_float4(v[r][i].x * inv[r], v[r][i].y * inv[r], v[r][i].z * inv[r], v[r][i].w * inv[r]);
                if (VEC) {
                    const int c = 4 * (lane + G * i);
                    if (c < cols)
                        *reinterpret_cast<float4*>(yb + off + c) = o;
                } else {
                    const float e[4] = {o.x, o.y, o.z, o.w};
#pragma unroll
                    for (int j = 0; j < 4; ++j) {
                        const int c = lane + G * (4 * i + j);
                        if (c < cols)
                            yb[off + c] = e[j];
                    }
                }
            }
        }
    }
}

// Rows longer than registers hold, or softmax_rows_warp4's rows without float4s (never launched so
// by experiment.json): kept plain, one element at a time, so that its registers do not crowd the
// register-held paths.
__device__ __forceinline__ void warp_online_row(const float* xr, float* yr, int cols, int lane)
{
    Stat st = {NEG_INF, 0.0f};
    for (int c = lane; c < cols; c += 32)
        add4(st, make_float4(__ldg(xr + c), NEG_INF, NEG_INF, NEG_INF));
    st = warp_stat(st);
    const float inv = 1.0f / st.s;
    for (int c = lane; c < cols; c += 32)
        yr[c] = exp2f(fmaf(__ldg(xr + c), LOG2E, -st.mL)) * inv;
}

// The warp's `per` rows from `first`, streamed one at a time.
__device__ __forceinline__ void warp_streams(const float* x, float* y, int rows, int cols, long long first, long long per)
{
    for (long long k = 0; k < per && first + k < rows; ++k)
        warp_online_row(x + (first + k) * cols, y + (first + k) * cols, cols, threadIdx.x % 32);
}

// Rows side by side in a warp: 4 rows of at most 32 columns (8 lanes each), 2 of at most 64.
__device__ __forceinline__ int side_by_side(int cols) { return cols <= 32 ? 4 : cols <= 64 ? 2 : 1; }

// The warp's `per` rows from `first` (per: a multiple of side_by_side(cols)). WIDE: the paths for
// 129 to 512 columns compiled in too (without them, such rows are streamed).
template <bool VEC, bool WIDE>
__device__ __forceinline__ void warp_rows(const float* x, float* y, int rows, int cols, long long first, long long per)
{
    // 4 float4 of rows in flight per lane: 4 rows of a group at a time up to 128 columns, then 2, 1.
    const int lane = threadIdx.x % 32;
    if (cols <= 32)  // 8 lanes a row, 4 rows side by side in the warp
        group_rows<8, 1, 4, VEC>(x, y, rows, cols, first + lane / 8, 4, (int)(per / 4), lane % 8);
    else if (cols <= 64)  // 16 lanes a row, 2 side by side
        group_rows<16, 1, 4, VEC>(x, y, rows, cols, first + lane / 16, 2, (int)(per / 2), lane % 16);
    else if (cols <= 128)
        group_rows<32, 1, 4, VEC>(x, y, rows, cols, first, 1, (int)per, lane);
    else if (WIDE && cols <= 256)
        group_rows<32, 2, 2, VEC>(x, y, rows, cols, first, 1, (int)per, lane);
    else if (WIDE && cols <= 512)
        group_rows<32, 4, 1, VEC>(x, y, rows, cols, first, 1, (int)per, lane);
    else  // longer rows than registers hold
        warp_streams(x, y, rows, cols, first, per);
}

// Each warp takes an even share of the rows over the whole grid, rounded up to the rows it takes
// side by side: sets `first` and `per`, false for a warp whose share starts past the last row.
// experiment.json's grid gives each warp the rows of one round of registers (16 of at most 32
// columns, 8, 4, 2, 1 up to 512): on the H200 one round beat two or more at every short-row shape
// measured. Any other grid covers every row once too. One share per warp and no grid-stride loop:
// fewer registers than the loop takes.
__device__ __forceinline__ bool warp_share(int rows, int cols, long long& first, long long& per)
{
    const long long warps = (long long)gridDim.x * (blockDim.x / 32);
    const int side = side_by_side(cols);
    // a 32-bit division (warps < rows there): the 64-bit one's registers made softmax_rows_warp4 spill
    const unsigned share = warps >= rows ? 1u : ((unsigned)rows + (unsigned)warps - 1) / (unsigned)warps;
    per = (share + side - 1) / side * side;
    first = ((long long)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32) * per;
    return first < rows;
}

extern "C" __global__ void __launch_bounds__(WB, 768 / WB) softmax_rows_warp(const float* x, float* y, int rows, int cols)
{
    long long first, per;
    if (!warp_share(rows, cols, first, per))
        return;  // the whole warp: the shares before it cover the rows
    if (vector_ok(x, y, cols))
        warp_rows<true, true>(x, y, rows, cols, first, per);
    else
        warp_rows<false, true>(x, y, rows, cols, first, per);
}

// softmax_rows_warp's float4 paths up to 128 columns alone, for rows of such lengths with cols % 4
// == 0: 40 registers (ptxas, sm_90) where softmax_rows_warp needs 64 for all its paths, so 48 warps
// per SM hold rows instead of 32 (on the H200, rows128 14.3 -> 13.5 us, rows32 9.6 -> 9.0). Other
// rows (or unaligned pointers) are streamed: correct, slow, and not launched so by experiment.json.
extern "C" __global__ void __launch_bounds__(WB, 1536 / WB) softmax_rows_warp4(const float* x, float* y, int rows, int cols)
{
    long long first, per;
    if (!warp_share(rows, cols, first, per))
        return;
    if (vector_ok(x, y, cols))
        warp_rows<true, false>(x, y, rows, cols, first, per);
    else
        warp_streams(x, y, rows, cols, first, per);
}

// ---- softmax_rows_block: one block per row, NB float4 per thread in registers -------------------

template <bool VEC>
__device__ __forceinline__ void block_row(const float* xr, float* yr, int cols, float* scratch)
{
    const int t = threadIdx.x, T = blockDim.x;
    constexpr int N = VEC ? NB : NB / 2;  // NB float4, or half as many scalars (their addresses and
                                          // predicates would not fit NB 8's registers beside them)
    float4 v[N];
    float m = NEG_INF;
#pragma unroll
    for (int i = 0; i < N; ++i) {
        if (VEC) {
            const int c = 4 * (t + T * i);
            v[i] = c < cols ? __ldg(reinterpret_cast<const float4*>(xr + c)) : neg_inf4();
        } else {
            float e[4];
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const int c = t + T * (4 * i + j);
                e[j] = c < cols ? __ldg(xr + c) : NEG_INF;
            }
            v[i] = make_float4(e[0], e[1], e[2], e[3]);
        }
        m = fmaxf(m, fmaxf(fmaxf(v[i].x, v[i].y), fmaxf(v[i].z, v[i].w)));
    }
    const float mL = block_max(m, scratch) * LOG2E;
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < N; ++i) {
        v[i] = softmax4(v[i], mL, 1.0f);
        s += (v[i].x + v[i].y) + (v[i].z + v[i].w);
    }
    const float inv = 1.0f / block_sum(s, scratch);
#pragma unroll
    for (int i = 0; i < N; ++i) {
        const float4 o = make_float4(v[i].x * inv, v[i].y * inv, v[i].z * inv, v[i].w * inv);
        if (VEC) {
            const int c = 4 * (t + T * i);
            if (c < cols)
                *reinterpret_cast<float4*>(yr + c) = o;
        } else {
            const float e[4] = {o.x, o.y, o.z, o.w};
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const int c = t + T * (4 * i + j);
                if (c < cols)
                    yr[c] = e[j];
            }
        }
    }
}

extern "C" __global__ void __launch_bounds__(1024) softmax_rows_block(const float* x, float* y, int rows, int cols)
{
    __shared__ float scratch[32];
    __shared__ Stat pairs[32];
    const bool vec = vector_ok(x, y, cols);
    const bool fits = cols <= (vec ? 4 : 2) * NB * (int)blockDim.x;
    if (fits && vec) {  // the path experiment.json launches on aligned rows, in a loop of its own, so
                        // that the other paths' registers do not count against it
        for (long long row = blockIdx.x; row < rows; row += gridDim.x)
            block_row<true>(x + row * cols, y + row * cols, cols, scratch);
        return;
    }
    auto reduce = [&](Stat st) { return block_stat(st, pairs); };
    for (long long row = blockIdx.x; row < rows; row += gridDim.x) {
        const float* xr = x + row * cols;
        float* yr = y + row * cols;
        if (fits)
            block_row<false>(xr, yr, cols, scratch);
        else if (vec)
            online_row<true>(xr, yr, cols, threadIdx.x, blockDim.x, reduce);
        else
            online_row<false>(xr, yr, cols, threadIdx.x, blockDim.x, reduce);
    }
}

// ---- softmax_rows_cluster: CL blocks per row, each part of the row in shared memory -------------

__device__ __forceinline__ unsigned special(int which)
{
    unsigned v;
    if (which == 0)
        asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(v));
    else if (which == 1)
        asm volatile("mov.u32 %0, %%clusterid.x;" : "=r"(v));
    else if (which == 2)
        asm volatile("mov.u32 %0, %%nclusterid.x;" : "=r"(v));
    else
        asm volatile("mov.u32 %0, %%dynamic_smem_size;" : "=r"(v));
    return v;
}

__device__ __forceinline__ void cluster_arrive() { asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory"); }
__device__ __forceinline__ void cluster_wait() { asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory"); }

// The pair another block of the cluster (rank) keeps at the address of `p` in its shared memory.
__device__ __forceinline__ Stat remote_stat(const Stat* p, unsigned rank)
{
    unsigned local = static_cast<unsigned>(__cvta_generic_to_shared(p)), remote;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(local), "r"(rank));
    Stat st;
    asm volatile("ld.shared::cluster.v2.f32 {%0, %1}, [%2];" : "=f"(st.mL), "=f"(st.s) : "r"(remote) : "memory");
    return st;
}

__device__ __forceinline__ void copy16(float4* to, const float4* from)
{
    const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(to));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(from) : "memory");
}

__device__ __forceinline__ void copy4(float* to, const float* from)
{
    const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(to));
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(dst), "l"(from) : "memory");
}

#define PHASES 4  // commit groups a block's part is copied in (softmax_rows_cluster)

__device__ __forceinline__ void commit_phase() { asm volatile("cp.async.commit_group;" ::: "memory"); }

template <int PENDING>  // wait until at most PENDING of this thread's latest phases are in flight
__device__ __forceinline__ void wait_phases() { asm volatile("cp.async.wait_group %0;" ::"n"(PENDING) : "memory"); }

// This thread's pair over its items (float4 or floats) t + T * k, k in [k0, k1), from shared memory.
template <bool VEC>
__device__ __forceinline__ Stat kept_stat(const float4* keep, int items, int k0, int k1)
{
    const int t = threadIdx.x, T = blockDim.x;
    const float* one = reinterpret_cast<const float*>(keep);
    float m = NEG_INF;
    for (int k = k0, i = t + k0 * T; k < k1 && i < items; ++k, i += T)
        m = fmaxf(m, VEC ? fmaxf(fmaxf(keep[i].x, keep[i].y), fmaxf(keep[i].z, keep[i].w)) : one[i]);
    if (m == NEG_INF)
        return {NEG_INF, 0.0f};  // nothing (or only -inf): the empty pair
    const float mL = m * LOG2E;
    float s = 0.0f;
    for (int k = k0, i = t + k0 * T; k < k1 && i < items; ++k, i += T) {
        if (VEC) {
            const float4 e = softmax4(keep[i], mL, 1.0f);
            s += (e.x + e.y) + (e.z + e.w);
        } else {
            s += exp2f(fmaf(one[i], LOG2E, -mL));
        }
    }
    return {mL, s};
}

// Pass 1 over this block's part [0, n) of a row, and its pair. Kept in shared memory (`keep`):
// every load of the part is put in flight at once (cp.async, global to shared memory without
// registers) in PHASES commit groups, and each phase's pair is computed from there as soon as it
// has landed, while the later phases are still in flight; each thread reads back only what it
// copied, so its own wait suffices. Without `keep`, streamed through registers.
template <bool VEC>
__device__ __forceinline__ Stat load_part(const float* xp, int n, float4* keep)
{
    const int t = threadIdx.x, T = blockDim.x;
    if (keep == nullptr)
        return scan<VEC>(xp, n, t, T);
    const int items = VEC ? n / 4 : n;
    const int per = (items + T - 1) / T;  // items of a thread, at most
    const int span = (per + PHASES - 1) / PHASES;  // of them per phase
#pragma unroll
    for (int p = 0; p < PHASES; ++p) {
        for (int k = p * span, i = t + k * T; k < min(per, (p + 1) * span) && i < items; ++k, i += T) {
            if (VEC)
                copy16(keep + i, reinterpret_cast<const float4*>(xp) + i);
            else
                copy4(reinterpret_cast<float*>(keep) + i, xp + i);
        }
        commit_phase();
    }
    static_assert(PHASES == 4, "one wait per phase below");
    wait_phases<3>();
    Stat st = kept_stat<VEC>(keep, items, 0, span);
    wait_phases<2>();
    st = merge(st, kept_stat<VEC>(keep, items, span, 2 * span));
    wait_phases<1>();
    st = merge(st, kept_stat<VEC>(keep, items, 2 * span, 3 * span));
    wait_phases<0>();
    return merge(st, kept_stat<VEC>(keep, items, 3 * span, per));
}

// Pass 2: the outputs of this block's part, from shared memory (or read again).
template <bool VEC>
__device__ __forceinline__ void write_part(const float* xp, float* yp, int n, const float4* keep, float mL, float inv)
{
    const int t = threadIdx.x, T = blockDim.x;
    if (keep == nullptr) {
        write<VEC>(xp, yp, n, t, T, mL, inv);
    } else if (VEC) {
        float4* y4 = reinterpret_cast<float4*>(yp);
        for (int i = t; i < n / 4; i += T)
            y4[i] = softmax4(keep[i], mL, inv);
    } else {
        const float* k1 = reinterpret_cast<const float*>(keep);
        for (int i = t; i < n; i += T)
            yp[i] = exp2f(fmaf(k1[i], LOG2E, -mL)) * inv;
    }
}

extern "C" __global__ void __launch_bounds__(CT) softmax_rows_cluster(const float* x, float* y, int rows, int cols)
    __cluster_dims__(CL, 1, 1);

extern "C" __global__ void __launch_bounds__(CT) softmax_rows_cluster(const float* x, float* y, int rows, int cols)
{
    extern __shared__ float4 part_smem[];
    __shared__ Stat scratch[32];
    __shared__ Stat mine;  // this block's pair, read by every block of the cluster
    const unsigned rank = special(0), cluster = special(1), clusters = special(2);
    const bool vec = vector_ok(x, y, cols);
    const int part = 4 * ((cols + 4 * CL - 1) / (4 * CL));  // elements per block, a multiple of 4
    const long long begin = (long long)rank * part;
    const int n = begin < cols ? min(part, (int)(cols - begin)) : 0;
    float4* keep = (unsigned long long)part * 4 <= special(3) ? part_smem : nullptr;
    for (long long row = cluster; row < rows; row += clusters) {  // the same trip count in every block
        const float* xp = x + row * cols + begin;
        float* yp = y + row * cols + begin;
        Stat st = block_stat(vec ? load_part<true>(xp, n, keep) : load_part<false>(xp, n, keep), scratch);
        if (threadIdx.x == 0)
            mine = st;
        cluster_arrive();  // every block's pair is written...
        cluster_wait();
        Stat all = {NEG_INF, 0.0f};
        for (unsigned r = 0; r < CL; ++r)  // ...and merged in one order everywhere: the same result
            all = merge(all, remote_stat(&mine, r));
        cluster_arrive();  // done reading the others' pairs; waited for before `mine` changes or the block exits
        if (vec)
            write_part<true>(xp, yp, n, keep, all.mL, 1.0f / all.s);
        else
            write_part<false>(xp, yp, n, keep, all.mL, 1.0f / all.s);
        cluster_wait();
    }
}
