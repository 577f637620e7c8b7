"""The torch export on the GPU: its kernel time beside the harness's, and its host overhead per call (GPU).

Run on the GPU machine: ``python3 benchmarks/bench_export.py --out DIR``. The kernel is the example's
``tunable.cu`` with the H200 winner's values baked in (as bench_guard.py), exported with
``cudaopt export --to torch`` (the flag form), on the 4096³ case.

1. The harness's figure: ``cudaopt evaluate``'s protocol (10 warm-up, 100 timed launches with CUDA
   events, the L2 flushed before each, outside the events) through a worker, on ``square-4096``.
2. The exported op, timed the same way in this process: CUDA events around each call of
   ``matmul_f32(a, b, out=c)`` (the mutating op: no allocation inside the interval), the L2 flushed
   by writing a buffer twice its size before each; rounds of both alternate ``--rounds`` times.
   Target: the op's median within 3% of the harness's.
3. Host overhead: the wall time per call of ``--calls`` back-to-back calls on a 16³ problem (the
   one-block tier: the GPU never holds the host back) of the op, and of a bare ``cuLaunchKernel`` of
   the same loaded function with its parameters built once. Target: under 5 µs more than the bare launch.

Writes ``bench_export.json`` to DIR and prints the figures. They go to docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import ctypes
import importlib.util
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from cudaopt.evaluate import evaluate_kernel  # noqa: E402
from cudaopt.pool.supervisor import Supervisor  # noqa: E402
from cudaopt.experiment import load_experiment  # noqa: E402
from cudaopt.exporter import from_flags, write  # noqa: E402
from cudaopt.record.bake import bake, bake_launch  # noqa: E402

CONFIG = ROOT / "examples" / "sgemm" / "experiment.json"
TUNED = {"BM": 128, "BN": 256, "BK": 8, "TM": 8, "TN": 16, "MINB": 1, "ST": 16, "SK": 64}
CASE = "square-4096"


def export(work: Path):
    experiment = load_experiment(CONFIG)
    (work / "best.cu").write_text(bake(experiment.tuning.source, TUNED))
    launch = bake_launch(experiment.tuning.launch.to_data(), TUNED)
    (work / "launch.json").write_text(json.dumps(launch))
    src = from_flags(experiment, kernel=work / "best.cu", entry=None, launch=str(work / "launch.json"),
                     unverified=True)
    (path,) = write(src, "torch", work / "out", force=True)
    spec = importlib.util.spec_from_file_location("bench_matmul_f32", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return experiment, src, module


def harness_median(experiment, src, protocol) -> float:
    only = experiment.case_specs
    experiment.case_specs = [c for c in only if c.name == CASE]
    try:
        with Supervisor(devices=[0]) as pool:
            result = evaluate_kernel(experiment, src.source, pool, launch=src.launch, protocol=protocol,
                                     time_reference=False, time_vendor=False).candidate
    finally:
        experiment.case_specs = only
    case = result.case(CASE)
    assert case.status == "ok", f"{case.status}: {case.reason}"
    return case.timing.median_us


def op_median(module, torch, warmup: int, iterations: int) -> float:
    a, b = torch.randn(4096, 4096, device="cuda"), torch.randn(4096, 4096, device="cuda")
    c = torch.empty(4096, 4096, device="cuda")
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    flush = torch.empty(2 * l2 // 4 + 1, device="cuda")
    for _ in range(warmup):
        module.matmul_f32(a, b, out=c)
    times = []
    for _ in range(iterations):
        flush.fill_(1.0)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        module.matmul_f32(a, b, out=c)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1000.0)
    return statistics.median(times)


def host_overhead(module, torch, calls: int) -> dict:
    from cuda.bindings import driver

    a, b, c = (torch.randn(16, 16, device="cuda") for _ in range(3))
    module.matmul_f32(a, b, out=c)
    torch.cuda.synchronize()
    state = module.loaded(0)
    entry, grid, block, shared = module.launch_config(16, 16, 16, state.num_sms)
    func = state.function(entry, shared)
    values = [ctypes.c_void_p(t.data_ptr()) for t in (a, b, c)] + [ctypes.c_int32(16)] * 3
    params = (ctypes.c_void_p * 6)(*[ctypes.addressof(v) for v in values])
    address, stream = ctypes.addressof(params), torch.cuda.current_stream().cuda_stream

    def bare():
        driver.cuLaunchKernel(func, *grid, *block, shared, stream, address, 0)

    def op():
        module.matmul_f32(a, b, out=c)

    def torch_op():
        torch.ops.cudaopt.matmul_f32_out(a, b, c, 16, 16, 16)

    out = {}
    for name, fn in (("bare_cuLaunchKernel", bare), ("op_out", op), ("torch.ops_out", torch_op)):
        rounds = []
        for _ in range(5):
            torch.cuda.synchronize()
            start = time.perf_counter()
            for _ in range(calls):
                fn()
            rounds.append((time.perf_counter() - start) / calls * 1e6)
            torch.cuda.synchronize()
        out[name] = round(min(rounds), 3)
    out["overhead_us"] = round(out["op_out"] - out["bare_cuLaunchKernel"], 3)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("."))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--calls", type=int, default=20000)
    args = parser.parse_args()
    import torch

    with tempfile.TemporaryDirectory() as tmp:
        experiment, src, module = export(Path(tmp))
        protocol = experiment.protocol()
        rows = []
        for _ in range(args.rounds):
            rows.append({"harness_us": round(harness_median(experiment, src, protocol), 2),
                         "export_us": round(op_median(module, torch, protocol.warmup, protocol.iterations), 2)})
            print(rows[-1], flush=True)
        harness = statistics.median(r["harness_us"] for r in rows)
        exported = statistics.median(r["export_us"] for r in rows)
        host = host_overhead(module, torch, args.calls)
    result = {"gpu": torch.cuda.get_device_name(0), "case": CASE, "tuned": TUNED, "rounds": rows,
              "harness_median_us": harness, "export_median_us": exported,
              "export_over_harness": round(exported / harness, 4), "within_3pct": abs(exported / harness - 1) <= 0.03,
              "host_us_per_call": host, "overhead_under_5us": host["overhead_us"] < 5.0}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "bench_export.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
