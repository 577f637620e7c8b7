"""The cost of the Ray transport on one GPU, and the sweep speed-up from one GPU to all of them (GPU).

Runs the example's tune sweep (``cudaopt optimize --config examples/sgemm/experiment.json
--strategy tune --no-cache``: the baseline and all 39 configurations, each checked and timed) as
a user would, each in a fresh process, ``--rounds`` times in turn:

- ``--devices 0``: the local supervisor on one GPU;
- ``--ray local`` on one GPU (the process sees only GPU 0), when Ray is installed;
- ``--devices all``, when the machine has more than one GPU.

Per run: the run's wall time (``summary.json``: from the workers being up to the end, so neither
a worker's nor the cluster's start is in it), the process's wall time, what came before the
sweep (the difference: imports, checks, the workers' and the cluster's start), the GPU seconds
in evaluation, the attempts and the best score. Then the Ray transport's overhead
against the local supervisor (medians of the run wall times; target: under 10%) and the speed-up
from one GPU to all (expected close to their number). Writes ``bench_scale.json`` to DIR and
prints a table last. Run: ``python benchmarks/bench_scale.py --out DIR [--rounds N]``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "examples" / "sgemm" / "experiment.json"
sys.path.insert(0, str(ROOT / "src"))


def sweep(label: str, flags: list[str], env_extra: dict[str, str], out: Path, n: int) -> dict:
    results = Path(tempfile.mkdtemp(prefix="bench-scale-"))
    env = dict(os.environ, COLUMNS="120", **env_extra)
    env.pop("OPENAI_API_KEY", None)
    command = [sys.executable, "-m", "cudaopt", "optimize", "--config", str(CONFIG), "--strategy", "tune",
               "--no-cache", "--results-dir", str(results), *flags]
    start = time.perf_counter()
    proc = subprocess.run(command, capture_output=True, text=True, env=env)
    process_wall = time.perf_counter() - start
    log = out / f"scale-{label.replace(' ', '_').replace(',', '')}-{n}.txt"
    log.write_text(proc.stdout + proc.stderr)
    print(f"$ {' '.join(command[2:])}  -> exit {proc.returncode} in {process_wall:.1f} s ({log.name})")
    if proc.returncode != 0:
        raise SystemExit(f"{label} failed: {(proc.stdout + proc.stderr)[-2000:]}")
    run = results / "run-001"
    summary = json.loads((run / "summary.json").read_text())
    env_json = json.loads((run / "env.json").read_text())
    history = json.loads((run / "history.json").read_text())["attempts"]
    return {"label": label, "round": n, "process_wall_s": round(process_wall, 3),
            "run_wall_s": summary["totals"]["wall_seconds"],
            "start_s": round(process_wall - summary["totals"]["wall_seconds"], 3), "gpu_s": summary["totals"]["gpu_seconds"],
            "attempts": summary["attempts"], "valid": summary["valid"], "best_score_us": summary["best_score_us"],
            "gpus": [g["index"] for g in env_json.get("pool", [])], "backend": env_json.get("backend"),
            "attempts_per_gpu": {str(i): sum(1 for a in history if (a.get("gpu") or {}).get("index") == i)
                                 for i in sorted({(a.get("gpu") or {}).get("index") for a in history} - {None})}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("out"))
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    from cudaopt.pool.devices import visible_devices

    gpus = visible_devices()
    configs = [("local, GPU 0", ["--devices", str(gpus[0])], {})]
    if importlib.util.find_spec("ray") is not None:
        configs.append(("ray local, 1 GPU", ["--ray", "local"], {"CUDA_VISIBLE_DEVICES": str(gpus[0])}))
    else:
        print("ray is not installed: the Ray transport is not measured (pip install 'cudaopt[ray]')")
    if len(gpus) > 1:
        configs.append((f"local, all {len(gpus)} GPUs", ["--devices", "all"], {}))
    runs = [sweep(label, flags, env, args.out, n) for n in range(args.rounds) for label, flags, env in configs]
    medians = {label: statistics.median(r["run_wall_s"] for r in runs if r["label"] == label) for label, _, _ in configs}
    figures: dict = {"gpus": gpus, "rounds": args.rounds, "runs": runs, "median_run_wall_s": medians}
    local = medians["local, GPU 0"]
    if "ray local, 1 GPU" in medians:
        figures["ray_overhead"] = round(medians["ray local, 1 GPU"] / local - 1, 4)
    if len(gpus) > 1:
        figures["speedup_all_gpus"] = round(local / medians[f"local, all {len(gpus)} GPUs"], 3)
    (args.out / "bench_scale.json").write_text(json.dumps(figures, indent=2))
    print(f"\n{'configuration':22} {'round':>5} {'run wall s':>10} {'process s':>9} {'start s':>7} {'GPU s':>7} "
          f"{'attempts':>8} {'best µs':>9}  attempts per GPU")
    for r in runs:
        print(f"{r['label']:22} {r['round']:5d} {r['run_wall_s']:10.2f} {r['process_wall_s']:9.2f} "
              f"{r['start_s']:7.2f} {r['gpu_s']:7.2f} {r['valid']:>3}/{r['attempts']:<4} "
              f"{r['best_score_us'] or 0:9.2f}  {r['attempts_per_gpu']}")
    for label, value in medians.items():
        print(f"median run wall, {label}: {value:.2f} s")
    if "ray_overhead" in figures:
        print(f"Ray transport on one GPU: {figures['ray_overhead'] * 100:+.1f}% run wall time against the local "
              "supervisor (target: under +10%)")
    if "speedup_all_gpus" in figures:
        print(f"sweep speed-up from 1 to {len(gpus)} GPUs: {figures['speedup_all_gpus']:.2f}x")


if __name__ == "__main__":
    main()
