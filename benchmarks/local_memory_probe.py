"""Whether a kernel finds, in its local-memory frame, what its own previous launch left there,
and whether a wipe kernel launched in between reaches it, on the GPU at hand.

    python benchmarks/local_memory_probe.py
"""

from __future__ import annotations

import io

import numpy as np
from cuda.bindings import driver
from cuda.core import Device, LaunchConfig, Program, ProgramOptions, launch

SOURCE = r"""
#define MARK 0x600DF00Du
template <int WORDS>
__device__ void memo(unsigned long long* found) {
    volatile unsigned int frame[WORDS];
    unsigned long long n = 0;
    for (int i = 0; i < WORDS; ++i) n += frame[i] == MARK;
    atomicAdd(found, n);
    for (int i = 0; i < WORDS; ++i) frame[i] = MARK;
}
template <int WORDS>
__device__ void wipe() {
    volatile unsigned int frame[WORDS];
    for (int i = 0; i < WORDS; ++i) frame[i] = 0u;
}
extern "C" __global__ void __launch_bounds__(1024, 2) memo256(unsigned long long* f) { memo<256>(f); }
extern "C" __global__ void __launch_bounds__(1024, 2) memo258(unsigned long long* f) { memo<258>(f); }
extern "C" __global__ void __launch_bounds__(1024, 2) memo1024(unsigned long long* f) { memo<1024>(f); }
extern "C" __global__ void __launch_bounds__(1024, 2) wipe256() { wipe<256>(); }
extern "C" __global__ void __launch_bounds__(1024, 2) wipe512() { wipe<512>(); }
extern "C" __global__ void __launch_bounds__(1024, 2) wipe1024() { wipe<1024>(); }
extern "C" __global__ void __launch_bounds__(1024, 2) wipe2048() { wipe<2048>(); }
"""
MEMOS = ("memo256", "memo258", "memo1024")
WIPES = ("wipe256", "wipe512", "wipe1024", "wipe2048")


def main() -> None:
    dev = Device(0)
    dev.set_current()
    stream = dev.create_stream()
    sms = dev.properties.multiprocessor_count
    mod = Program(SOURCE, "c++", ProgramOptions(arch=f"sm_{dev.arch}", std="c++17")).compile("cubin", logs=io.StringIO())
    k = {n: mod.get_kernel(n) for n in MEMOS + WIPES}
    buf = dev.allocate(8, stream=stream)
    ptr = int(buf.handle)
    cfg = LaunchConfig(grid=2 * sms, block=1024)

    def memo(name: str) -> int:
        driver.cuMemsetD8Async(ptr, 0, 8, stream.handle)
        launch(stream, cfg, k[name], np.uint64(ptr))
        stream.sync()
        out = np.zeros(1, dtype=np.uint64)
        driver.cuMemcpyDtoH(out.ctypes.data, ptr, 8)
        return int(out[0])

    for limit in (1024, 8192):
        driver.cuCtxSetLimit(driver.CUlimit.CU_LIMIT_STACK_SIZE, limit)
        print(f"stack limit {driver.cuCtxGetLimit(driver.CUlimit.CU_LIMIT_STACK_SIZE)[1]}")
        for name in MEMOS:
            words = int(name[4:])
            total = 2 * sms * 1024 * words
            memo(name)
            again = memo(name)
            row = [f"{name}: again {again / total:.2f}"]
            for wipe in WIPES:
                memo(name)
                launch(stream, LaunchConfig(grid=2 * sms, block=1024), k[wipe])
                row.append(f"after {wipe} {memo(name) / total:.2f}")
            print("  " + ", ".join(row))


if __name__ == "__main__":
    main()
