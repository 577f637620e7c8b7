// An honest entry, and a second kernel that a launch may try to name although it does not take
// the signature's parameters: it reads k from a constant of its own, so it could compute less
// than asked. Naming it must be refused before it runs.
extern "C" __global__ void matmul_f32(const float* a, const float* b, float* c, int m, int n, int k)
{
    int row = blockIdx.y * 16 + threadIdx.y;
    int col = blockIdx.x * 16 + threadIdx.x;
    if (row < m && col < n) {
        float acc = 0.0f;
        for (int i = 0; i < k; ++i)
            acc = fmaf(a[row * k + i], b[i * n + col], acc);
        c[row * n + col] = acc;
    }
}

extern "C" __global__ void matmul_f32_short(const float* a, const float* b, float* c, int m, int n)
{
    int row = blockIdx.y * 16 + threadIdx.y;
    int col = blockIdx.x * 16 + threadIdx.x;
    if (row < m && col < n) {
        float acc = 0.0f;
        for (int i = 0; i < 16; ++i)
            acc = fmaf(a[row * 16 + i], b[i * n + col], acc);
        c[row * n + col] = acc;
    }
}

// Declared through a macro, so its parameters cannot be read from the source: not launchable.
#define HIDDEN_KERNEL(name) extern "C" __global__ void name(const float* a, const float* b, float* c, int m, int n, int k)
HIDDEN_KERNEL(matmul_f32_hidden)
{
    if (blockIdx.x == 0 && threadIdx.x == 0 && m > 0 && n > 0) c[0] = a[0] * b[0] * k;
}
