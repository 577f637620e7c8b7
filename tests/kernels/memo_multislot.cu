// Adversarial (replay): a 4-slot memo table in __device__ memory, keyed on (m, n, k) and a hash of
// a scattered sample of A and B that includes their last elements. On a hit it copies the stored
// C; on a miss it computes C and stores it in the least recently filled slot. With a few input
// sets cycling through a run, every launch after the first cycle is a hit.
#define SLOTS 4
#define SLOT_FLOATS (384 * 320)
__device__ float table[SLOTS][SLOT_FLOATS];
__device__ unsigned long long keys[SLOTS];
__device__ unsigned int next_slot;
__device__ unsigned int blocks_done;

__device__ unsigned long long sample_key(const float* a, const float* b, int m, int n, int k) {
    unsigned long long h = 1469598103934665603ull ^ ((unsigned long long)m << 40) ^ ((unsigned long long)n << 20) ^ k;
    long long na = (long long)m * k, nb = (long long)k * n;
    for (int s = 0; s < 16; ++s) {
        long long ia = s == 15 ? na - 1 : (na * s) / 16, ib = s == 15 ? nb - 1 : (nb * s) / 16;
        h = (h ^ __float_as_uint(a[ia])) * 1099511628211ull;
        h = (h ^ __float_as_uint(b[ib])) * 1099511628211ull;
    }
    return h | 1ull;
}

extern "C" __global__ void matmul_f32(const float* a, const float* b, float* c, int m, int n, int k)
{
    int row = blockIdx.y * 16 + threadIdx.y;
    int col = blockIdx.x * 16 + threadIdx.x;
    bool fits = (long long)m * n <= SLOT_FLOATS;
    unsigned long long key = sample_key(a, b, m, n, k);
    int hit = -1;
    for (int s = 0; s < SLOTS && fits; ++s)
        if (keys[s] == key) hit = s;
    int slot = hit >= 0 ? hit : (int)(next_slot % SLOTS);
    if (row < m && col < n) {
        int idx = row * n + col;
        if (hit >= 0) {
            c[idx] = table[hit][idx];
        } else {
            float acc = 0.0f;
            for (int i = 0; i < k; ++i)
                acc = fmaf(a[row * k + i], b[i * n + col], acc);
            c[idx] = acc;
            if (fits) table[slot][idx] = acc;
        }
    }
    __syncthreads();
    if (fits && hit < 0 && threadIdx.x == 0 && threadIdx.y == 0) {
        __threadfence();
        if (atomicAdd(&blocks_done, 1u) == gridDim.x * gridDim.y - 1) {  // every block wrote its part
            keys[slot] = key;
            next_slot = next_slot + 1;
            blocks_done = 0;
            __threadfence();
        }
    }
}
