// Adversarial (out-of-bounds reads): the inner loop always runs to k rounded up to 8, reading past
// the end of a row (and, for the last row of A and the last rows of B, past the end of the
// buffer), and multiplies the extra elements by zero. With finite garbage past the end that is
// harmless and passes; with NaN there (or in production, a fault) it is not.
extern "C" __global__ void matmul_f32(const float* a, const float* b, float* c, int m, int n, int k)
{
    int row = blockIdx.y * 16 + threadIdx.y;
    int col = blockIdx.x * 16 + threadIdx.x;
    if (row < m && col < n) {
        int padded = (k + 7) / 8 * 8;
        float acc = 0.0f;
        for (int i = 0; i < padded; ++i) {
            float keep = i < k ? 1.0f : 0.0f;
            acc = fmaf(keep * a[row * k + i], b[i * n + col], acc);
        }
        c[row * n + col] = acc;
    }
}
