"""The main job on the GPU: tune examples/sgemm with no model, then check the winner every way.

Runs, as a user would (each a fresh process):

1. ``cudaopt optimize --config examples/sgemm/experiment.json`` (no key: the tuning strategy);
2. ``cudaopt evaluate`` on the winner's ``best.cu``: its cases timed interleaved with the
   experiment's vendor baseline (cuBLAS SGEMM through cupy) in one worker;
3. ``cudaopt verify`` (holdout, fresh seeds) and ``cudaopt replay`` (interleaved with the initial
   kernel) on the run directory.

Prints per case: initial kernel, winner and cuBLAS medians, and the winner's throughput as a
share of cuBLAS's. Run: ``python benchmarks/bench_tune_sgemm.py --out DIR``; the run directory
is copied to ``DIR/sgemm-run`` (report.html included).
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
from pathlib import Path

from cli_run import cudaopt

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "examples" / "sgemm" / "experiment.json"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("out"))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    results = Path(tempfile.mkdtemp(prefix="sgemm-bench-"))
    code, wall = cudaopt("optimize", "--config", str(CONFIG), "--results-dir", str(results),
                         log=args.out / "sgemm-optimize.txt")
    if code != 0:
        raise SystemExit(f"optimize failed: {(args.out / 'sgemm-optimize.txt').read_text()[-2000:]}")
    run = results / "run-001"
    summary = json.loads((run / "summary.json").read_text())
    history = json.loads((run / "history.json").read_text())["attempts"]
    baseline = next(a for a in history if a["kind"] == "baseline")
    evaluation = args.out / "sgemm-best-evaluate.json"
    code, _ = cudaopt("evaluate", "--config", str(CONFIG), "--kernel", str(run / "best.cu"),
                      "--launch", str(run / "best-launch.json"), "--json", str(evaluation),
                      log=args.out / "sgemm-best-evaluate.txt")
    verify_code, _ = cudaopt("verify", str(run), log=args.out / "sgemm-verify.txt")
    replay_code, _ = cudaopt("replay", str(run), "--repeats", "3", log=args.out / "sgemm-replay.txt")
    cudaopt("report", str(run), log=args.out / "sgemm-report.txt")

    best = json.loads(evaluation.read_text())["candidate"] if code == 0 else None
    initial = {c["name"]: c for c in baseline["cases"]}
    print(f"\nmain job: {wall:.1f} s wall, {len(history)} attempts, stop: {summary['stop_reason']}, "
          f"best tunables {summary.get('best_defines')}")
    print(f"{'case':18} {'initial us':>11} {'winner us':>11} {'cuBLAS us':>11} {'vs initial':>10} {'% of cuBLAS':>11}")
    for case in best["cases"] if best else []:
        if not case.get("timing"):
            continue
        mine = case["timing"]["median_us"]
        vendor = (((case.get("vendors") or [{}])[0]).get("timing") or {}).get("median_us")
        init = (initial.get(case["name"], {}).get("timing") or {}).get("median_us")
        share = f"{vendor / mine * 100:10.1f}%" if vendor else f"{'-':>11}"
        print(f"{case['name']:18} {init or 0:11.2f} {mine:11.2f} {vendor or 0:11.2f} "
              f"{(init / mine if init else 0):9.2f}x {share}")
    print(f"verify exit {verify_code}, replay exit {replay_code}")
    shutil.copytree(run, args.out / "sgemm-run", dirs_exist_ok=True)


if __name__ == "__main__":
    main()
