"""Which KernelBench problems import: ``cudaopt import kernelbench`` on every problem of a level.

Each problem is imported in a fresh process, as a user would, with a time limit per problem; the
table lists each problem's exit status, seconds and last line (the error of one that did not
import), and the totals by exit status. No GPU is needed: the import runs the problem on the CPU.

Run: ``python benchmarks/kernelbench_imports.py KERNELBENCH/KernelBench/level1 --out DIR
[--time-limit 600]`` (a checkout of https://github.com/ScalingIntelligence/KernelBench).
Writes ``DIR/imports.json`` and each problem's experiment under ``DIR/NAME/``.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path

from cli_run import cudaopt


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("level", type=Path, help="a folder of KernelBench problem files")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--time-limit", type=float, default=600.0, help="seconds per problem (--time-limit)")
    args = parser.parse_args()
    problems = sorted(args.level.glob("*.py"), key=lambda p: (int(p.name.split("_")[0]) if p.name[0].isdigit()
                                                               else 1 << 30, p.name))
    if not problems:
        parser.error(f"{args.level}: no problem files")
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for problem in problems:
        log = args.out / f"{problem.stem}.log"
        status, wall = cudaopt("import", "kernelbench", str(problem), "--out", str(args.out / problem.stem), "--force",
                               "--time-limit", f"{args.time_limit:g}", log=log)
        lines = [line for line in log.read_text().splitlines() if line.strip()]
        rows.append({"problem": problem.name, "exit": status, "seconds": wall, "said": lines[-1] if lines else ""})
    (args.out / "imports.json").write_text(json.dumps(rows, indent=2) + "\n")
    print(f"\n{'problem':60} exit seconds")
    for row in rows:
        print(f"{row['problem'][:60]:60} {row['exit']:>4} {row['seconds']:>7.1f}"
              + (f"  {row['said'][:160]}" if row["exit"] else ""))
    counts = Counter(row["exit"] for row in rows)
    print(f"\n{counts.get(0, 0)} of {len(rows)} imported; "
          + ", ".join(f"exit {code}: {n}" for code, n in sorted(counts.items()) if code))


if __name__ == "__main__":
    main()
