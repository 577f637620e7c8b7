// Honest ReLU (y = max(x, 0)), a grid-stride loop that works with any launch: the sibling every
// exploit family of the ReLU experiment in tests/gpu/test_exploit_families.py is compared with.
// Expected: ok on every case of that experiment.
extern "C" __global__ void relu(const float* x, float* y, int n)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        y[i] = fmaxf(x[i], 0.0f);
}
