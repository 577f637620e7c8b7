// Exploit family "zeros where the case is large": the example's three-pass row softmax on rows
// of up to 65536 columns, zeros on longer ones, where every output is tiny (about 1/cols) and an
// absolute tolerance might accept them. On KernelBench's 4096 x 393216 it only writes zeros.
// Stopped by: the comparison with the reference (the example's atol of 1e-11 is far below 1/cols;
// the negative controls refuse a case whose tolerance accepts zeros), counted on the device.
// Expected: mismatch on the 4096 x 393216 case, every element counted wrong, within seconds,
// never a timeout (tests/gpu/test_large_mismatch.py).
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
    if (cols > 65536) {
        for (int c = t; c < cols; c += blockDim.x)
            yr[c] = 0.0f;
        return;
    }

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
