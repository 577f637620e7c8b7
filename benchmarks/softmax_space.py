"""Every configuration of a softmax tune space on chosen cases, side by side in one run.

Writes a copy of ``examples/softmax`` whose tune space is ``--space`` (JSON: each tunable's values,
the example's own for those not named; a macro of the kernel, ``#ifndef NAME``, may be named too)
and whose cases are the correctness cases and the named performance or holdout cases
(``--cases``; default the short rows; a holdout is timed as a performance case in the copy), runs
``cudaopt optimize`` on it (the tuning strategy: each configuration once), and prints each
configuration's median per case with the vendors' medians from the baseline's request (timed
interleaved with it). The configurations are timed one request after another, so compare them
with each other here and with the vendors through ``softmax_winner.py``, which times its winner
interleaved with them.

Run: ``python benchmarks/softmax_space.py --out DIR --space '{"CT": [512, 1024]}' [--cases NAME ...]``
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import tempfile
from pathlib import Path

from cli_run import cudaopt

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "softmax"
SHORT_ROWS = ["rows32-65536x32", "rows128-32768x128", "rows1024-16384x1024", "rows4096-8192x4096"]


def write_copy(into: Path, space: dict[str, list], cases: list[str]) -> Path:
    """The example's copy under ``into`` with ``space`` and only the correctness cases and ``cases``."""
    shutil.copytree(EXAMPLE, into, dirs_exist_ok=True)
    experiment = json.loads((into / "experiment.json").read_text())
    macros = set(re.findall(r"^#ifndef (\w+)$", (into / experiment["tune"]["kernel"]).read_text(), flags=re.M))
    unknown = set(space) - set(experiment["tune"]["tunables"]) - macros
    if unknown:
        raise SystemExit(f"--space: {sorted(unknown)} neither tunables of {EXAMPLE / 'experiment.json'} "
                         "nor macros of its kernel")
    experiment["tune"]["tunables"].update(space)
    experiment.pop("roi", None)
    (into / "experiment.json").write_text(json.dumps(experiment, indent=2))
    table = json.loads((into / "input_cases.json").read_text())
    missing = set(cases) - {c["name"] for c in table["cases"]}
    if missing:
        raise SystemExit(f"--cases: {sorted(missing)} not cases of {EXAMPLE / 'input_cases.json'}")
    table["cases"] = [c for c in table["cases"] if c["role"] == "correctness" or c["name"] in cases]
    for case in table["cases"]:  # a named holdout is timed here like the performance cases
        if case["role"] == "holdout":
            case["role"] = "performance"
    (into / "input_cases.json").write_text(json.dumps(table, indent=2))
    return into / "experiment.json"


def _median(case: dict) -> float | None:
    return case["timing"]["median_us"] if case.get("status") == "ok" and case.get("timing") else None


def report(run: Path, cases: list[str]) -> dict:
    """Per configuration its medians on ``cases``; the vendors' from the baseline's request."""
    attempts = json.loads((run / "history.json").read_text())["attempts"]
    baseline = next(a for a in attempts if a["kind"] == "baseline")
    vendors = {}
    for case in baseline["cases"]:
        for v in case.get("vendors") or []:
            if v["status"] == "ok" and v.get("timing"):
                vendors.setdefault(v["label"], {})[case["name"]] = v["timing"]["median_us"]
    rows = []
    for a in attempts:
        if a["kind"] == "baseline":
            continue
        medians = {c["name"]: _median(c) for c in a["cases"] if c["name"] in cases}
        rows.append({"defines": a["defines"], "status": a["status"], "medians": medians})
    width = max(len(json.dumps(r["defines"])) for r in rows) if rows else 10
    print(f"{'configuration':{width}}  " + "  ".join(f"{n[:14]:>14}" for n in cases))
    for label, theirs in vendors.items():
        print(f"{label:{width}}  " + "  ".join(f"{theirs.get(n, float('nan')):14.2f}" for n in cases))
    for r in rows:
        cells = "  ".join(f"{r['medians'].get(n) or float('nan'):14.2f}" for n in cases)
        print(f"{json.dumps(r['defines']):{width}}  {cells}  {r['status']}")
    best = {}
    for n in cases:
        timed = [r for r in rows if r["medians"].get(n)]
        if timed:
            top = min(timed, key=lambda r: r["medians"][n])
            best[n] = {"us": top["medians"][n], "defines": top["defines"],
                       **{label: theirs.get(n) for label, theirs in vendors.items()}}
            print(f"best {n}: {top['medians'][n]:.2f} us {json.dumps(top['defines'])}")
    return {"vendors": vendors, "configurations": rows, "best": best}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("out"))
    parser.add_argument("--space", default="{}", help="JSON: tunable -> values (the example's for the rest)")
    parser.add_argument("--cases", nargs="+", default=SHORT_ROWS, help="performance or holdout cases to time")
    args = parser.parse_args()
    try:
        space = json.loads(args.space)
    except json.JSONDecodeError as exc:
        raise SystemExit(f"--space: not JSON ({exc})") from None
    if not isinstance(space, dict) or not all(isinstance(v, list) and v for v in space.values()):
        raise SystemExit("--space: a JSON object of tunable -> non-empty list of values")
    args.out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="softmax-space-"))
    config = write_copy(work / "softmax", space, args.cases)
    code, wall = cudaopt("optimize", "--config", str(config), "--results-dir", str(work / "results"),
                         log=args.out / "softmax-space-optimize.txt")
    run = work / "results" / "run-001"
    if not (run / "history.json").is_file():
        raise SystemExit(f"optimize exited {code} without a run: {args.out / 'softmax-space-optimize.txt'}")
    record = {"space": space, "cases": args.cases, "optimize_exit": code, "wall_s": wall, **report(run, args.cases)}
    (args.out / "softmax-space.json").write_text(json.dumps(record, indent=2))


if __name__ == "__main__":
    main()
