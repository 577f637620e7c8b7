// The harness's own kernels: the timing gate and the on-device checks.
// Compiled once per worker with NVRTC. Element kinds (argument `kind`):
//   0 f32, 1 f64, 2 f16, 3 bf16, 4 i8, 5 u8, 6 i16, 7 u16, 8 i32, 9 u32, 10 i64, 11 u64

// Holds the stream until the host sets *flag, so samples queued behind it run back to back.
extern "C" __global__ void cudaopt_gate(const volatile unsigned int* flag,
                                        unsigned long long timeout_ns,
                                        unsigned int* timed_out) {
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    while (*flag == 0u) {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
        if (now - start > timeout_ns) { *timed_out = 1u; return; }
        __nanosleep(1000);
    }
}

__device__ __forceinline__ double load_double(const void* p, long long i, int kind) {
    switch (kind) {
        case 0: return (double)((const float*)p)[i];
        case 1: return ((const double*)p)[i];
        case 2: {
            unsigned short h = ((const unsigned short*)p)[i];
            float f;
            asm("{ .reg .b16 t; mov.b16 t, %1; cvt.f32.f16 %0, t; }" : "=f"(f) : "h"(h));
            return (double)f;
        }
        case 3: return (double)__uint_as_float(((unsigned int)((const unsigned short*)p)[i]) << 16);
        case 4: return (double)((const signed char*)p)[i];
        case 5: return (double)((const unsigned char*)p)[i];
        case 6: return (double)((const short*)p)[i];
        case 7: return (double)((const unsigned short*)p)[i];
        case 8: return (double)((const int*)p)[i];
        case 9: return (double)((const unsigned int*)p)[i];
        case 10: return (double)((const long long*)p)[i];
        default: return (double)((const unsigned long long*)p)[i];
    }
}

__device__ __forceinline__ unsigned long long load_bits(const void* p, long long i, int itemsize) {
    switch (itemsize) {
        case 1: return ((const unsigned char*)p)[i];
        case 2: return ((const unsigned short*)p)[i];
        case 4: return ((const unsigned int*)p)[i];
        default: return ((const unsigned long long*)p)[i];
    }
}

// Widen any element kind to double (reference outputs produced by a .cu reference).
extern "C" __global__ void cudaopt_widen(const void* src, double* dst, long long n, int kind) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x)
        dst[i] = load_double(src, i, kind);
}

struct CompareStats {
    unsigned long long bad, unwritten, nan, inf;
    unsigned long long max_abs_bits, max_rel_bits;  // non-negative doubles compare as integers
    double err_sq, ref_sq;
    unsigned long long first_bad;  // ~0ull when none
};

// The same rule as compare.compare on the host: an element passes when |out - ref| <= atol +
// rtol*|ref|, or both are NaN, or both are the same infinity; an element holding the poison
// bits is unwritten and fails (for integers, unless the poison value is the right answer).
extern "C" __global__ void cudaopt_compare(const void* out, const double* ref, long long n, int kind,
                                           int itemsize, unsigned long long poison, int is_float,
                                           double rtol, double atol, CompareStats* stats) {
    unsigned long long bad = 0, unwritten = 0, nans = 0, infs = 0, first = ~0ull;
    double max_abs = 0.0, max_rel = 0.0, err_sq = 0.0, ref_sq = 0.0;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        double a = load_double(out, i, kind);
        double e = ref[i];
        bool poisoned = load_bits(out, i, itemsize) == poison && (is_float || a != e);
        double diff = fabs(a - e);
        bool close = diff <= atol + rtol * fabs(e);
        bool good = (close || (isnan(a) && isnan(e)) || (isinf(a) && a == e)) && !poisoned;
        if (!good) { ++bad; if ((unsigned long long)i < first) first = (unsigned long long)i; }
        unwritten += poisoned;
        nans += isnan(a) && !poisoned;
        infs += isinf(a);
        if (isfinite(diff)) {
            max_abs = fmax(max_abs, diff);
            max_rel = fmax(max_rel, diff / fmax(fabs(e), 2.2250738585072014e-308));
            err_sq += diff * diff;
        }
        if (isfinite(e)) ref_sq += e * e;
    }
    for (int offset = 16; offset > 0; offset >>= 1) {
        bad += __shfl_down_sync(0xffffffffu, bad, offset);
        unwritten += __shfl_down_sync(0xffffffffu, unwritten, offset);
        nans += __shfl_down_sync(0xffffffffu, nans, offset);
        infs += __shfl_down_sync(0xffffffffu, infs, offset);
        first = min(first, __shfl_down_sync(0xffffffffu, first, offset));
        max_abs = fmax(max_abs, __shfl_down_sync(0xffffffffu, max_abs, offset));
        max_rel = fmax(max_rel, __shfl_down_sync(0xffffffffu, max_rel, offset));
        err_sq += __shfl_down_sync(0xffffffffu, err_sq, offset);
        ref_sq += __shfl_down_sync(0xffffffffu, ref_sq, offset);
    }
    if ((threadIdx.x & 31) == 0) {
        atomicAdd(&stats->bad, bad);
        atomicAdd(&stats->unwritten, unwritten);
        atomicAdd(&stats->nan, nans);
        atomicAdd(&stats->inf, infs);
        atomicMin(&stats->first_bad, first);
        atomicMax(&stats->max_abs_bits, (unsigned long long)__double_as_longlong(max_abs));
        atomicMax(&stats->max_rel_bits, (unsigned long long)__double_as_longlong(max_rel));
        atomicAdd(&stats->err_sq, err_sq);
        atomicAdd(&stats->ref_sq, ref_sq);
    }
}

// Count differing bytes between two buffers and the first differing offset.
extern "C" __global__ void cudaopt_diff_bytes(const unsigned char* a, const unsigned char* b, long long n,
                                              unsigned long long* count, unsigned long long* first) {
    unsigned long long differ = 0, at = ~0ull;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        if (a[i] != b[i]) { ++differ; if ((unsigned long long)i < at) at = (unsigned long long)i; }
    }
    for (int offset = 16; offset > 0; offset >>= 1) {
        differ += __shfl_down_sync(0xffffffffu, differ, offset);
        at = min(at, __shfl_down_sync(0xffffffffu, at, offset));
    }
    if ((threadIdx.x & 31) == 0 && differ) {
        atomicAdd(count, differ);
        atomicMin(first, at);
    }
}

// --- fresh inputs --------------------------------------------------------------------------
// Counter-based (SplitMix64): element i of an input is mix(key + i * golden), where the key comes
// from the request's seed, the launch's stream and the input's position; so a launch's inputs can
// be drawn on the device between timed launches, re-checked after the launch, and drawn again
// later for the reference, with nothing kept. Distributions (argument `dist`):
//   0 uniform [low, high), 1 normal (mean, std), 2 integers [low, high)

__device__ __forceinline__ unsigned long long splitmix(unsigned long long x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

__device__ __forceinline__ double fresh_value(unsigned long long key, long long i,
                                              int dist, double low, double high, double mean, double stdev) {
    unsigned long long h = splitmix(key + (unsigned long long)i * 0x9E3779B97F4A7C15ull);
    double u = (double)(h >> 11) * 1.1102230246251565e-16;  // [0, 1)
    if (dist == 2) return floor(low) + floor(u * (floor(high) - floor(low)));
    if (dist == 1) {
        double u1 = ((double)(h >> 11) + 1.0) * 1.1102230246251565e-16;  // (0, 1]
        double u2 = (double)(splitmix(h) >> 11) * 1.1102230246251565e-16;
        return mean + stdev * sqrt(-2.0 * log(u1)) * cospi(2.0 * u2);
    }
    return low + u * (high - low);
}

// A 32-bit bijective mix ("lowbias32"): the fast path for uniform float32/16/bf16 inputs.
__device__ __forceinline__ unsigned int mix32(unsigned int x) {
    x ^= x >> 16; x *= 0x7feb352du; x ^= x >> 15; x *= 0x846ca68bu; x ^= x >> 16;
    return x;
}

// The value as stored: the element kind's bits, rounded to nearest (integers: to nearest integer).
__device__ __forceinline__ unsigned long long stored_bits(double v, int kind) {
    switch (kind) {
        case 0: return __float_as_uint((float)v);
        case 1: return (unsigned long long)__double_as_longlong(v);
        case 2: {
            unsigned short h;
            float f = (float)v;
            asm("{ .reg .b16 t; cvt.rn.f16.f32 t, %1; mov.b16 %0, t; }" : "=h"(h) : "f"(f));
            return h;
        }
        case 3: {
            unsigned int b = __float_as_uint((float)v);
            b += 0x7FFFu + ((b >> 16) & 1u);
            return b >> 16;
        }
        case 4: return (unsigned char)(signed char)rint(v);
        case 5: return (unsigned char)rint(v);
        case 6: return (unsigned short)(short)rint(v);
        case 7: return (unsigned short)rint(v);
        case 8: return (unsigned int)(int)rint(v);
        case 9: return (unsigned int)rint(v);
        case 10: return (unsigned long long)(long long)rint(v);
        default: return (unsigned long long)rint(v);
    }
}

// The stored bits of element i of a fresh input (both kernels below must agree bit for bit).
__device__ __forceinline__ unsigned long long fresh_bits(unsigned long long key, long long i, int dist, int kind,
                                                         double low, double high, double mean, double stdev) {
    if (dist == 0 && (kind == 0 || kind == 2 || kind == 3)) {
        unsigned int x = mix32((unsigned int)(key ^ (key >> 32)) ^ (unsigned int)i ^ (unsigned int)(i >> 32) * 0x9E3779B9u);
        float u = (float)(x >> 8) * 5.9604644775390625e-8f;  // [0, 1)
        float v = __fmaf_rn(u, (float)high - (float)low, (float)low);
        return stored_bits((double)v, kind);
    }
    return stored_bits(fresh_value(key, i, dist, low, high, mean, stdev), kind);
}

__device__ __forceinline__ void store_bits(void* p, long long i, int itemsize, unsigned long long bits) {
    switch (itemsize) {
        case 1: ((unsigned char*)p)[i] = (unsigned char)bits; break;
        case 2: ((unsigned short*)p)[i] = (unsigned short)bits; break;
        case 4: ((unsigned int*)p)[i] = (unsigned int)bits; break;
        default: ((unsigned long long*)p)[i] = bits;
    }
}

// One slot per buffer of a case (inputs first, then outputs), built once on the host (buffers.py).
struct Slot {
    unsigned long long ptr;     // the working buffer
    unsigned long long src;     // role 1: the device copy of input set 0
    long long n;                // elements
    int kind, itemsize, role;   // role 0: fresh input, 1: copied input, 2: output
    int dist;                   // role 0: the distribution; role 2: 1 when scanned for poison
    double low, high, mean, stdev;
    unsigned long long poison;  // role 2: the poison bits of one element
    unsigned long long index;   // the input's position: part of its stream
};

__device__ __forceinline__ unsigned long long slot_key(unsigned long long seed, unsigned long long stream,
                                                       unsigned long long index) {
    return splitmix(splitmix(seed) ^ ((stream << 8) | index));
}

__host__ __device__ constexpr int item_of(int kind) {
    return kind == 1 || kind >= 10 ? 8 : kind == 0 || kind == 8 || kind == 9 ? 4 : kind == 4 || kind == 5 ? 1 : 2;
}

// The loops below are instantiated per element kind (-1: any kind, chosen per element, for the
// rarer integer inputs), so no switch runs per element on the common paths. With `check` they
// count the elements that differ from what staging writes; otherwise they write it.
template <int KIND>
__device__ unsigned long long fresh_loop(const Slot d, unsigned long long key, bool check) {
    long long step = (long long)gridDim.x * blockDim.x;
    unsigned long long differ = 0;
    int kind = KIND < 0 ? d.kind : KIND;
    int item = KIND < 0 ? d.itemsize : item_of(KIND);
    bool fast = d.dist == 0 && (KIND == 0 || KIND == 2 || KIND == 3);
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < d.n; i += step) {
        unsigned long long bits = fast ? fresh_bits(key, i, 0, kind, d.low, d.high, 0.0, 0.0)
                                       : fresh_bits(key, i, d.dist, kind, d.low, d.high, d.mean, d.stdev);
        if (check) differ += load_bits((const void*)d.ptr, i, item) != bits;
        else store_bits((void*)d.ptr, i, item, bits);
    }
    return differ;
}

template <int ITEM>
__device__ unsigned long long plain_loop(const Slot d, bool check) {
    long long step = (long long)gridDim.x * blockDim.x;
    unsigned long long count = 0;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < d.n; i += step) {
        if (d.role == 1) {
            unsigned long long want = load_bits((const void*)d.src, i, ITEM);
            if (check) count += load_bits((const void*)d.ptr, i, ITEM) != want;
            else store_bits((void*)d.ptr, i, ITEM, want);
        } else if (check) {
            count += load_bits((const void*)d.ptr, i, ITEM) == d.poison;
        } else {
            store_bits((void*)d.ptr, i, ITEM, d.poison);
        }
    }
    return count;
}

__device__ unsigned long long run_slot(const Slot d, unsigned long long key, bool check) {
    if (d.role == 0) {
        switch (d.kind) {
            case 0: return fresh_loop<0>(d, key, check);
            case 1: return fresh_loop<1>(d, key, check);
            case 2: return fresh_loop<2>(d, key, check);
            case 3: return fresh_loop<3>(d, key, check);
            default: return fresh_loop<-1>(d, key, check);
        }
    }
    switch (d.itemsize) {
        case 1: return plain_loop<1>(d, check);
        case 2: return plain_loop<2>(d, check);
        case 4: return plain_loop<4>(d, check);
        default: return plain_loop<8>(d, check);
    }
}

// Before a launch: draw every fresh input of stream `stream`, copy the others, poison the outputs.
extern "C" __global__ void cudaopt_stage(const Slot* slots, int count, unsigned long long seed,
                                         unsigned long long stream) {
    for (int s = 0; s < count; ++s) {
        const Slot d = slots[s];  // a copy: stores through d.ptr cannot alias it, so it stays in registers
        run_slot(d, slot_key(seed, stream, d.index), false);
    }
}

// The launch scan, after a launch: counters[0] += output elements still poisoned (scanned outputs only); with
// `inputs`, counters[1] += input elements that no longer hold what cudaopt_stage put there.
extern "C" __global__ void cudaopt_scan(const Slot* slots, int count, unsigned long long seed,
                                        unsigned long long stream, int inputs, unsigned long long* counters) {
    unsigned long long unwritten = 0, changed = 0;
    for (int s = 0; s < count; ++s) {
        const Slot d = slots[s];
        if ((d.role == 2 && !d.dist) || (d.role != 2 && !inputs)) continue;
        unsigned long long count = run_slot(d, slot_key(seed, stream, d.index), true);
        if (d.role == 2) unwritten += count;
        else changed += count;
    }
    for (int offset = 16; offset > 0; offset >>= 1) {
        unwritten += __shfl_down_sync(0xffffffffu, unwritten, offset);
        changed += __shfl_down_sync(0xffffffffu, changed, offset);
    }
    if ((threadIdx.x & 31) == 0) {
        if (unwritten) atomicAdd(&counters[0], unwritten);
        if (changed) atomicAdd(&counters[1], changed);
    }
}

// --- the digest of outputs set aside ---------------------------------------------------------
// sum over the range's 32-bit words of (word + 1) * splitmix(key + i), modulo 2^64, added into
// *digest (a trailing part word is read byte by byte). The key is a random number the host keeps:
// without it no kernel can change the range and leave the digest as it was.
extern "C" __global__ void cudaopt_digest(const unsigned char* p, long long nbytes, unsigned long long key,
                                          unsigned long long* digest) {
    long long words = nbytes / 4;
    const unsigned int* w = (const unsigned int*)p;
    unsigned long long sum = 0;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < words;
         i += (long long)gridDim.x * blockDim.x)
        sum += ((unsigned long long)w[i] + 1ull) * splitmix(key + (unsigned long long)i);
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        unsigned long long tail = 0;
        for (long long b = words * 4; b < nbytes; ++b)
            tail = (tail << 8) | p[b];
        if (nbytes % 4) sum += (tail + 1ull) * splitmix(key + (unsigned long long)words);
    }
    for (int offset = 16; offset > 0; offset >>= 1)
        sum += __shfl_down_sync(0xffffffffu, sum, offset);
    if ((threadIdx.x & 31) == 0 && sum) atomicAdd(digest, sum);
}

// --- the module's variables set back to their load image --------------------------------------
// Each run: `bytes` at `dst` copied from `src`, or zeroed where `src` is 0 (worker/entries.py).
// One launch, in the stream's order like every kernel: before each launch of a candidate.
struct CudaoptRun {
    unsigned long long dst, src, bytes;
};

extern "C" __global__ void cudaopt_restore(const CudaoptRun* runs, int count) {
    long long step = (long long)gridDim.x * blockDim.x;
    for (int r = 0; r < count; ++r) {
        const CudaoptRun d = runs[r];
        unsigned char* dst = (unsigned char*)d.dst;
        const unsigned char* src = (const unsigned char*)d.src;
        for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < (long long)d.bytes; i += step)
            dst[i] = src != nullptr ? src[i] : (unsigned char)0;
    }
}
