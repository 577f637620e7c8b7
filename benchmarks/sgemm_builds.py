"""Several builds of the SGEMM example's tunable.cu side by side, kernel by kernel, beside cuBLAS.

Each build is compiled with CuPy's NVRTC at the example's winning configuration; each launch is
checked against cuBLAS (``err``: max |C - cuBLAS| / max |cuBLAS|) and timed by CUDA events (the
median of 20 launches, L2 not flushed), the builds one after another on the same operands, cuBLAS
last. Used to tell kernel revisions apart quickly where ``sgemm_kernel_matrix.py --ref`` would
take the whole harness (docs/benchmarks.md, "The staged main loop's loads").

Run on a GPU machine: ``python3 benchmarks/sgemm_builds.py FILE[,FILE..] SHAPES [ROUNDS]`` with
SHAPES comma-separated: ``r`` (splitk2r at 8192x128x4096), ``r2`` (128x8192x4096), ``L`` (the
large tier at 4096^3), or ``TIER:MxNxK`` with TIER ``L``, ``r`` (splitk2r), ``M`` (medium), ``S``
(small), ``k2``/``k4``/``k8`` (splitk2/4/8) or ``k8s``; and ``vMxNxK`` launches cuBLAS alone (for ncu).
CONFIG (optional, after ROUNDS): the tunables to build with, ``BM=128,BN=256,TN=16,MINB=1``, over
the defaults below.
"""
import pathlib
import sys

import cupy as cp
import numpy as np

CONFIG = dict(BM=128, BN=128, BK=8, TM=8, TN=8, MINB=2, ST=16, SK=64)  # the main job's winner
SPLITK2R_SMEM = 66560  # enough for splitk2r with 8- or 16-deep slices


def main() -> None:
    sources = sys.argv[1].split(",")
    shapes = sys.argv[2].split(",")
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 1
    if len(sys.argv) > 4:
        CONFIG.update((key, int(value)) for key, value in (item.split("=") for item in sys.argv[4].split(",")))
    options = ("-std=c++17",) + tuple(f"-D{k}={v}" for k, v in CONFIG.items())
    modules = [cp.RawModule(code=pathlib.Path(s).read_text(), options=options, backend="nvrtc") for s in sources]
    operands = {}

    def mats(m, n, k):
        if (m, n, k) not in operands:
            rng = cp.random.default_rng(0)
            operands[(m, n, k)] = (rng.standard_normal((m, k), dtype=cp.float32),
                                   rng.standard_normal((k, n), dtype=cp.float32), cp.empty((m, n), dtype=cp.float32))
        return operands[(m, n, k)]

    def timed(fn, reps=20):
        start, end = cp.cuda.Event(), cp.cuda.Event()
        times = []
        for _ in range(reps):
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(cp.cuda.get_elapsed_time(start, end) * 1000)
        return float(np.median(times))

    def run(entry, m, n, k, grid, smem=0, threads=256):
        a, b, c = mats(m, n, k)
        args = (a, b, c, np.int32(m), np.int32(n), np.int32(k))
        cells = []
        for source, module in zip(sources, modules):
            kernel = module.get_function(entry)
            if smem > 48 * 1024:
                kernel.max_dynamic_shared_size_bytes = smem
            c.fill(float("nan"))

            def launch():
                kernel(grid, (threads,), args, shared_mem=smem)

            launch()
            launch()
            ref = a @ b
            err = float(cp.max(cp.abs(c - ref)) / cp.max(cp.abs(ref)))
            cells.append(f"{pathlib.Path(source).name} {timed(launch):.1f} us err {err:.1e}")
        print(f"{entry} {m}x{n}x{k}: " + " | ".join(cells) + f" | cuBLAS {timed(lambda: a @ b):.1f}", flush=True)

    def cdiv(x, y):
        return (x + y - 1) // y

    # tier: (entry, tile n, tile m, grid z, threads, dynamic shared bytes) as experiment.json launches it
    large = ("matmul_f32", CONFIG["BN"], CONFIG["BM"], 1, CONFIG["BM"] // CONFIG["TM"] * (CONFIG["BN"] // CONFIG["TN"]), 0)
    tiers = {"L": large, "r": ("matmul_f32_splitk2r", 128, 128, 2, 256, SPLITK2R_SMEM),
             "M": ("matmul_f32_medium", 64, 64, 1, 128, 0), "S": ("matmul_f32_small", 32, 32, 1, 64, 0),
             "k2": ("matmul_f32_splitk2", 64, 64, 2, 128, 0), "k4": ("matmul_f32_splitk4", 64, 64, 4, 128, 0),
             "k8": ("matmul_f32_splitk8", 64, 64, 8, 128, 0), "k8s": ("matmul_f32_splitk8s", 32, 32, 8, 64, 0)}
    for _ in range(rounds):
        for shape in shapes:
            shape = {"r": "r:8192x128x4096", "r2": "r:128x8192x4096", "L": "L:4096x4096x4096"}.get(shape, shape)
            tier, _, dims = shape.partition(":")
            if tier in tiers and dims:
                m, n, k = map(int, dims.split("x"))
                entry, tn, tm, z, threads, smem = tiers[tier]
                run(entry, m, n, k, (cdiv(n, tn), cdiv(m, tm), z), smem, threads)
            elif shape.startswith("v"):
                a, b, _ = mats(*map(int, shape[1:].split("x")))
                for _ in range(3):
                    a @ b
                cp.cuda.runtime.deviceSynchronize()
            else:
                raise SystemExit(f"unknown shape {shape!r}: r, r2, L, TIER:MxNxK (TIER one of {', '.join(tiers)}) "
                                 "or vMxNxK")

if __name__ == "__main__":
    main()
