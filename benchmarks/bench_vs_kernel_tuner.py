"""Tuning sweep, side by side with Kernel Tuner (GPU): wall time, configurations, best found.

Both tuners sweep the same kernel (``benchmarks/kt_matmul/matmul.cu``) over Kernel Tuner's matmul
example space at 4096^3 (40 configurations), each in a fresh process:

- Kernel Tuner, cupy backend, 32 iterations per configuration, no output verification;
- ``cudaopt optimize --strategy tune``: every configuration checked against the reference on 3
  input sets and timed with 32 iterations, L2 flushed before each (the experiment's ``timing``).

Then both winners are timed again by the cudaopt protocol (100 iterations), interleaved, in one
worker. Run: ``python benchmarks/bench_vs_kernel_tuner.py --out DIR`` (needs ``kernel_tuner``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
EXPERIMENT = ROOT / "benchmarks" / "kt_matmul" / "experiment.json"
SIZE = 4096

_KT_CHILD = """
import json, sys, numpy as np, kernel_tuner
cfg = json.loads(sys.argv[1])
size = cfg["size"]
rng = np.random.default_rng(0)
a = rng.uniform(-1, 1, (size, size)).astype(np.float32)
b = rng.normal(0.25, 1, (size, size)).astype(np.float32)
c = np.zeros((size, size), np.float32)
args = [a, b, c, np.int32(size), np.int32(size), np.int32(size)]
results, env = kernel_tuner.tune_kernel(
    "matmul_f32", open(cfg["kernel"]).read(), (size, size), args, cfg["tunables"],
    grid_div_x=["block_size_x", "tile_size_x"], grid_div_y=["block_size_y", "tile_size_y"],
    restrictions=["block_size_x==block_size_y*tile_size_y"], lang="cupy", iterations=32,
    verbose=False, quiet=True)
names = list(cfg["tunables"])
def outcome(r):
    t = r.get("time")
    return (t, None) if isinstance(t, float) else (None, type(t).__name__ if t is not None else "no time")
rows = [{"config": {n: r[n] for n in names}, "time_ms": outcome(r)[0], "error": outcome(r)[1]} for r in results]
print("KT-RESULT " + json.dumps({"version": kernel_tuner.__version__, "rows": rows}))
"""


def run_kernel_tuner(tune: dict, kernel: Path) -> dict:
    env = dict(os.environ, CUPY_CACHE_DIR=tempfile.mkdtemp(prefix="cupy-cache-"))
    cfg = json.dumps({"size": SIZE, "kernel": str(kernel), "tunables": tune["tunables"]})
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", _KT_CHILD, cfg], capture_output=True, text=True, env=env)
    wall = time.perf_counter() - start
    line = next((x for x in proc.stdout.splitlines() if x.startswith("KT-RESULT ")), None)
    if proc.returncode != 0 or line is None:
        raise SystemExit(f"kernel_tuner failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    data = json.loads(line[len("KT-RESULT "):])
    timed = [r for r in data["rows"] if r["time_ms"] is not None]
    best = min(timed, key=lambda r: r["time_ms"])
    return {"tool": f"Kernel Tuner {data['version']} (cupy backend)", "wall_s": round(wall, 2),
            "configurations": len(data["rows"]), "failed": len(data["rows"]) - len(timed),
            "best": best["config"], "best_reported_ms": round(best["time_ms"], 4), "rows": data["rows"]}


def run_cudaopt(results: Path) -> dict:
    cmd = [sys.executable, "-m", "cudaopt", "optimize", "--config", str(EXPERIMENT), "--strategy", "tune",
           "--max-evals", "40", "--no-cache", "--results-dir", str(results)]
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, COLUMNS="120"))
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"cudaopt optimize failed (exit {proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    from cudaopt.record.files import History, Summary

    run = results / "run-001"
    history = History.model_validate_json((run / "history.json").read_text()).attempts
    attempts = [a for a in history if a.kind == "tune"]
    summary = Summary.model_validate_json((run / "summary.json").read_text())
    passed = [a for a in attempts if a.score_us is not None]
    if not passed:
        reasons = "\n".join(f"  {a.defines}: {a.status}: {a.reason[:300]}" for a in history[:6])
        raise SystemExit(f"no configuration passed; the first attempts:\n{reasons}")
    best = min(passed, key=lambda a: (a.score_us, a.id))
    phases: dict[str, float] = {"compile_s": sum(a.compile.seconds if a.compile else 0.0 for a in attempts)}
    for a in attempts:
        for case in a.cases:
            for name, value in case.phases.items():
                phases[name] = phases.get(name, 0.0) + value
    return {"tool": "cudaopt optimize --strategy tune", "wall_s": round(wall, 2), "configurations": len(attempts),
            "failed": sum(a.status != "ok" for a in attempts),
            "failed_statuses": sorted({a.status for a in attempts if a.status != "ok"}),
            "best": best.defines, "best_median_us": best.score_us,
            "failed_ever_best": any(a.status != "ok" and a.id == summary.best_attempt for a in history),
            "eval_seconds": round(sum(a.eval_seconds for a in attempts), 2),
            "phases_s": {k: round(v, 2) for k, v in phases.items()}}


def time_side_by_side(configs: dict[str, dict], rounds: int = 3) -> dict:
    """Each winner timed by the cudaopt protocol (100 iterations, L2 flushed), interleaved."""
    from cudaopt.pool.supervisor import Supervisor
    from cudaopt.experiment import load_experiment
    from cudaopt.wire.protocol import TimingProtocol

    exp = load_experiment(EXPERIMENT)
    medians: dict[str, list[float]] = {name: [] for name in configs}
    with Supervisor(log_dir=Path(tempfile.mkdtemp())) as sup:
        for _ in range(rounds):
            for name, defines in configs.items():
                req = exp.request(exp.tuning.source, launch=exp.tuning.launch, defines=defines,
                                  protocol=TimingProtocol())
                result = sup.evaluate(req)
                if not result.ok:
                    raise SystemExit(f"{name} winner {defines} failed: {result.status} {result.reason[:300]}")
                medians[name].append(result.cases[0].timing.median_us)
    return {name: {"config": configs[name], "median_us": round(statistics.median(v), 1), "rounds_us": v}
            for name, v in medians.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("out"))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    try:
        import kernel_tuner  # noqa: F401
    except ImportError:
        print("bench_vs_kernel_tuner: kernel_tuner is not installed; skipped")
        return
    tune = json.loads(EXPERIMENT.read_text())["tune"]
    kernel = EXPERIMENT.parent / tune["kernel"]
    kt = run_kernel_tuner(tune, kernel)
    print(f"Kernel Tuner: {kt['wall_s']} s, {kt['configurations']} configurations, best {kt['best']}", flush=True)
    ours = run_cudaopt(Path(tempfile.mkdtemp(prefix="kt-bench-")))
    print(f"cudaopt: {ours['wall_s']} s, {ours['configurations']} configurations, best {ours['best']}", flush=True)
    both = time_side_by_side({"cudaopt": ours["best"], "kernel_tuner": kt["best"]})
    ratio = ours["wall_s"] / kt["wall_s"]
    gap = both["cudaopt"]["median_us"] / both["kernel_tuner"]["median_us"] - 1
    flops = 2.0 * SIZE**3
    print(f"{'tool':44} {'wall s':>8} {'configs':>8} {'failed':>7}  best configuration")
    for r in (kt, ours):
        print(f"{r['tool']:44} {r['wall_s']:8.2f} {r['configurations']:8d} {r['failed']:7d}  {r['best']}")
    print(f"cudaopt sweep wall / Kernel Tuner wall: {ratio:.2f} (target <= 0.80)")
    print(f"Kernel Tuner's own figure for its best: {kt['best_reported_ms']} ms")
    for name, r in both.items():
        print(f"{name:14} winner by the cudaopt protocol: {r['median_us']:9.1f} us "
              f"({flops / r['median_us'] / 1e6:.1f} TFLOP/s)  {r['config']}")
    print(f"cudaopt best vs Kernel Tuner best, same protocol: {gap * 100:+.1f}% (target within 2%)")
    print(f"a configuration that failed ever won: {ours['failed_ever_best']}")
    print(f"cudaopt time per phase (s): {ours['phases_s']}")
    (args.out / "bench_vs_kernel_tuner.json").write_text(json.dumps(
        {"kernel_tuner": kt, "cudaopt": ours, "side_by_side": both, "wall_ratio": round(ratio, 3),
         "best_gap": round(gap, 4)}, indent=2))


if __name__ == "__main__":
    main()
