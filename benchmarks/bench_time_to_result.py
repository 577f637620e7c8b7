"""Time to result: each example's no-key job, as the README runs it, and where its time went.

Runs ``cudaopt optimize --config examples/NAME/experiment.json`` (no model key: the tuning
strategy) in a fresh process for each example and prints its wall time beside the target, the
winner (score and tunables) and the run's own account of its time (``summary.json``'s ``time``:
pre-flight, workers, checks, timing, finalists' rounds, crowning audit, NVRTC beside them).
Targets: SGEMM 30 s, softmax 60 s, the BF16 linear layer 90 s.

Each job starts with an empty cudaopt cache (``CUDAOPT_CACHE_DIR``: no cubin compiled before), as
on a machine that never ran cudaopt; ``--again`` then runs each job a second time on the cache
the first left (the cubins it compiled), as a user's second run of the same command.

``--profile`` also writes a cProfile of every Python process of each job (the CLI, the GPU worker,
the compile processes) under ``DIR/profiles/NAME/`` (benchmarks/profile/sitecustomize.py), for
``python -m pstats``; a profiled job is slower, so its wall time is not the figure to quote.

Run: ``python benchmarks/bench_time_to_result.py --out DIR [--examples sgemm softmax] [--again] [--profile]``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
from pathlib import Path

from cli_run import cudaopt

ROOT = Path(__file__).resolve().parents[1]
TARGETS_S = {"sgemm": 30.0, "softmax": 60.0, "linear_bf16": 90.0}
STEPS = ("preflight_s", "workers_s", "checks_s", "timing_s", "measured_again_s", "audit_s", "compile_s")


def job(name: str, out: Path, profile: bool, cache: Path, label: str) -> dict:
    """One example's main job on the cudaopt cache ``cache``: its wall time and what its summary says."""
    results = Path(tempfile.mkdtemp(prefix=f"{name}-ttr-"))
    saved = dict(os.environ)
    os.environ["CUDAOPT_CACHE_DIR"] = str(cache)
    if profile:  # cli_run passes this process's environment on
        os.environ["CUDAOPT_PROFILE_DIR"] = str(out / "profiles" / name)
        os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "benchmarks" / "profile"),
                                                                 os.environ.get("PYTHONPATH")]))
    try:
        code, wall = cudaopt("optimize", "--config", str(ROOT / "examples" / name / "experiment.json"),
                             "--results-dir", str(results), log=out / f"{label}-optimize.txt")
    finally:
        os.environ.clear()
        os.environ.update(saved)
    row = {"example": label, "exit": code, "wall_s": wall, "target_s": TARGETS_S[name]}
    summary_path = results / "run-001" / "summary.json"
    if summary_path.is_file():
        summary = json.loads(summary_path.read_text())
        row.update(best_score_us=summary.get("best_score_us"), best_defines=summary.get("best_defines"),
                   attempts=summary.get("attempts"), time=summary.get("time"))
        shutil.copytree(results / "run-001", out / f"{label}-run", dirs_exist_ok=True)
    shutil.rmtree(results, ignore_errors=True)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("out"))
    parser.add_argument("--examples", nargs="+", choices=sorted(TARGETS_S), default=sorted(TARGETS_S))
    parser.add_argument("--again", action="store_true", help="run each job again on the cache the first left")
    parser.add_argument("--profile", action="store_true", help="cProfile every process (slower: no figures)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for name in args.examples:
        cache = Path(tempfile.mkdtemp(prefix=f"{name}-cache-"))
        rows.append(job(name, args.out, args.profile, cache, name))
        if args.again:
            rows.append(job(name, args.out, args.profile, cache, f"{name}-again"))
        shutil.rmtree(cache, ignore_errors=True)
    print(f"\n{'example':16} {'wall s':>7} {'target':>7} {'exit':>4} {'best us':>9}  " + " ".join(
        f"{s.removesuffix('_s'):>16}" for s in STEPS))
    for row in rows:
        spent = row.get("time") or {}
        best = row.get("best_score_us")
        print(f"{row['example']:16} {row['wall_s']:7.1f} {row['target_s']:7.0f} {row['exit']:4d} "
              f"{best if best is None else round(best, 2)!s:>9}  "
              + " ".join(f"{spent.get(s, 0.0):16.1f}" for s in STEPS))
        print(f"{'':16} best tunables {row.get('best_defines')}")
    (args.out / "time_to_result.json").write_text(json.dumps(rows, indent=1))
    met = all(r["exit"] == 0 and r["wall_s"] <= r["target_s"] for r in rows)
    print("targets met" if met else "targets NOT met", "(profiled: times not comparable)" if args.profile else "")


if __name__ == "__main__":
    main()
