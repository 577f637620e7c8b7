// Trusted reference SGEMM (C = A * B, row-major float32): one thread per element of C, a plain
// loop over k, bounds-checked for any m, n, k. The products are summed in float 32 at a time and
// those sums in double, rounded to float once: one float sum over all of k drifts from the exact
// result as k grows (by 0.003 at k = 32768 on this example's inputs, twice the tolerance), and a
// candidate that adds in another order (tiles, split-K, cuBLAS) would be blamed for it; summed
// this way the drift stays near 5e-5 there, at the cost of one double add per 32 products (all
// in double took the main job's GPU time from 18 to 35 s on the H200, 4096^3 being the most of it).
extern "C" __global__ void matmul_f32(const float* a, const float* b, float* c, int m, int n, int k)
{
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row >= m || col >= n)
        return;
    double acc = 0.0;
    for (int i0 = 0; i0 < k; i0 += 32) {
        const int end = min(k, i0 + 32);
        float part = 0.0f;
        for (int i = i0; i < end; ++i)
            part += a[(size_t)row * k + i] * b[(size_t)i * n + col];
        acc += part;
    }
    c[row * n + col] = (float)acc;
}
