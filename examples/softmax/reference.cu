// Trusted reference row softmax: one block of 256 threads per row, three passes (the maximum, the
// sum of exp(x - max) accumulated in double, then each output computed in double and rounded
// once to float). A row of -inf gives NaN, as PyTorch's softmax does.
#include <math_constants.h>

extern "C" __global__ void softmax_rows(const float* x, float* y, int rows, int cols)
{
    __shared__ double red[256];
    const int t = threadIdx.x;
    const int row = blockIdx.x;
    if (row >= rows)
        return;
    const float* xr = x + (long long)row * cols;
    float* yr = y + (long long)row * cols;

    double m = -CUDART_INF;
    for (int c = t; c < cols; c += blockDim.x)
        m = fmax(m, (double)xr[c]);
    red[t] = m;
    __syncthreads();
    for (int half = blockDim.x / 2; half > 0; half /= 2) {
        if (t < half)
            red[t] = fmax(red[t], red[t + half]);
        __syncthreads();
    }
    m = red[0];
    __syncthreads();

    double s = 0.0;
    for (int c = t; c < cols; c += blockDim.x)
        s += exp((double)xr[c] - m);
    red[t] = s;
    __syncthreads();
    for (int half = blockDim.x / 2; half > 0; half /= 2) {
        if (t < half)
            red[t] += red[t + half];
        __syncthreads();
    }
    s = red[0];

    for (int c = t; c < cols; c += blockDim.x)
        yr[c] = (float)(exp((double)xr[c] - m) / s);
}
