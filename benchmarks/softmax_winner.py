"""The softmax example's main job, then its winner beside PyTorch eager and torch.compile.

Runs, as a user would (each a fresh process, no model key):

1. ``cudaopt optimize --config examples/softmax/experiment.json`` (the tuning strategy, every
   configuration of the space), timed;
2. ``cudaopt evaluate`` of the winner (the run's ``best.cu`` with ``best-launch.json``): every
   performance case with both PyTorch vendors checked and timed in the same request, their
   chunks interleaved with the winner's;
3. ``cudaopt verify RUN``: the holdout cases (2000 x 50000, 24 x 65536), checked and timed.

Prints per case the winner's, eager's and torch.compile's medians and the speed-ups, and at
KernelBench's shape (4096 x 393216) the winner's bandwidth as a fraction of the GPU's measured
copy bandwidth (``worker/peaks.py``); then the targets: at least 1.0x torch.compile at
KernelBench's shape and on every short-row case, at least 85% of the copy bandwidth there.
Run alone: ``python benchmarks/softmax_winner.py --out DIR [--config EXPERIMENT]`` (a copy of the
example, to try a variant of it) ``[--run RUN]`` (steps 2 and 3 only, on the winner of an earlier
run of step 1: each step takes minutes); ``bench_shapes.py`` runs it first (not named bench_*, so
``scripts/gpu-session.sh all`` runs it once).
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
from pathlib import Path

from cli_run import cudaopt

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "examples" / "softmax" / "experiment.json"
BIG = "kernelbench-4096x393216"
SHORT_ROWS = ("rows32-65536x32", "rows128-32768x128", "rows1024-16384x1024", "rows4096-8192x4096")


def _vendor(case: dict, label: str) -> float | None:
    for vendor in case.get("vendors") or []:
        if vendor["label"] == label and vendor["status"] == "ok" and vendor.get("timing"):
            return vendor["timing"]["median_us"]
    return None


def run_softmax(out: Path, config: Path = CONFIG, run: Path | None = None) -> dict:
    """The three steps above on ``config`` (by default the example's; a copy, to try a variant of
    it), or steps 2 and 3 on the winner of ``run``; writes bench_softmax.json and the run
    (softmax-run) under ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    main_wall = None
    if run is None:
        results = Path(tempfile.mkdtemp(prefix="softmax-bench-"))
        code, main_wall = cudaopt("optimize", "--config", str(config), "--results-dir", str(results),
                                  log=out / "softmax-optimize.txt")
        if code != 0:
            raise SystemExit(f"optimize failed: {(out / 'softmax-optimize.txt').read_text()[-2000:]}")
        run = results / "run-001"
    elif not (run / "summary.json").is_file():
        raise SystemExit(f"{run}: not a run directory (no summary.json)")
    summary = json.loads((run / "summary.json").read_text())
    evaluated = out / "softmax-winner.json"
    eval_code, eval_wall = cudaopt("evaluate", "--config", str(config), "--kernel", str(run / "best.cu"),
                                   "--launch", str(run / "best-launch.json"), "--no-time-reference",
                                   "--json", str(evaluated), log=out / "softmax-evaluate.txt")
    verify_code, verify_wall = cudaopt("verify", str(run), log=out / "softmax-verify.txt")
    candidate = json.loads(evaluated.read_text())["candidate"] if evaluated.is_file() else {"cases": []}
    peaks = (candidate.get("device") or {}).get("measured_peaks") or {}
    copy_gbps = peaks["bytes_per_s"] / 1e9 if peaks.get("bytes_per_s") else None

    main = f"{main_wall:.1f} s" if main_wall is not None else f"not run here ({run})"
    print(f"\nmain job: {main}, best tunables {summary['best_defines']}; evaluate {eval_wall:.1f} s "
          f"(exit {eval_code}); verify {verify_wall:.1f} s (exit {verify_code})")
    print(f"{'case':26} {'winner us':>11} {'eager us':>11} {'compile us':>11} {'vs eager':>9} {'vs compile':>10}  status")
    rows = {}
    for case in candidate["cases"]:
        if case["role"] != "performance":
            continue
        mine = case["timing"]["median_us"] if case["status"] == "ok" and case.get("timing") else None
        eager, compiled = _vendor(case, "PyTorch eager"), _vendor(case, "torch.compile")
        ratio = lambda theirs: round(theirs / mine, 3) if theirs and mine else None  # noqa: E731
        rows[case["name"]] = {"winner_us": mine, "eager_us": eager, "compile_us": compiled,
                              "vs_eager": ratio(eager), "vs_compile": ratio(compiled), "status": case["status"],
                              "entry": (case.get("launch") or {}).get("entry"),
                              "achieved_gbps": (case.get("roofline") or {}).get("achieved_gbps")}
        fmt = lambda v: f"{v:11.1f}" if v else f"{'-':>11}"  # noqa: E731
        times = lambda v: f"{v:9.2f}x" if v else f"{'-':>10}"  # noqa: E731
        print(f"{case['name']:26} {fmt(mine)} {fmt(eager)} {fmt(compiled)} {times(ratio(eager))[:-1]:>9} "
              f"{times(ratio(compiled))}  {case['status']} ({rows[case['name']]['entry']})")
    big = rows.get(BIG, {})
    fraction = big["achieved_gbps"] / copy_gbps if big.get("achieved_gbps") and copy_gbps else None
    print(f"{BIG}: {big.get('achieved_gbps')} GB/s, measured copy bandwidth {copy_gbps and round(copy_gbps)} GB/s"
          f" -> {fraction and round(100 * fraction, 1)}%")
    targets = {
        "at least 1.0x torch.compile at KernelBench's shape": (big.get("vs_compile") or 0) >= 1.0,
        "at least 1.0x torch.compile on every short-row case": all((rows.get(n, {}).get("vs_compile") or 0) >= 1.0
                                                                    for n in SHORT_ROWS),
        "at least 85% of the measured copy bandwidth at KernelBench's shape": (fraction or 0) >= 0.85,
        "the holdouts pass verify": verify_code == 0,
    }
    for target, met in targets.items():
        print(f"{'met ' if met else 'MISS'} {target}")
    record = {"main_job_s": None if main_wall is None else round(main_wall, 1), "evaluate_s": round(eval_wall, 1),
              "verify_s": round(verify_wall, 1),
              "best": summary["best_defines"], "kernelbench": summary.get("kernelbench"),
              "per_case_best": summary.get("per_case_best"), "cases": rows, "copy_gbps": copy_gbps,
              "copy_fraction": fraction, "targets": targets}
    (out / "bench_softmax.json").write_text(json.dumps(record, indent=2))
    shutil.copytree(run, out / "softmax-run", dirs_exist_ok=True)
    return record


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("out"))
    parser.add_argument("--config", type=Path, default=CONFIG, help="an experiment (default: the example's)")
    parser.add_argument("--run", type=Path, help="a run directory of this experiment: skip step 1, take its winner")
    args = parser.parse_args()
    run_softmax(args.out, args.config, args.run)


if __name__ == "__main__":
    main()
