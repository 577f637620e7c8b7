// Register-tiled SGEMM: 128x128 block tile, BK=8, 256 threads (16x16), each thread owns an 8x8
// micro-tile (rows ty*4+{0..3} and 64+ty*4+{0..3}, same split for columns) in registers.
// A is stored transposed in shared memory (padded rows) so the inner loop reads float4 from
// both tiles; shared memory is double-buffered with the next tile prefetched into registers.
// APAD pads the transposed-A rows: conflict-free transposing stores, still float4-aligned reads.
enum { BM = 128, BN = 128, BK = 8, APAD = 4 };

extern "C" __global__ void __launch_bounds__(256)
matmul_f32(const float* a, const float* b, float* c, int m, int n, int k)
{
    __shared__ __align__(16) float As[2][BK][BM + APAD];  // As[buf][kk][row]  (transposed A)
    __shared__ __align__(16) float Bs[2][BK][BN];         // Bs[buf][kk][col]

    const int tid = threadIdx.x;
    const int tx = tid & 15;   // column group
    const int ty = tid >> 4;   // row group
    const int row0 = blockIdx.y * BM;
    const int col0 = blockIdx.x * BN;

    // Global-load mapping. A tile (128 x 8): thread loads row a_r, k-offsets a_k..a_k+3.
    // B tile (8 x 128): thread loads k-row b_k, columns b_c..b_c+3.
    const int a_r = tid >> 1;
    const int a_k = (tid & 1) * 4;
    const int b_k = tid >> 5;
    const int b_c = (tid & 31) * 4;

    const int a_row = row0 + a_r;
    const int b_col = col0 + b_c;
    // float4 global loads are legal only when every such address is 16-byte aligned.
    const bool vecA = ((k & 3) == 0) && ((((unsigned long long)a) & 15ull) == 0ull);
    const bool vecB = ((n & 3) == 0) && ((((unsigned long long)b) & 15ull) == 0ull);
    const bool vecC = ((n & 3) == 0) && ((((unsigned long long)c) & 15ull) == 0ull);

    const float* a_ptr = a + (size_t)(a_row < m ? a_row : 0) * (size_t)k;  // row base (clamped)

    float ra[4], rb[4];

    // Load tile starting at k0 from global memory into registers (zero-fill out of range).
    auto load_tile = [&](int k0) {
        const int ak = k0 + a_k;
        if (vecA && a_row < m && ak < k) {
            // k % 4 == 0 and ak % 4 == 0, so ak < k implies ak + 3 < k.
            float4 v = __ldg(reinterpret_cast<const float4*>(a_ptr + ak));
            ra[0] = v.x; ra[1] = v.y; ra[2] = v.z; ra[3] = v.w;
        } else {
#pragma unroll
            for (int j = 0; j < 4; ++j)
                ra[j] = (a_row < m && ak + j < k) ? __ldg(a_ptr + ak + j) : 0.0f;
        }
        const int bk = k0 + b_k;
        if (bk < k) {
            const float* b_ptr = b + (size_t)bk * (size_t)n;
            if (vecB && b_col < n) {
                // n % 4 == 0 and b_col % 4 == 0, so b_col < n implies b_col + 3 < n.
                float4 v = __ldg(reinterpret_cast<const float4*>(b_ptr + b_col));
                rb[0] = v.x; rb[1] = v.y; rb[2] = v.z; rb[3] = v.w;
            } else {
#pragma unroll
                for (int j = 0; j < 4; ++j)
                    rb[j] = (b_col + j < n) ? __ldg(b_ptr + b_col + j) : 0.0f;
            }
        } else {
#pragma unroll
            for (int j = 0; j < 4; ++j) rb[j] = 0.0f;
        }
    };

    auto store_tile = [&](int buf) {
#pragma unroll
        for (int j = 0; j < 4; ++j) As[buf][a_k + j][a_r] = ra[j];
        *reinterpret_cast<float4*>(&Bs[buf][b_k][b_c]) = make_float4(rb[0], rb[1], rb[2], rb[3]);
    };

    float acc[8][8];
#pragma unroll
    for (int i = 0; i < 8; ++i)
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[i][j] = 0.0f;

    const int num_tiles = (k + BK - 1) / BK;

    load_tile(0);
    store_tile(0);
    __syncthreads();

    int buf = 0;
    for (int t = 0; t < num_tiles; ++t) {
        const bool has_next = (t + 1) < num_tiles;
        if (has_next) load_tile((t + 1) * BK);  // global loads overlap the FMAs below

#pragma unroll
        for (int kk = 0; kk < BK; ++kk) {
            const float4 a0 = *reinterpret_cast<const float4*>(&As[buf][kk][ty * 4]);
            const float4 a1 = *reinterpret_cast<const float4*>(&As[buf][kk][64 + ty * 4]);
            const float4 b0 = *reinterpret_cast<const float4*>(&Bs[buf][kk][tx * 4]);
            const float4 b1 = *reinterpret_cast<const float4*>(&Bs[buf][kk][64 + tx * 4]);
            const float av[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
            const float bv[8] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
#pragma unroll
            for (int i = 0; i < 8; ++i)
#pragma unroll
                for (int j = 0; j < 8; ++j) acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
        }

        // The other buffer was last read in iteration t-1, which ended with a barrier.
        if (has_next) store_tile(buf ^ 1);
        __syncthreads();
        buf ^= 1;
    }

    // Guarded stores of the 8x8 micro-tile.
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        const int row = row0 + (i < 4 ? ty * 4 + i : 64 + ty * 4 + (i - 4));
        if (row >= m) continue;
        float* c_row = c + (size_t)row * (size_t)n;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int col = col0 + h * 64 + tx * 4;
            if (vecC && col < n) {
                *reinterpret_cast<float4*>(c_row + col) =
                    make_float4(acc[i][h * 4 + 0], acc[i][h * 4 + 1], acc[i][h * 4 + 2], acc[i][h * 4 + 3]);
            } else {
#pragma unroll
                for (int j = 0; j < 4; ++j)
                    if (col + j < n) c_row[col + j] = acc[i][h * 4 + j];
            }
        }
    }
}
