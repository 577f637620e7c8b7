// Row softmax, the plain way: one block per row and three passes over it (its maximum, the sum of
// exp(x - max), then the outputs), scalar loads, a tree reduction in shared memory between passes.
// Launched with 256 threads a block (a power of two) and one block per row.
#include <math_constants.h>

extern "C" __global__ void softmax_rows(const float* x, float* y, int rows, int cols)
{
    __shared__ float red[256];
    const int t = threadIdx.x;
    const int row = blockIdx.x;
    if (row >= rows)
        return;
    const float* xr = x + (long long)row * cols;
    float* yr = y + (long long)row * cols;

    float m = -CUDART_INF_F;
    for (int c = t; c < cols; c += blockDim.x)
        m = fmaxf(m, xr[c]);
    red[t] = m;
    __syncthreads();
    for (int half = blockDim.x / 2; half > 0; half /= 2) {
        if (t < half)
            red[t] = fmaxf(red[t], red[t + half]);
        __syncthreads();
    }
    m = red[0];
    __syncthreads();

    float s = 0.0f;
    for (int c = t; c < cols; c += blockDim.x)
        s += expf(xr[c] - m);
    red[t] = s;
    __syncthreads();
    for (int half = blockDim.x / 2; half > 0; half /= 2) {
        if (t < half)
            red[t] += red[t + half];
        __syncthreads();
    }
    s = red[0];

    for (int c = t; c < cols; c += blockDim.x)
        yr[c] = expf(xr[c] - m) / s;
}
