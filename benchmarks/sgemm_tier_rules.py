"""The SGEMM example's launch rules for its smaller tiers, side by side with cuBLAS.

The shapes that take the medium, split-K and small tiers (tall, wide, deep-k, the holdouts), timed
with the example's landed tier table and with variants of it, one worker, cuBLAS interleaved in the
first repeat; each rule is evaluated twice, alternating. ``--profile`` then runs Nsight Compute on
a few (shape, rule) pairs and prints their bottleneck cards. The tune space's last configuration
is used (the large tier's parameters do not matter to these shapes but for 2048^3).

Rules: ``landed`` (experiment.json), ``no-split2`` (no 2-way split-K tier: those shapes go to the
medium tier), ``no-split`` (no split-K tier at all). Every kernel on every shape, without the
table: ``sgemm_kernel_matrix.py``. Run: ``python benchmarks/sgemm_tier_rules.py --out DIR
[--profile]``.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

from cudaopt.experiment import load_experiment
from cudaopt.pool.supervisor import Supervisor
from cudaopt.winner.shapes import load_shapes
from cudaopt.wire.protocol import TimingProtocol

ROOT = Path(__file__).resolve().parents[1]
SHAPES = [(128, 8192, 4096), (8192, 128, 4096), (1024, 1024, 1024), (1000, 1000, 1000),
          (512, 512, 16384), (256, 256, 16384), (512, 512, 8192), (515, 261, 1031), (96, 3072, 1536),
          (96, 96, 9000), (64, 4096, 2048), (4096, 64, 2048), (777, 333, 555), (2048, 2048, 2048)]
RULES = ("landed", "no-split2", "no-split")
PROFILES = [((256, 256, 16384), "landed"), ((512, 512, 16384), "landed"), ((128, 8192, 4096), "landed")]


def launch_for(exp, rule: str):
    launch = exp.tuning.launch.model_copy(deep=True)
    if rule == "no-split2":
        launch.tiers = [t for t in launch.tiers if t.name != "splitk2"]
    elif rule == "no-split":
        launch.tiers = [t for t in launch.tiers if not (t.name or "").startswith("splitk")]
    return launch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--profile", action="store_true", help="also profile a few pairs with Nsight Compute")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    exp = load_experiment(ROOT / "examples/sgemm/experiment.json")
    shapes_file = args.out / "tier-rule-shapes.json"
    shapes_file.write_text(json.dumps({"template": "square-4096", "shapes": [dict(m=m, n=n, k=k) for m, n, k in SHAPES]}))
    cases = [c.model_copy(update={"role": "performance"}) for c in load_shapes(shapes_file, exp)]
    config = exp.tuning.space.configurations()[-1]
    protocol = TimingProtocol(warmup=5, iterations=30)
    rows = []
    with Supervisor(devices=[0], log_dir=args.out / "workers") as pool:
        for repeat in range(2):
            for rule in RULES:
                request = exp.request(exp.tuning.source, launch=launch_for(exp, rule), defines=config,
                                      protocol=protocol, vendor=repeat == 0)
                request.cases = cases
                start = time.monotonic()
                result = pool.evaluate(request)
                row = {"repeat": repeat, "rule": rule, "status": result.status, "seconds": round(time.monotonic() - start, 1)}
                if result.status != "ok":
                    row["failures"] = [(c.name, c.status, c.reason[:200]) for c in result.cases if c.status != "ok"]
                else:
                    row["us"] = {c.name: round(c.timing.median_us, 2) for c in result.cases}
                    row["kernel"] = {c.name: c.launch.entry for c in result.cases}
                    if repeat == 0:
                        row["cublas_us"] = {c.name: round(c.vendors[0].timing.median_us, 2) for c in result.cases
                                            if c.vendors and c.vendors[0].timing}
                rows.append(row)
                print(f"repeat {repeat} {rule}: {row['status']} in {row['seconds']} s {row.get('failures', '')}", flush=True)
    (args.out / "sgemm_tier_rules.json").write_text(json.dumps({"config": config, "rows": rows}, indent=1))
    cublas = next((r["cublas_us"] for r in rows if "cublas_us" in r), {})
    print("\nper shape: median us (x cuBLAS, kernel); geomean of x cuBLAS over the shapes")
    for row in (r for r in rows if "us" in r):
        ratios = [cublas[c] / row["us"][c] for c in row["us"] if c in cublas]
        geomean = math.exp(sum(map(math.log, ratios)) / len(ratios)) if ratios else float("nan")
        cells = " ".join(f"{c}: {us:.1f} ({cublas.get(c, 0) / us:.2f}, {row['kernel'][c].removeprefix('matmul_f32_')})"
                         for c, us in row["us"].items())
        print(f"{row['repeat']} {row['rule']:<12} geomean {geomean:.3f} | {cells}")
    if args.profile:
        _profile(exp, cases, config)


def _profile(exp, cases, config) -> None:
    from cudaopt.insight.card import build_card
    from cudaopt.compilekit.locate import find_tool
    from cudaopt.insight.ncu import profile, profile_request

    ncu = find_tool("ncu")
    if ncu is None:
        print("no ncu on this machine: nothing profiled")
        return
    for (m, n, k), rule in PROFILES:
        request = exp.request(exp.tuning.source, launch=launch_for(exp, rule), defines=config)
        request.cases = [c for c in cases if c.name == f"m={m},n={n},k={k}"]
        found = profile(profile_request(request), ncu, timeout_s=120)
        fma = {s: found.metrics.number(f"sm__pipe_fma_cycles_active.{s}.pct_of_peak_sustained_active") for s in ("min", "max")}
        print(f"\n{m}x{n}x{k}, {rule}:\n{build_card(found.metrics, found.case).to_text()}\nFMA pipe per SM, min and max %: {fma}")


if __name__ == "__main__":
    main()
