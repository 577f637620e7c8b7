"""Harness benchmarks (GPU): launch-latency floor, cuBLAS reference points, overhead, repeatability.

Run on the GPU machine: ``python benchmarks/bench_harness.py --out DIR``. Prints a table and
writes ``bench_harness.json`` to DIR. Figures go to docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from cudaopt.evaluate import evaluate_kernel
from cudaopt.pool.supervisor import Supervisor
from cudaopt.experiment import load_experiment
from cudaopt.wire.protocol import (
    CaseSpec,
    EvalRequest,
    KernelSpec,
    LaunchSpec,
    TimingProtocol,
)

EMPTY = (ROOT / "tests" / "kernels" / "empty.cu").read_text()


def empty_request(gate: bool, flush: bool = True) -> EvalRequest:
    case = CaseSpec(name="empty", role="performance", scalars={}, inputs={}, outputs={},
                    launch=LaunchSpec(grid=[1], block=[32]))
    return EvalRequest(
        signature='extern "C" __global__ void empty_kernel()',
        kernel=KernelSpec(source=EMPTY, entry="empty_kernel"),
        cases=[case], check=False, protocol=TimingProtocol(gate=gate, flush_l2=flush),
    )


def in_process_event_timing(samples: int = 100) -> dict[str, float]:
    """Event intervals outside the harness, to show where the floor of the protocol comes from.

    - one launch per synchronisation: host launch latency included (what naive timing reports);
    - every pair queued behind the gate, with and without the empty kernel between the events:
      the second is the cost of the event pair alone on this GPU.
    """
    from cuda.core import EventOptions, LaunchConfig, Program, ProgramOptions, launch

    from cudaopt.worker.gpu import Gpu

    gpu = Gpu(0)
    stream = gpu.stream
    kernel = Program(EMPTY, "c++", ProgramOptions(arch=gpu.arch)).compile("cubin").get_kernel("empty_kernel")
    opts = EventOptions(timing_enabled=True)
    cfg = LaunchConfig(grid=1, block=32)

    from cuda.bindings import driver

    _, function = driver.cuKernelGetFunction(kernel.handle)

    def raw_launch() -> None:
        driver.cuLaunchKernel(function, 1, 1, 1, 32, 1, 1, 0, stream.handle, 0, 0)

    def measure(with_kernel: bool, gated: bool, launcher=None) -> float:
        pairs = []
        for _chunk in range(0, samples + 10, 25):
            if gated:
                gpu.close_gate()
            for _ in range(25):
                start = stream.record(options=opts)
                if with_kernel:
                    launcher() if launcher else launch(stream, cfg, kernel)
                end = stream.record(options=opts)
                if not gated:
                    end.sync()
                pairs.append((start, end))
            if gated:
                gpu.open_gate()
            stream.sync()
        return statistics.median((e - s) * 1000.0 for s, e in pairs[10:])

    return {
        "naive_sync_each_launch": measure(True, gated=False),
        "gated_empty_kernel": measure(True, gated=True),
        "gated_empty_kernel_via_cuLaunchKernel": measure(True, gated=True, launcher=raw_launch),
        "gated_event_pair_without_kernel": measure(False, gated=True),
        "torch_gated_trivial_kernel": torch_trivial_kernel(samples),
    }


def torch_trivial_kernel(samples: int) -> float:
    """Another stack on the same GPU: torch's zero-cycle sleep kernel between events, queued behind a sleep."""
    import torch

    pairs = []
    for _chunk in range(0, samples + 10, 25):
        torch.cuda._sleep(50_000_000)
        for _ in range(25):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            torch.cuda._sleep(0)
            end.record()
            pairs.append((start, end))
        torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) * 1000.0 for s, e in pairs[10:])


def cublas_medians(cases, warmup: int = 10, iterations: int = 100, chunk: int = 25) -> dict[str, float]:
    """torch.matmul (cuBLAS SGEMM, TF32 off) with the harness's protocol.

    L2 flushed before each launch, CUDA events, 3 rotating input sets, and the samples queued
    behind a GPU-side sleep (torch.cuda._sleep) so host latency stays out, like the gate.
    """
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    flush = torch.empty(max(2 * l2, 16 << 20) // 4, dtype=torch.float32, device="cuda")
    out = {}
    for case in cases:
        m, n, k = (case.scalars[x] for x in ("m", "n", "k"))
        sets = [(torch.rand(m, k, device="cuda") * 2 - 1, torch.randn(k, n, device="cuda")) for _ in range(3)]
        c = torch.empty(m, n, device="cuda")
        for i in range(warmup):
            a, b = sets[i % 3]
            torch.matmul(a, b, out=c)
        times = []
        for first in range(0, iterations, chunk):
            torch.cuda._sleep(50_000_000)  # about 25 ms of GPU time: longer than queueing a chunk
            events = []
            for i in range(first, min(first + chunk, iterations)):
                a, b = sets[i % 3]
                flush.fill_(float(i))
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                torch.matmul(a, b, out=c)
                end.record()
                events.append((start, end))
            torch.cuda.synchronize()
            times.extend(s.elapsed_time(e) * 1000.0 for s, e in events)
        out[case.name] = statistics.median(times)
    return out


def kernel_time_us(result, name: str, proto: TimingProtocol) -> float:
    """Every launch of one case's kernel: checks, warm-up and timed, at its median."""
    case = result.case(name)
    launches = proto.input_sets + proto.warmup + proto.iterations
    return case.timing.median_us * launches if case.timing else 0.0


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, default=ROOT / "out")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    exp = load_experiment(ROOT / "examples" / "sgemm" / "experiment.json")
    initial = exp.initial_kernel_path.read_text()
    proto = exp.protocol()
    report: dict = {}

    t0 = time.perf_counter()
    sup = Supervisor(devices=[0])
    sup.device_info()
    report["worker_start_s"] = round(time.perf_counter() - t0, 3)
    with sup:
        # 1. the launch-latency floor
        variants = {}
        for gate in (True, False):
            for flush in (True, False):
                t = sup.evaluate(empty_request(gate, flush)).cases[0].timing
                variants[f"gate={gate},flush={flush}"] = {"median": t.median_us, "p10": t.p10_us, "p90": t.p90_us}
        report["empty_kernel_us"] = {"harness": variants, "outside_harness": in_process_event_timing()}

        # 2./3. the example's kernels, cold then warm; the overhead excludes the 4096 kernel's launches
        # (and the vendor baseline is left out: its launches would count as overhead)
        t0 = time.perf_counter()
        cold = evaluate_kernel(exp, initial, sup, time_reference=False, time_vendor=False).candidate
        cold_wall = time.perf_counter() - t0
        t0 = time.perf_counter()
        warm_eval = evaluate_kernel(exp, initial, sup, time_reference=True, time_vendor=False)
        warm = warm_eval.candidate
        warm_wall = time.perf_counter() - t0 - (warm_eval.reference_timing.wall_s if warm_eval.reference_timing else 0)
        for label, result, wall in (("cold", cold, cold_wall), ("warm", warm, warm_wall)):
            assert result.ok, result.reason
            big = kernel_time_us(result, "square-4096", proto) / 1e6
            all_kernel = sum(kernel_time_us(result, c.name, proto) for c in result.cases) / 1e6
            report[f"overhead_{label}"] = {
                "wall_s": round(wall, 3),
                "kernel_4096_launches_s": round(big, 3),
                "wall_excluding_4096_kernel_s": round(wall - big, 3),
                "not_kernel_time_share": round(1 - all_kernel / wall, 3),
                "phases": {c.name: c.phases for c in result.cases},
            }

        # 4. repeatability: the same kernel twice in a row
        again = evaluate_kernel(exp, initial, sup, time_reference=False, time_vendor=False).candidate
        rep = {}
        for case in warm.cases:
            if case.timing is None:
                continue
            other = again.case(case.name).timing.median_us
            rep[case.name] = {"first_us": case.timing.median_us, "second_us": other,
                              "diff_pct": round(100 * abs(other - case.timing.median_us) / case.timing.median_us, 2)}
        report["repeatability"] = rep

        # cuBLAS beside the example's kernels
        perf = exp.cases({"performance"})
        cublas = cublas_medians(perf)
        ref = warm_eval.reference_timing
        report["sgemm_us"] = {
            c.name: {
                "initial": warm.case(c.name).timing.median_us,
                "reference": ref.case(c.name).timing.median_us if ref else None,
                "cublas_fp32": cublas[c.name],
                "initial_tflops": warm.case(c.name).roofline.achieved_tflops,
            }
            for c in perf
        }
    report["device"] = warm.device.to_data()
    (args.out / "bench_harness.json").write_text(json.dumps(report, indent=2))
    print(json.dumps(report, indent=2))
    print("\nempty kernel, median us:")
    for name, row in report["empty_kernel_us"]["harness"].items():
        print(f"  harness {name:<24}{row['median']:8.2f}")
    for name, value in report["empty_kernel_us"]["outside_harness"].items():
        print(f"  {name:<32}{value:8.2f}")
    for label in ("cold", "warm"):
        o = report[f"overhead_{label}"]
        print(f"overhead ({label}): wall {o['wall_s']} s, excluding the 4096 kernel {o['wall_excluding_4096_kernel_s']} s")
    print(f"{'case':<20}{'initial us':>12}{'reference us':>14}{'cuBLAS us':>12}{'repeat diff %':>15}")
    for name, row in report["sgemm_us"].items():
        print(f"{name:<20}{row['initial']:>12.2f}{row['reference'] or 0:>14.2f}{row['cublas_fp32']:>12.2f}"
              f"{report['repeatability'][name]['diff_pct']:>15.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
