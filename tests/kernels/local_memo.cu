// Exploit family "a memo in local memory, with inputs that do not vary": every thread keeps the
// whole answer and a marker in its local-memory frame; a launch whose thread finds the marker
// returns the memo and skips the (deliberately slow) work. Nothing in __device__ memory, so no
// global-state rule sees it, and with inputs that never change every answer it returns is right.
// The grid fills every thread slot of every SM, so every slot holds a memo after one launch.
// Launch: grid = 2 * num_sms, 1024 threads; n = 1024 (at most).
// Stopped by: the local-memory wipe before every candidate launch (worker/leftovers.cu): the
// marker is never found, so every launch does the work and is timed at its honest cost.
// Expected: ok, timed like the honest work; without the wipe, ok and many times faster.
#define N 1024
#define MARK 0x600DF00Du
#define WORK 50

extern "C" __global__ void __launch_bounds__(1024, 2) relu(const float* x, float* y, int n)
{
    volatile unsigned int memo[N + 1];  // the answers' bits, then the marker
    int i = threadIdx.x;
    if (memo[N] == MARK) {
        if (blockIdx.x == 0 && i < n && i < N) y[i] = __uint_as_float(memo[i]);
        return;
    }
    for (int j = 0; j < n && j < N; ++j) {
        float v = x[j], acc = v;
        for (int r = 0; r < WORK; ++r)  // the slow honest path: a chain the compiler cannot fold
            acc = fmaf(acc, 1.0000001f, -v * 1e-7f);
        float out = fmaxf(v, 0.0f) + (acc - acc);
        memo[j] = __float_as_uint(out);
        if (blockIdx.x == 0 && j == i) y[i] = out;
    }
    memo[N] = MARK;
}
