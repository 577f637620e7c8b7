"""Host input sets of a large case: the seconds ``generate`` takes to draw them.

A worker draws a case's input sets once and keeps them (worker/case_data.py), so this is the
first candidate's wait on a large case: KernelBench's 4096 x 393216 softmax is two draws of 1.6 G
values and a near duplicate. Times ``generate`` for that case with ``--rows`` rows (the columns
are KernelBench's), the median of ``--repeat`` runs, on this machine's CPUs (no GPU involved).
Run: ``python benchmarks/bench_inputs.py --rows 512 [--out DIR]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

from cudaopt.experiment import load_experiment
from cudaopt.worker.inputs import generate

ROOT = Path(__file__).resolve().parents[1]
CASE = "kernelbench-4096x393216"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=512)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    experiment = load_experiment(ROOT / "examples" / "softmax" / "experiment.json")
    case = next(c for c in experiment.case_specs if c.name == CASE)
    case = case.model_copy(update={"scalars": {**case.scalars, "rows": args.rows}})
    times = []
    for _ in range(args.repeat):
        start = time.perf_counter()
        sets = generate(case, experiment.signature, 3)
        times.append(time.perf_counter() - start)
        nbytes = sum(t.data.nbytes for s in sets for t in s.values())
        del sets
    median = statistics.median(times)
    record = {"case": CASE, "rows": args.rows, "cols": case.scalars["cols"], "cpus": os.cpu_count(),
              "bytes": nbytes, "seconds": [round(t, 3) for t in times], "median_s": round(median, 3),
              "gb_per_s": round(nbytes / median / 1e9, 2)}
    print(json.dumps(record))
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "bench_inputs.json").write_text(json.dumps(record, indent=2))


if __name__ == "__main__":
    main()
