"""``cudaopt check`` on an input-cases file of thousands of cases (no GPU needed).

Check resolves the tunable kernel's launch on every case and every configuration of its space
and looks up each kernel the launch names, before anything reaches a GPU: with the SGEMM
example's 10 configurations and nine tiers, a file of 5000 small cases is 50,000 resolutions.
This copies the example with ``--cases`` extra correctness cases (odd sizes of 8-57 x 9-39 x 7-19)
and times one ``cudaopt check`` of it, which must report the experiment ready.
Run: ``python benchmarks/bench_check_cases.py --out DIR [--cases 5000]``.
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

from cli_run import cudaopt

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "sgemm"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("out"))
    parser.add_argument("--cases", type=int, default=5000)
    args = parser.parse_args()
    copy = args.out / "many-cases"
    shutil.copytree(EXAMPLE, copy, dirs_exist_ok=True)
    cases = json.loads((EXAMPLE / "input_cases.json").read_text())
    template = next(c for c in cases["cases"] if c["role"] == "correctness")
    for i in range(args.cases):
        case = json.loads(json.dumps(template))
        case.update(name=f"odd-{i}", seed=1000 + i, scalars={"m": 8 + i % 50, "n": 9 + i % 31, "k": 7 + i % 13})
        cases["cases"].append(case)
    (copy / "input_cases.json").write_text(json.dumps(cases))
    code, wall = cudaopt("check", "--config", str(copy / "experiment.json"), log=args.out / "check-cases.txt")
    if code != 0:
        raise SystemExit(f"check failed: {(args.out / 'check-cases.txt').read_text()[-1000:]}")
    print(f"{len(cases['cases'])} cases: cudaopt check {wall:.1f} s")


if __name__ == "__main__":
    main()
