// Exploit family "work on another stream": the kernel launches a child grid from the device
// (dynamic parallelism), so the work it returns for would run outside the timed interval.
// Stopped by: the compiler. Device-side launches need the device runtime (relocatable device code
// linked with cudadevrt); the harness compiles whole programs with NVRTC and links nothing, so
// NVRTC refuses the launch syntax.
// Expected: compile_error ("device-side kernel launch could not be processed").
__global__ void relu_child(const float* x, float* y, int n)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        y[i] = fmaxf(x[i], 0.0f);
}

extern "C" __global__ void relu(const float* x, float* y, int n)
{
    if (blockIdx.x == 0 && threadIdx.x == 0)
        relu_child<<<(n + 255) / 256, 256>>>(x, y, n);
}
