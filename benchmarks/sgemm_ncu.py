"""cuBLAS and kernels of the SGEMM example under Nsight Compute, on the shapes where they differ most.

For each shape (MxNxK) this launches cuBLAS (cupy's matmul, FP32) and each named form of
``sgemm_kernel_matrix.py`` once, checks each form's output against cuBLAS's, and, run under ``ncu``
with the metrics of ``METRICS``, shows what each kernel is: its grid, block, registers, shared
memory and cluster, how busy the SMs' FMA pipes and issue slots were, how evenly the SMs were used
(cycles active, least and most), and the warp stall reasons. It is how cuBLAS's split-K (a
256 x 128 tile per block and a separate reduction kernel) was read. Run: ``ncu --metrics
$(python benchmarks/sgemm_ncu.py --metrics) --csv python benchmarks/sgemm_ncu.py FORMS SHAPE..
> ncu.csv`` then ``python benchmarks/sgemm_ncu.py --table ncu.csv``.
"""

from __future__ import annotations

import argparse
import collections
import csv
import sys
import tempfile
from pathlib import Path

METRICS = [
    "gpu__time_duration.sum", "launch__grid_size", "launch__block_size", "launch__registers_per_thread",
    "launch__shared_mem_per_block_dynamic", "launch__shared_mem_per_block_static", "launch__cluster_dim_z",
    "sm__warps_active.avg.pct_of_peak_sustained_active", "sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active",
    "sm__cycles_active.min", "sm__cycles_active.max", "smsp__issue_active.avg.pct_of_peak_sustained_active",
    "lts__throughput.avg.pct_of_peak_sustained_elapsed", "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",
] + [f"smsp__average_warps_issue_stalled_{why}_per_issue_active.ratio" for why in
     ("short_scoreboard", "barrier", "long_scoreboard", "math_pipe_throttle", "not_selected", "wait",
      "mio_throttle", "dispatch_stall")]


def launch(names: list[str], shapes: list[str]) -> None:
    import cupy as cp
    import numpy as np

    sys.path.insert(0, str(Path(__file__).parent))
    import sgemm_kernel_matrix as matrix
    from cudaopt.experiment import load_experiment
    from cudaopt.compilekit.nvrtc_build import build
    from cudaopt.compilekit.target import DEFAULT_ARCH
    from cudaopt.wire.protocol import KernelSpec

    exp = load_experiment(matrix.ROOT / "examples/sgemm/experiment.json")
    forms = [f for f in matrix.FORMS if f.name in names]
    source = exp.tuning.source + "\n" + "\n".join(f.source() for f in forms)
    cubin, _ = build(KernelSpec(source=source, entry="matmul_f32", defines=exp.tuning.space.configurations()[-1]),
                     DEFAULT_ARCH, "cubin")
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "sgemm.cubin"
        path.write_bytes(cubin)
        module = cp.RawModule(path=str(path))
        for shape in shapes:
            m, n, k = map(int, shape.split("x"))
            a, b = cp.random.rand(m, k, dtype=cp.float32), cp.random.rand(k, n, dtype=cp.float32)
            want = a @ b  # cuBLAS
            for form in forms:
                kernel = module.get_function(form.entry or f"matmul_f32_{form.name}")
                shared = form.smem_bytes if form.dynamic else 0
                if shared:
                    kernel.max_dynamic_shared_size_bytes = shared
                c = cp.zeros((m, n), cp.float32)
                bm, bn = form.tile[:2]
                grid = (-(-n // bn), -(-m // bm), form.split)
                kernel(grid, (form.threads,), (a, b, c, np.int32(m), np.int32(n), np.int32(k)), shared_mem=shared)
                error = float(cp.abs(c - want).max() / cp.abs(want).max())
                print(f"{shape} {form.name}: largest difference from cuBLAS {error:.1e} "
                      "(relative to its largest output)")


def table(path: Path) -> None:
    header, kernels = None, collections.OrderedDict()
    for row in csv.reader(path.open()):
        if row and row[0] == "ID":
            header = row
        elif header and len(row) == len(header):
            record = dict(zip(header, row))
            kernels.setdefault((int(record["ID"]), record["Kernel Name"][:80]), {})[record["Metric Name"]] = \
                record["Metric Value"]
    for (_, name), values in kernels.items():
        if name.startswith(("cupy_", "void cub::")) or "curand" in name:
            continue  # the inputs and the check
        short = {key.replace("smsp__average_warps_issue_stalled_", "stall_").replace("_per_issue_active.ratio", "")
                 .replace(".pct_of_peak_sustained", "%"): value for key, value in values.items()}
        print(name)
        print("   ", " | ".join(f"{key}={value}" for key, value in short.items()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("forms", nargs="?", default="", help="comma-separated form names of sgemm_kernel_matrix.py")
    parser.add_argument("shapes", nargs="*", help="MxNxK")
    parser.add_argument("--metrics", action="store_true", help="print the metrics for ncu --metrics and exit")
    parser.add_argument("--table", type=Path, help="print ncu's --csv output as one block per kernel")
    args = parser.parse_args()
    if args.metrics:
        print(",".join(METRICS))
    elif args.table:
        table(args.table)
    else:
        launch(args.forms.split(","), args.shapes)


if __name__ == "__main__":
    main()
