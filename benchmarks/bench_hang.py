"""What a hanging candidate costs with timeouts scaled from the baseline (GPU).

Run on the GPU machine: ``python benchmarks/bench_hang.py --out DIR``. On the SGEMM example it
evaluates the initial kernel (the baseline, as a run's first attempt does), derives the scaled
limits from it with the experiment's policy, evaluates a kernel that spins forever on every case
of 256³ or more, then the initial kernel again in the fresh worker. A hang costs its limit, the
worker's restart and the references recomputed by the next evaluation; all three are reported.
Then the same hang where nothing has been measured yet, as ``cudaopt evaluate`` meets it: the
experiment's fixed limits, whose launch phase is held to a multiple of the reference's time on
the case (``evaluate_hang_s``), and the whole command, worker start included, in a process of
its own (``evaluate_cli_s``, its exit status and last line). Writes ``bench_hang.json`` to DIR.
Figures go to docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from cudaopt.pool.supervisor import Supervisor
from cudaopt.experiment import load_experiment

ROLES = {"correctness", "performance"}


def timed(supervisor: Supervisor, request) -> tuple[float, object]:
    start = time.monotonic()
    result = supervisor.evaluate(request)
    return round(time.monotonic() - start, 3), result


def evaluate_cli(kernel: Path) -> dict:
    """``cudaopt evaluate --kernel KERNEL`` on the SGEMM example, timed from the outside."""
    command = [sys.executable, "-m", "cudaopt", "evaluate", "--config", str(ROOT / "examples" / "sgemm" /
               "experiment.json"), "--kernel", str(kernel), "--no-time-reference", "--iterations", "10"]
    start = time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(ROOT / "src"), *filter(None, [os.environ.get("PYTHONPATH")])])})
    lines = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    return {"evaluate_cli_s": round(time.monotonic() - start, 3), "evaluate_cli_exit": done.returncode,
            "evaluate_cli_last_line": lines[-1] if lines else ""}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("."))
    args = parser.parse_args()
    exp = load_experiment(ROOT / "examples" / "sgemm" / "experiment.json")
    initial = exp.initial_kernel_path.read_text()
    spin = (ROOT / "tests" / "kernels" / "spin_forever.cu").read_text()
    figures: dict = {"policy": exp.timeouts.to_data()}
    with Supervisor(devices=[0], log_dir=args.out) as sup:
        start = time.monotonic()
        sup.device_info()
        figures["worker_start_s"] = round(time.monotonic() - start, 3)
        figures["baseline_first_s"], baseline = timed(sup, exp.request(initial, roles=ROLES, vendor=True))
        assert baseline.status == "ok", baseline.reason
        timeouts = exp.timeouts.scaled(baseline.cases)
        figures["limits_s"] = {name: limits.to_data() for name, limits in timeouts.cases.items()}
        figures["initial_warm_s"], warm = timed(sup, exp.request(initial, roles=ROLES, timeouts=timeouts))
        assert warm.status == "ok", warm.reason
        figures["hang_s"], hang = timed(sup, exp.request(spin, roles=ROLES, timeouts=timeouts))
        figures["hang_status"], figures["hang_reason"] = hang.status, hang.reason
        figures["after_hang_s"], after = timed(sup, exp.request(initial, roles=ROLES, timeouts=timeouts))
        assert after.status == "ok", after.reason
        figures["evaluate_hang_s"], cold = timed(sup, exp.request(spin, roles=ROLES, vendor=True))
        figures["evaluate_hang_status"], figures["evaluate_hang_reason"] = cold.status, cold.reason
    figures.update(evaluate_cli(ROOT / "tests" / "kernels" / "spin_forever.cu"))
    hung_case = next(c.name for c in hang.cases if c.status == "timeout")
    figures["hang_cost_s"] = round(figures["hang_s"] + figures["after_hang_s"] - figures["initial_warm_s"], 3)
    figures["fixed_hang_cost_at_least_s"] = exp.timeouts.check_s
    (args.out / "bench_hang.json").write_text(json.dumps(figures, indent=2))
    print(json.dumps(figures, indent=2))
    print(f"\nscaled check limit of {hung_case}: {timeouts.limit('check', hung_case):g} s "
          f"(fixed: {exp.timeouts.check_s:g} s)")
    print(f"with nothing measured yet: {figures['evaluate_hang_s']:.2f} s ({cold.status}); the whole "
          f"`cudaopt evaluate`: {figures['evaluate_cli_s']:.2f} s, exit {figures['evaluate_cli_exit']}")
    print(f"hanging candidate: {figures['hang_s']:.2f} s ({hang.status}); next evaluation "
          f"{figures['after_hang_s']:.2f} s against {figures['initial_warm_s']:.2f} s warm; "
          f"a hang costs {figures['hang_cost_s']:.2f} s in all")


if __name__ == "__main__":
    main()
