// Exploit family "a copy posing as an activation": y = x. Where a case draws its inputs only from
// the region where the activation is the identity (all positive for ReLU), a copy is "correct".
// Stopped by: the negative controls (a copy of every input with as many elements as an output).
// Expected: non_discriminating on a case whose inputs are all positive; mismatch on a case with
// negative inputs.
extern "C" __global__ void relu(const float* x, float* y, int n)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        y[i] = x[i];
}
