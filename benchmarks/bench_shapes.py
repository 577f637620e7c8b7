"""The README's main job, then its winner on shapes it never saw: winner vs initial.cu vs cuBLAS.

Runs, as a user would (each a fresh process, no model key):

1. ``cudaopt optimize --config examples/sgemm/experiment.json`` (the tuning strategy), timed;
2. ``cudaopt verify RUN --shapes benchmarks/sgemm_shapes.json``: the timed holdout cases and
   every shape of the set (squares 64 to 8192, odd sizes, tall, wide, deep-k), the winner with
   cuBLAS beside it and the initial kernel in turn, interleaved, 3 repeats.

Prints the run's finalists (the configurations measured again side by side before the winner
was declared), per shape the three medians and the winner's speed-ups, then the targets: no
shape slower than initial.cu beyond noise, at least 0.9x cuBLAS at 4096^3, faster than cuBLAS
on the example's two small shapes, the main job under 2 minutes. Run: ``python
benchmarks/bench_shapes.py --out DIR`` (writes bench_shapes.json and copies the run to DIR).

The second workload, the softmax example, runs first (``softmax_winner.py``: its winner beside
PyTorch eager and torch.compile on every case, and its share of the measured copy bandwidth at
KernelBench's 4096 x 393216); ``--workloads sgemm`` or ``--workloads softmax`` runs one alone.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
from pathlib import Path

from cli_run import cudaopt
from softmax_winner import run_softmax

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "examples" / "sgemm" / "experiment.json"
SHAPES = ROOT / "benchmarks" / "sgemm_shapes.json"
SMALL = ("m=256,n=256,k=256", "m=384,n=256,k=320")
BIG = "m=4096,n=4096,k=4096"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("out"))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--workloads", default="softmax,sgemm", help="comma-separated: softmax, sgemm")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    workloads = set(args.workloads.split(","))
    if "softmax" in workloads:
        run_softmax(args.out)
    if "sgemm" not in workloads:
        return
    results = Path(tempfile.mkdtemp(prefix="shapes-bench-"))
    code, main_wall = cudaopt("optimize", "--config", str(CONFIG), "--results-dir", str(results),
                              log=args.out / "shapes-optimize.txt")
    if code != 0:
        raise SystemExit(f"optimize failed: {(args.out / 'shapes-optimize.txt').read_text()[-2000:]}")
    run = results / "run-001"
    verify_code, verify_wall = cudaopt("verify", str(run), "--shapes", str(SHAPES), "--repeats", str(args.repeats),
                                       log=args.out / "shapes-verify.txt")
    outcome = json.loads((run / "verify.json").read_text())
    summary = json.loads((run / "summary.json").read_text())
    rows = {c["name"]: c for c in outcome["timed"]}
    history = json.loads((run / "history.json").read_text())["attempts"]
    finalists = summary.get("finalists") or {"finalists": []}
    for f in finalists["finalists"]:
        f["defines"] = history[f["attempt"]]["defines"]
        print(f"finalist #{f['attempt']} {f['defines']}: recorded {f['recorded_score_us']:.2f} us, again "
              f"{f['score_us'] if f['score_us'] is None else round(f['score_us'], 2)} us"
              f"{' (winner)' if f['attempt'] == finalists.get('winner') else ''}")
    print(f"\nmain job: {main_wall:.1f} s, best tunables {summary['best_defines']}; verify {verify_wall:.1f} s, "
          f"exit {verify_code}")
    print(f"{'shape':26} {'from':8} {'initial us':>11} {'winner us':>11} {'cuBLAS us':>11} {'vs initial':>10} "
          f"{'vs cuBLAS':>9}  verdict")
    for c in outcome["timed"]:
        fmt = lambda v: f"{v:11.2f}" if v else f"{'-':>11}"
        times = lambda v: f"{v:9.2f}x" if v else f"{'-':>10}"
        verdict = c["status"] if c["status"] != "ok" else ("REGRESSION" if c["regression"] else "ok")
        print(f"{c['name']:26} {c['origin']:8} {fmt(c['baseline_us'])} {fmt(c['winner_us'])} {fmt(c['vendor_us'])} "
              f"{times(c['speedup_vs_baseline'])} {times(c['speedup_vs_vendor'])[:-1]:>9}  {verdict}")
    big = rows.get(BIG, {})
    targets = {
        "no shape slower than initial.cu beyond noise": not outcome["regressions"]
        and all(c["status"] == "ok" for c in outcome["timed"]),
        "at least 0.9x cuBLAS at 4096^3": (big.get("speedup_vs_vendor") or 0) >= 0.9,
        "faster than cuBLAS on the two small shapes": all((rows.get(s, {}).get("speedup_vs_vendor") or 0) > 1
                                                          for s in SMALL),
        "main job under 2 minutes": main_wall < 120,
    }
    for target, met in targets.items():
        print(f"{'met ' if met else 'MISS'} {target}")
    (args.out / "bench_shapes.json").write_text(json.dumps(
        {"main_job_s": round(main_wall, 1), "verify_s": round(verify_wall, 1), "best": summary["best_defines"],
         "per_case_best": summary.get("per_case_best"),
         "finalists": finalists["finalists"], "targets": targets, "verify": outcome}, indent=2))
    shutil.copytree(run, args.out / "shapes-run", dirs_exist_ok=True)


if __name__ == "__main__":
    main()
