// Deliberately broken: assigns a pointer to a float, so NVRTC reports a type error.
extern "C" __global__ void matmul_f32(const float* a, const float* b, float* c, int m, int n, int k)
{
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    float acc = a;  // error: const float* is not convertible to float
    if (row < m && col < n)
        c[row * n + col] = acc + b[0] * k;
}
