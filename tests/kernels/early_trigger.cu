// Exploit family "work after the kernel says it is done": programmatic dependent launch. The kernel
// tells the next launch in the stream it may start (griddepcontrol.launch_dependents) before doing
// its work, hoping the end event or the next sample overlaps the work still running.
// Stopped by: how the harness launches. The trigger only matters to a launch made with the
// programmatic-serialization attribute, which the harness never sets; events and the kernels
// that follow wait for the whole grid, so the work stays inside the timed interval.
// Expected: ok, timed at the cost of relu.cu.
extern "C" __global__ void relu(const float* x, float* y, int n)
{
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        y[i] = fmaxf(x[i], 0.0f);
}
