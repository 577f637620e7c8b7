"""The time a reference costs an evaluation: NumPy (on the CPU) against PyTorch (on the GPU), 4096³.

Run on the GPU machine: ``python benchmarks/bench_torch_reference.py --out DIR``. The example's
square-4096 case is evaluated with its initial kernel against two references of the same
function, both in float64 as docs/experiments.md recommends: ``a.astype(np.float64) @ b...``
and ``torch.matmul(a.double(), b.double())``. Each gets a fresh worker and two evaluations:

- the first computes the answers of the three input sets (``reference_s``: for torch, its import
  and cuBLAS's start too) and one more for the hidden checked launches (in ``timed_checks_s``);
- the second finds the input sets' answers kept in the worker, so its ``timed_checks_s`` is the
  steady cost a reference adds to every evaluation of an optimisation run.

Prints a table and writes ``bench_torch_reference.json`` to DIR. Figures go to docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from cudaopt.pool.supervisor import Supervisor
from cudaopt.experiment import load_experiment
from cudaopt.wire.protocol import TimingProtocol

SGEMM = ROOT / "examples" / "sgemm"
REFERENCES = {
    "numpy": "import numpy as np\n\n\ndef matmul_f32(a, b, m, n, k):\n"
             "    return a.astype(np.float64) @ b.astype(np.float64)\n",
    "torch": "import torch\n\n\ndef matmul_f32(a, b, *, m, n, k):\n    return torch.matmul(a.double(), b.double())\n",
}
CASE = "square-4096"
PROTOCOL = TimingProtocol(warmup=2, iterations=10)


def measure(kind: str, folder: Path) -> dict:
    ref = folder / f"reference_{kind}.py"
    ref.write_text(REFERENCES[kind])
    signature = json.loads((SGEMM / "experiment.json").read_text())["signature"]
    exp = load_experiment(signature=signature, reference=ref, input_cases=SGEMM / "input_cases.json",
                          initial_kernel=SGEMM / "initial.cu")
    assert exp.reference_kind == ("torch" if kind == "torch" else "py")
    request = exp.request((SGEMM / "initial.cu").read_text(), protocol=PROTOCOL, roles={"performance"})
    request.cases = [c for c in request.cases if c.name == CASE]
    out = {}
    with Supervisor(devices=[0], log_dir=folder) as supervisor:
        for evaluation in ("first", "second"):
            start = time.perf_counter()
            result = supervisor.evaluate(request)
            if result.status != "ok":
                raise SystemExit(f"{kind} reference, {evaluation} evaluation: {result.status}: {result.reason}")
            (case,) = result.cases
            out[evaluation] = {"wall_s": round(time.perf_counter() - start, 3), **case.phases,
                               "kernel_median_us": case.timing.median_us}
        out["device"] = result.device.name
    return out


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, default=ROOT / "out")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    report = {"case": CASE, "protocol": PROTOCOL.to_data()}
    for kind in REFERENCES:
        report[kind] = measure(kind, args.out)
    ratio = lambda step, evaluation: round(report["numpy"][evaluation][step] / report["torch"][evaluation][step], 1)
    report["numpy_over_torch"] = {"first_reference_s": ratio("reference_s", "first"),
                                  "second_timed_checks_s": ratio("timed_checks_s", "second")}
    (args.out / "bench_torch_reference.json").write_text(json.dumps(report, indent=2))
    print(json.dumps(report, indent=2))
    print(f"\n{CASE}, initial.cu, {report['numpy']['device']}")
    print(f"{'reference':<10}{'evaluation':<12}{'reference_s':>12}{'timed_checks_s':>16}{'wall_s':>9}")
    for kind in REFERENCES:
        for evaluation in ("first", "second"):
            row = report[kind][evaluation]
            print(f"{kind:<10}{evaluation:<12}{row['reference_s']:>12.3f}{row['timed_checks_s']:>16.3f}"
                  f"{row['wall_s']:>9.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
