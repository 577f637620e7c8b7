"""Several builds of the SGEMM example's tunable.cu side by side on the staged tiers' kernels, beside cuBLAS.

Each build is compiled with CuPy's NVRTC at the example's winning configuration; each launch is
checked against cuBLAS (``err``: max |C - cuBLAS| / max |cuBLAS|) and timed by CUDA events (the
median of 20 launches, L2 not flushed), the builds one after another on the same operands, cuBLAS
last. Used to tell kernel revisions apart quickly where ``sgemm_kernel_matrix.py --ref`` would
take the whole harness (docs/benchmarks.md, sixteenth session).

Run on a GPU machine: ``python3 benchmarks/sgemm_builds.py FILE[,FILE..] SHAPES [ROUNDS]`` with
SHAPES comma-separated: ``r`` (splitk2r at 8192x128x4096), ``r2`` (128x8192x4096), ``L`` (the
large tier at 4096^3), ``L:MxNxK`` or ``r:MxNxK``; and ``vMxNxK`` launches cuBLAS alone (for ncu).
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

    def run(entry, m, n, k, grid, smem=0):
        a, b, c = mats(m, n, k)
        args = (a, b, c, np.int32(m), np.int32(n), np.int32(k))
        cells = []
        for source, module in zip(sources, modules):
            kernel = module.get_function(entry)
            if smem > 48 * 1024:
                kernel.max_dynamic_shared_size_bytes = smem
            c.fill(float("nan"))

            def launch():
                kernel(grid, (256,), args, shared_mem=smem)

            launch()
            launch()
            ref = a @ b
            err = float(cp.max(cp.abs(c - ref)) / cp.max(cp.abs(ref)))
            cells.append(f"{pathlib.Path(source).name} {timed(launch):.1f} us err {err:.1e}")
        print(f"{entry} {m}x{n}x{k}: " + " | ".join(cells) + f" | cuBLAS {timed(lambda: a @ b):.1f}", flush=True)

    def cdiv(x, y):
        return (x + y - 1) // y

    for _ in range(rounds):
        for shape in shapes:
            if shape in ("r", "r2", "L"):
                shape = {"r": "r:8192x128x4096", "r2": "r:128x8192x4096", "L": "L:4096x4096x4096"}[shape]
            if shape.startswith(("L:", "r:")):
                m, n, k = map(int, shape[2:].split("x"))
                if shape[0] == "L":
                    run("matmul_f32", m, n, k, (cdiv(n, 128), cdiv(m, 128)))
                else:
                    run("matmul_f32_splitk2r", m, n, k, (cdiv(n, 128), cdiv(m, 128), 2), SPLITK2R_SMEM)
            elif shape.startswith("v"):
                a, b, _ = mats(*map(int, shape[1:].split("x")))
                for _ in range(3):
                    a @ b
                cp.cuda.runtime.deviceSynchronize()
            else:
                raise SystemExit(f"unknown shape {shape!r}: r, r2, L, L:MxNxK, r:MxNxK or vMxNxK")


if __name__ == "__main__":
    main()
