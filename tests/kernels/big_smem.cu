// Correct naive SGEMM that declares dynamic shared memory. The tests launch it with 300000 bytes
// (more than any GPU allows: a launch error) and with 100 KiB (allowed once the limit is raised).
extern __shared__ float dyn[];

extern "C" __global__ void matmul_f32(const float* a, const float* b, float* c, int m, int n, int k)
{
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    unsigned int dyn_bytes;
    asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(dyn_bytes));
    if (dyn_bytes >= 16 * sizeof(float))
        dyn[threadIdx.x] = 0.0f;  // harmless touch, only when the buffer exists
    if (row >= m || col >= n)
        return;
    float acc = 0.0f;
    for (int i = 0; i < k; ++i)
        acc += a[row * k + i] * b[i * n + col];
    c[row * n + col] = acc;
}
