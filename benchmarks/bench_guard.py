"""The guard's error rates and speed on the GPU, on the example's cases (GPU).

Run on the GPU machine: ``python3 benchmarks/bench_guard.py --out DIR``. The guarded kernel is
``examples/sgemm/tunable.cu`` with one configuration of its space baked in (the tuner's winner on
the H200 when this was written: BM=128 BN=256 BK=8 TM=8 TN=16 MINB=1 ST=16 SK=64) and the
experiment's launch for it.

1. ``cudaopt guard record`` of that kernel (a fresh process; its wall time);
2. one ``cudaopt guard check --against`` a copy of itself, and one with ``--quick``, each in a
   fresh process (start-up, worker, compilation, every case checked, the interleaved pairs): the
   wall time of one check, with its JUnit, Markdown and JSON outputs kept in DIR;
3. in one process and worker, ``--trials`` checks of each kind, in rotation so drift hits all alike:
   - ``self``: the kernel against a copy of itself (a comment added): a regression is a false alarm;
   - ``slow5``, ``slow10``: the kernel doing 5% / 10% more k-slices in its large tier (rounded up;
     of the example's cases only 4096³ takes that tier), against the kernel. The extra slices load
     zeros and add nothing, so the output is unchanged and every check stays correct; a check that
     finds a regression is a catch;
   - ``recorded``: the kernel against the figures recorded in step 1 (no A/B): false alarms
     when nothing cancels what changed since the record.

Writes ``bench_guard.json`` to DIR (after every trial, so a cut-short run keeps what it measured)
and prints a table last. Figures go to docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from cli_run import cudaopt

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from cudaopt.pool.supervisor import Supervisor  # noqa: E402
from cudaopt.experiment import load_experiment  # noqa: E402
from cudaopt.guard.check import Settings, check  # noqa: E402
from cudaopt.guard.load import load_guard  # noqa: E402
from cudaopt.record.bake import bake, bake_launch  # noqa: E402

CONFIG = ROOT / "examples" / "sgemm" / "experiment.json"
TUNED = {"BM": 128, "BN": 256, "BK": 8, "TM": 8, "TN": 16, "MINB": 1, "ST": 16, "SK": 64}
SLICES = "const int slices = (k + TBK - 1) / TBK;"  # the k loop every tier runs
BIG = "square-4096"
KINDS = ("self", "slow5", "slow10", "recorded")


def slowed(source: str, percent: int) -> str:
    """``percent``% more k-slices (rounded up) in the large tier only; they load zeros."""
    assert source.count(SLICES) == 1, "tunable.cu changed: update the benchmark's slowed copy"
    large = "(TBM == BM && TBN == BN && TBK == BK && TTM == TM && TTN == TN)"
    extra = (f"const int slices = (k + TBK - 1) / TBK + ({large} ? ((k + TBK - 1) / TBK * {percent} + 99) / 100 "
             ": 0);")
    return f"// {percent}% more k-slices in the large tier, of zeros\n" + source.replace(SLICES, extra)


def setup(work: Path) -> dict[str, Path]:
    """The guarded kernel, its launch, the copies: paths by name."""
    experiment = load_experiment(CONFIG)
    source = bake(experiment.tuning.source, TUNED)
    files = {"kernel": work / "kernel.cu", "copy": work / "copy.cu", "slow5": work / "slow5.cu",
             "slow10": work / "slow10.cu", "launch": work / "launch.json"}
    files["kernel"].write_text(source)
    files["copy"].write_text("// the same kernel\n" + source)
    files["slow5"].write_text(slowed(source, 5))
    files["slow10"].write_text(slowed(source, 10))
    files["launch"].write_text(json.dumps(bake_launch(experiment.tuning.launch.to_data(), TUNED)))
    return files


def guard_for(guard: Path, kernel: Path) -> Path:
    """A copy of the guard file naming another kernel file (as a changed kernel would be)."""
    data = json.loads(guard.read_text())
    data["kernel"]["file"] = kernel.name
    path = guard.with_name(f"guard-{kernel.stem}.json")
    path.write_text(json.dumps(data, indent=2))
    return path


def trial(kind: str, guards: dict[str, Path], files: dict[str, Path], supervisor: Supervisor) -> dict:
    against = {"self": files["copy"], "slow5": files["kernel"], "slow10": files["kernel"], "recorded": None}[kind]
    guarded = load_guard(guards[kind], against=against)
    start = time.monotonic()
    done = check(guarded, supervisor, Settings())
    wall = round(time.monotonic() - start, 2)
    timed = {c.name: {"verdict": c.verdict, "ratio": c.ratio, "low": c.ratio_low, "high": c.ratio_high,
                      "message": c.message} for c in done.cases if c.role == "performance"}
    return {"kind": kind, "passed": done.passed,
            "regressed": [n for n, c in timed.items() if c["verdict"] == "regressed"],
            "other_failures": [f"{c.name}: {c.verdict}: {c.message}" for c in done.cases
                               if c.failed and c.verdict != "regressed"],
            "cases": timed, "score": [done.score_ratio, done.score_low, done.score_high], "wall_s": wall,
            "seed": done.seed}


def summarize(rows: list[dict]) -> dict:
    out = {}
    for kind in KINDS:
        mine = [r for r in rows if r["kind"] == kind]
        if not mine:
            continue
        names = list(mine[0]["cases"])
        out[kind] = {
            "checks": len(mine),
            "found_a_regression": sum(bool(r["regressed"]) for r in mine),
            "failed_otherwise": sum(bool(r["other_failures"]) for r in mine),
            "case_regressions": {n: sum(n in r["regressed"] for r in mine) for n in names},
            "median_time_change": {n: statistics.median(r["cases"][n]["ratio"] for r in mine
                                                        if r["cases"][n]["ratio"] is not None) - 1 for n in names},
            "median_interval_width": {n: statistics.median(r["cases"][n]["high"] - r["cases"][n]["low"] for r in mine
                                                           if r["cases"][n]["high"] is not None) for n in names},
            "median_wall_s": statistics.median(r["wall_s"] for r in mine),
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("out"))
    parser.add_argument("--trials", type=int, default=20, help="checks of each kind")
    parser.add_argument("--kinds", default=",".join(KINDS), help="which kinds of trial, comma-separated")
    args = parser.parse_args()
    kinds = [k for k in args.kinds.split(",") if k]
    unknown = sorted(set(kinds) - set(KINDS))
    if unknown:
        raise SystemExit(f"unknown --kinds {unknown}; known: {', '.join(KINDS)}")
    args.out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="guard-bench-"))
    files = setup(work)
    guard = work / "guard.json"
    figures: dict = {"kernel": {"tunables": TUNED, "launch": json.loads(files["launch"].read_text())},
                     "settings": {"max_slowdown": Settings().max_slowdown, "confidence": Settings().confidence}}
    code, figures["record_wall_s"] = cudaopt("guard", "record", "--config", str(CONFIG), "--kernel",
                                             str(files["kernel"]), "--launch", str(files["launch"]), "--out",
                                             str(guard), log=args.out / "guard-record.txt")
    if code != 0:
        raise SystemExit(f"guard record failed: {(args.out / 'guard-record.txt').read_text()[-3000:]}")
    (args.out / "guard.json").write_text(guard.read_text())
    for name, extra in (("check", []), ("check-quick", ["--quick"])):
        code, wall = cudaopt("guard", "check", str(guard), "--against", str(files["copy"]), *extra,
                             "--junit", str(args.out / f"guard-{name}.xml"), "--markdown",
                             str(args.out / f"guard-{name}.md"), "--json", str(args.out / f"guard-{name}.json"),
                             log=args.out / f"guard-{name}.txt")
        figures[f"{name}_wall_s"], figures[f"{name}_exit"] = wall, code
    guards = {"self": guard, "recorded": guard, "slow5": guard_for(guard, files["slow5"]),
              "slow10": guard_for(guard, files["slow10"])}
    rows: list[dict] = []
    with Supervisor(devices=[0], log_dir=args.out) as supervisor:
        figures["gpu"] = supervisor.device_info().to_data()
        for number in range(args.trials):
            for kind in kinds:
                row = trial(kind, guards, files, supervisor)
                rows.append(row)
                big = row["cases"].get(BIG, {})
                print(f"trial {number + 1}/{args.trials} {kind:8} {'passed' if row['passed'] else 'FAILED':6} "
                      f"{BIG} {big.get('verdict')} {((big.get('ratio') or 1) - 1) * 100:+.2f}% "
                      f"in {row['wall_s']:.1f} s", flush=True)
                figures["trials"], figures["summary"] = rows, summarize(rows)
                (args.out / "bench_guard.json").write_text(json.dumps(figures, indent=2))
    summary = figures["summary"]
    print(f"\nguard record {figures['record_wall_s']:.1f} s; one check (fresh process, --against) "
          f"{figures['check_wall_s']:.1f} s (exit {figures['check_exit']}), "
          f"--quick {figures['check-quick_wall_s']:.1f} s (exit {figures['check-quick_exit']}); limit +{Settings().max_slowdown:.0%}, "
          f"{Settings().confidence:.0%} intervals")
    names = list(rows[0]["cases"]) if rows else []
    print(f"{'kind':9} {'checks':>6} {'regression':>10} {'other fail':>10} "
          + " ".join(f"{n + ' change':>22}" for n in names) + f" {'wall s':>7}")
    for kind, s in summary.items():
        changes = " ".join(f"{s['median_time_change'][n] * 100:+8.2f}% ({s['case_regressions'][n]:2} regr.)".rjust(22)
                           for n in names)
        print(f"{kind:9} {s['checks']:6} {s['found_a_regression']:10} {s['failed_otherwise']:10} {changes} "
              f"{s['median_wall_s']:7.1f}")
    print("targets: " + "; ".join(_target(kind, s) for kind, s in summary.items()) +
          f"; one check {figures['check_wall_s']:.1f} s (want well under 60 s)")


def _target(kind: str, s: dict) -> str:
    """The bar each kind must clear: no false regression of the kernel against itself; at least 19 of
    20 slowed copies caught (and nothing else failing)."""
    if kind in ("self", "recorded"):
        met = s["found_a_regression"] == 0 and s["failed_otherwise"] == 0
        return (f"{kind} {s['found_a_regression']}/{s['checks']} false regressions (want 0): "
                f"{'met' if met else 'NOT met'}")
    met = s["found_a_regression"] >= 0.95 * s["checks"] and s["failed_otherwise"] == 0
    return f"{kind} {s['found_a_regression']}/{s['checks']} caught (want >= 95%): {'met' if met else 'NOT met'}"


if __name__ == "__main__":
    main()
