// Register-blocked SGEMM with tunable tile sizes: each block computes a BM x BN tile of C,
// staging BK-wide slices of A (transposed) and B in shared memory; each of its
// (BM/TM)*(BN/TN) threads accumulates a TM x TN micro-tile in registers.
// Launch: block = [(BM/TM)*(BN/TN)], grid = [cdiv(n, BN), cdiv(m, BM)].
#ifndef BM
#define BM 32
#endif
#ifndef BN
#define BN 32
#endif
#ifndef BK
#define BK 16
#endif
#ifndef TM
#define TM 2
#endif
#ifndef TN
#define TN 2
#endif

#define THREADS ((BM / TM) * (BN / TN))

extern "C" __global__ void __launch_bounds__(THREADS)
matmul_f32(const float* a, const float* b, float* c, int m, int n, int k)
{
    __shared__ float As[BK][BM + 1];  // A tile, transposed; +1 spreads the transposing stores over banks
    __shared__ float Bs[BK][BN];

    const int tid = threadIdx.x;
    const int tx = tid % (BN / TN);
    const int ty = tid / (BN / TN);
    const int row0 = blockIdx.y * BM;
    const int col0 = blockIdx.x * BN;

    float acc[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j)
            acc[i][j] = 0.0f;

    for (int t = 0; t < k; t += BK) {
#pragma unroll
        for (int e = tid; e < BM * BK; e += THREADS) {
            const int r = e / BK, kk = e % BK;
            const int gr = row0 + r, gk = t + kk;
            As[kk][r] = (gr < m && gk < k) ? a[(size_t)gr * k + gk] : 0.0f;
        }
#pragma unroll
        for (int e = tid; e < BK * BN; e += THREADS) {
            const int kk = e / BN, cc = e % BN;
            const int gk = t + kk, gc = col0 + cc;
            Bs[kk][cc] = (gk < k && gc < n) ? b[(size_t)gk * n + gc] : 0.0f;
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < BK; ++kk) {
            float ar[TM], br[TN];
#pragma unroll
            for (int i = 0; i < TM; ++i)
                ar[i] = As[kk][ty * TM + i];
#pragma unroll
            for (int j = 0; j < TN; ++j)
                br[j] = Bs[kk][tx * TN + j];
#pragma unroll
            for (int i = 0; i < TM; ++i)
#pragma unroll
                for (int j = 0; j < TN; ++j)
                    acc[i][j] = fmaf(ar[i], br[j], acc[i][j]);
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < TM; ++i) {
        const int r = row0 + ty * TM + i;
#pragma unroll
        for (int j = 0; j < TN; ++j) {
            const int cc = col0 + tx * TN + j;
            if (r < m && cc < n)
                c[(size_t)r * n + cc] = acc[i][j];
        }
    }
}
