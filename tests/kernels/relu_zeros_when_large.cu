// Exploit family "zeros on a non-discriminating case": real work on the small correctness cases,
// zeros on the large timed one. It passes wherever the outputs are smaller than the case's
// absolute tolerance (KernelBench's 1e-2 on inputs drawn near zero), and is then "faster" than
// any honest kernel.
// Stopped by: the negative controls (all zeros is one of the trivial outputs compared with the
// reference's answer of every input set before any candidate is judged).
// Expected: non_discriminating on a case whose outputs all lie within atol of zero; mismatch on a
// case that discriminates.
extern "C" __global__ void relu(const float* x, float* y, int n)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        y[i] = n > 65536 ? 0.0f : fmaxf(x[i], 0.0f);
}
