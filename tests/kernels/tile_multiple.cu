// Adversarial (missing bounds checks): 16x16 tiled kernel that assumes m, n, k are all
// multiples of 16; otherwise it reads past A/B and writes outside C (or into wrong rows).
extern "C" __global__ void matmul_f32(const float* a, const float* b, float* c, int m, int n, int k)
{
    __shared__ float As[16][16];
    __shared__ float Bs[16][16];

    int tx = threadIdx.x, ty = threadIdx.y;
    int row = blockIdx.y * 16 + ty;
    int col = blockIdx.x * 16 + tx;
    float acc = 0.0f;

    for (int t = 0; t < k; t += 16) {
        As[ty][tx] = a[row * k + t + tx];
        Bs[ty][tx] = b[(t + ty) * n + col];
        __syncthreads();
        for (int i = 0; i < 16; ++i)
            acc += As[ty][i] * Bs[i][tx];
        __syncthreads();
    }
    c[row * n + col] = acc;
}
