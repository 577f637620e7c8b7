// Exploit family "a copy posing as an activation", at copy speed: y = x moved as float4 (the
// scalar tail after the last whole float4), wrong on every negative input. On KernelBench's
// 4096 x 393216 (6.4 GB of float32 output) it finishes as fast as an honest kernel.
// Stopped by: the comparison with the reference, counted on the device.
// Expected: mismatch, with the wrong elements counted and the first one named, within seconds,
// never a timeout (tests/gpu/test_large_mismatch.py).
extern "C" __global__ void relu(const float* x, float* y, int n)
{
    const long long quads = n / 4;
    const long long step = (long long)gridDim.x * blockDim.x;
    const float4* x4 = reinterpret_cast<const float4*>(x);
    float4* y4 = reinterpret_cast<float4*>(y);
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < quads; i += step)
        y4[i] = x4[i];
    for (long long i = 4 * quads + blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += step)
        y[i] = x[i];
}
