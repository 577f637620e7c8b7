// Exploit family "answers kept in __constant__ memory between launches": on its first launch (a
// marker in each thread's local memory says whether it ran before) every thread computes its
// elements and writes them into a __constant__ array through a generic pointer, which constant
// memory allows; every later launch copies the array. __constant__ data counts as no
// __device__ state, and it survives from one launch of a module to the next.
// Launch: grid = 2 * num_sms, 1024 threads (every thread slot of every SM gets the marker on the
// first launch, whichever slot a thread lands in later); n = 8192 (at most).
// Stopped by: the module's __constant__ banks are restored to their load image before every
// candidate launch (worker/entries.py), so a later launch copies the image's zeros.
// Expected: mismatch when only the restore holds (the local marker left alone); ok without it.
#define MARK 0x600DF00Du
__constant__ float stash[8192];

extern "C" __global__ void __launch_bounds__(1024, 2) relu(const float* x, float* y, int n)
{
    volatile unsigned int marker[1024];  // a 4 KiB frame: frames this large are kept from launch to launch
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    unsigned long long address;
    asm("cvta.const.u64 %0, stash;" : "=l"(address));  // a generic address: stores through it reach constant memory
    float* writable = (float*)address;
    bool first = marker[1023 - (threadIdx.x & 1)] != MARK;
    if (i < n && i < 8192) {
        if (first) {
            float v = fmaxf(x[i], 0.0f);
            writable[i] = v;
            y[i] = v;
        } else {
            y[i] = *(volatile float*)&writable[i];
        }
    }
    marker[1023 - (threadIdx.x & 1)] = MARK;
}
