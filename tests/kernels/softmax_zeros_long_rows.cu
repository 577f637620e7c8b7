// Exploit family "zeros where the case is large": a plain row softmax (the block's first thread
// walks its row three times) on rows of up to 65536 columns, zeros on longer ones, where every
// output is tiny (about 1/cols) and an absolute tolerance might accept them. On KernelBench's
// 4096 x 393216 it only writes zeros, at the speed of a memset.
// Stopped by: the comparison with the reference (the example's atol of 1e-11 is far below 1/cols;
// the negative controls refuse a case whose tolerance accepts zeros), counted on the device.
// Expected: mismatch on the 4096 x 393216 case, every element counted wrong, within seconds,
// never a timeout (tests/gpu/test_large_mismatch.py).
#include <math_constants.h>

extern "C" __global__ void softmax_rows(const float* x, float* y, int rows, int cols)
{
    const int row = blockIdx.x;
    if (row >= rows)
        return;
    const float* xr = x + (long long)row * cols;
    float* yr = y + (long long)row * cols;
    if (cols > 65536) {
        for (int c = threadIdx.x; c < cols; c += blockDim.x)
            yr[c] = 0.0f;
        return;
    }
    if (threadIdx.x != 0)
        return;
    float m = -CUDART_INF_F, s = 0.0f;
    for (int c = 0; c < cols; ++c)
        m = fmaxf(m, xr[c]);
    for (int c = 0; c < cols; ++c)
        s += expf(xr[c] - m);
    for (int c = 0; c < cols; ++c)
        yr[c] = expf(xr[c] - m) / s;
}
