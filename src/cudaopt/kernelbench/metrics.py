"""KernelBench's metrics over a set of runs (one run per problem): ``fast_p``.

``fast_p`` is the fraction of problems whose kernel is correct and faster than the PyTorch
baseline by more than ``p`` (KernelBench: ``fast_0`` is the fraction correct, ``fast_1`` correct
and faster than eager). A run is correct when some attempt passed every correctness and
performance case (``summary.json``'s ``kernelbench.correct``) and, where ``cudaopt verify`` has
been run, the holdout cases too. The speed-up is the summary's: the vendor's geometric mean over
the best attempt's, on the GPU time of the performance cases. ``checks`` says whether the run was
checked with KernelBench's own input distributions and tolerances or with the ones the import
changed so that every case discriminates (``changes``: which, and why).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field

from ..errors import ExperimentError
from ..record.rundir import RunDir
from ..record.runs import open_run, read_run_json
from ..record.files import Summary, VerifyOutcome
from ..wire.fields import version_field
from ..wire.protocol import WireModel

Baseline = Literal["eager", "compile"]
THRESHOLDS = (0.0, 1.0, 1.5, 2.0)


class RunMetrics(WireModel):
    """One problem's run as KernelBench counts it."""

    run: str
    description: str
    correct: bool  # passed every case it was checked on (and the holdout, when verified)
    verified: bool | None  # cudaopt verify's outcome; None when it was not run
    speedup_vs_eager: float | None
    speedup_vs_compile: float | None
    # whose checks: KernelBench's own distributions and tolerances, changed so that every case
    # discriminates (``changes`` says how), or unknown (not imported by cudaopt import kernelbench)
    checks: Literal["kernelbench", "changed", "unknown"] = "unknown"
    changes: list[str] = Field(default_factory=list)


class FastP(WireModel):
    threshold: float
    fraction: float
    count: int  # correct and faster than the baseline by more than the threshold


class FastPReport(WireModel):
    """What ``cudaopt fast-p --json`` writes."""

    schema_version: int = version_field(1)
    baseline: Baseline
    runs: list[RunMetrics]
    fast_p: list[FastP]


def run_dirs(paths: list[Path]) -> list[Path]:
    """Run directories: each path itself, or the ``run-NNN`` directories inside it (a results folder)."""
    found = []
    for path in paths:
        if not path.exists():
            raise ExperimentError(path, "", "not found (give run directories or results folders)")
        if (path / RunDir.SUMMARY).is_file():
            found.append(path)
        elif path.is_dir() and sorted(path.glob(f"run-*/{RunDir.SUMMARY}")):
            found += [p.parent for p in sorted(path.glob(f"run-*/{RunDir.SUMMARY}"))]
        else:
            raise ExperimentError(path, "", f"not a run directory (no {RunDir.SUMMARY}) nor a folder of runs")
    return found


def run_metrics(path: Path) -> RunMetrics:
    run = open_run(path)
    summary = read_run_json(run, RunDir.SUMMARY, Summary)
    kb = summary.kernelbench
    if kb is None:
        raise ExperimentError(run.file(RunDir.SUMMARY), "kernelbench", "the run has no PyTorch eager vendor "
                                                                       "(import the problem with cudaopt import "
                                                                       "kernelbench)")
    verified = read_run_json(run, RunDir.VERIFY, VerifyOutcome).passed if run.file(RunDir.VERIFY).is_file() else None
    checks = "unknown" if kb.changes is None else "changed" if kb.changes else "kernelbench"
    return RunMetrics(run=str(path), description=summary.description.split("\n")[0][:120],
                      correct=kb.correct and verified is not False, verified=verified,
                      speedup_vs_eager=kb.speedup_vs_eager, speedup_vs_compile=kb.speedup_vs_compile,
                      checks=checks, changes=kb.changes or [])


def fast_p(runs: list[RunMetrics], threshold: float, baseline: Baseline = "eager") -> FastP:
    def faster(run: RunMetrics) -> bool:
        speedup = run.speedup_vs_eager if baseline == "eager" else run.speedup_vs_compile
        return run.correct and speedup is not None and speedup > threshold

    count = sum(faster(r) for r in runs)
    return FastP(threshold=threshold, fraction=count / len(runs) if runs else 0.0, count=count)


def report(paths: list[Path], thresholds: list[float], baseline: Baseline = "eager") -> FastPReport:
    runs = [run_metrics(p) for p in run_dirs(paths)]
    return FastPReport(baseline=baseline, runs=runs, fast_p=[fast_p(runs, t, baseline) for t in thresholds])
