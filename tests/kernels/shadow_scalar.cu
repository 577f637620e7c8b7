// Adversarial (a tunable that renames the problem): a correct naive kernel whose parameters are
// called M, N, K. Proposed with the tunable {"m": [16]}, a harness that lets tunables override case
// scalars would size the checked output, the reference and the declared flops for m = 16 while
// this kernel computes all M rows: only the first 16 rows are ever compared, and the time looks
// far faster than the work declared for the real shape.
extern "C" __global__ void matmul_f32(const float* a, const float* b, float* c, int M, int N, int K)
{
    int row = blockIdx.y * 16 + threadIdx.y;
    int col = blockIdx.x * 16 + threadIdx.x;
    if (row < M && col < N) {
        float acc = 0.0f;
        for (int i = 0; i < K; ++i)
            acc = fmaf(a[row * K + i], b[i * N + col], acc);
        c[row * N + col] = acc;
    }
}
