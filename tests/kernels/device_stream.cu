// Exploit family "work on a non-default stream": the device runtime's own entry points declared by
// hand (what cudaStreamCreateWithFlags and <<<..., stream>>> compile to), so the child grid goes to a
// fire-and-forget stream the harness never waits on.
// Stopped by: the link step. Without -rdc and libcudadevrt, ptxas cannot resolve the device
// runtime's functions; the harness passes neither, and a kernel cannot pass compiler options.
// Expected: compile_error ("Unresolved extern function").
extern "C" __device__ void* cudaGetParameterBufferV2(void* func, dim3 grid, dim3 block, unsigned int shared);
extern "C" __device__ int cudaLaunchDeviceV2(void* params, void* stream);

#define FIRE_AND_FORGET ((void*)0x3)  // cudaStreamFireAndForget

__global__ void relu_child(const float* x, float* y, int n)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        y[i] = fmaxf(x[i], 0.0f);
}

extern "C" __global__ void relu(const float* x, float* y, int n)
{
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        void* params = cudaGetParameterBufferV2((void*)relu_child, dim3((n + 255) / 256), dim3(256), 0);
        if (params != nullptr) {
            *(const float**)params = x;
            *(float**)((char*)params + 8) = y;
            *(int*)((char*)params + 16) = n;
            cudaLaunchDeviceV2(params, FIRE_AND_FORGET);
        }
    }
}
