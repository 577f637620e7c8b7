"""``cudaopt guard record``: a kernel's figures, taken once and committed as its guard file.

The kernel must pass every case of the experiment, holdout included, with fresh seeds; then the
performance cases are timed ``repeats`` times with the experiment's protocol (the vendor
baseline, when there is one, beside the first repeat). Nothing is written unless all of that
passed, so a failed record never replaces a guard file.
"""

from __future__ import annotations

import datetime as dt
import os
import secrets
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from .. import __version__
from ..pool.dispatch import Evaluator
from ..wire.results import EvalResult
from ..trial import Trial
from ..winner.verify import fresh_cases
from .files import GuardBaseline, GuardCase, GuardKernel, relative_args
from .load import Kernel, sha256


@dataclass
class Recorded:
    """The guard file's content, or why the kernel could not be recorded."""

    baseline: GuardBaseline | None
    failures: list[str] = field(default_factory=list)


def record(trial: Trial, evaluator: Evaluator, *, out: Path, repeats: int = 5, seed: int | None = None,
           on_progress: Callable[[str], None] = lambda text: None) -> Recorded:
    """Check and time ``trial`` (its ``args``: how the guard file will find the experiment again)."""
    if trial.args is None:
        raise ValueError("a guard file records how its experiment was given: the trial needs its args")
    experiment, protocol, kernel, source = trial.experiment, trial.protocol, trial.kernel, trial.source
    seed = secrets.randbits(31) if seed is None else seed
    subject = Kernel(trial, str(kernel))
    cases = fresh_cases(experiment.cases(), seed)
    on_progress(f"checking {len(cases)} cases")
    checked = evaluator.evaluate(subject.request(cases, timed=False))
    if not checked.ok:
        return Recorded(None, _failures(checked))
    perf = [c for c in cases if c.role == "performance"]
    results: list[EvalResult] = []
    for repeat in range(repeats if perf else 0):
        on_progress(f"timing {len(perf)} cases: repeat {repeat + 1}/{repeats}")
        result = evaluator.evaluate(subject.request(perf, timed=True, vendor=repeat == 0))
        if not result.ok:
            return Recorded(None, _failures(result))
        results.append(result)
    figures = []
    for case in perf:
        medians = [r.case(case.name).median_us for r in results]
        first = results[0].case(case.name)
        figures.append(GuardCase(name=case.name, median_us=statistics.median(medians), medians_us=medians,
                                 timing=first.timing, vendor_median_us=first.vendor_median_us(0)))
    folder = out.parent
    return Recorded(GuardBaseline(
        cudaopt_version=__version__,
        recorded_at=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        experiment=relative_args(trial.args, folder),
        lock=experiment.lock(),
        kernel=GuardKernel(file=os.path.relpath(kernel.resolve(), folder.resolve()), entry=trial.entry_name,
                           sha256=sha256(source), launch=trial.launch),
        protocol=protocol, repeats=repeats, seed=seed, gpu=evaluator.device_info(),
        vendor=experiment.primary_vendor.label if experiment.primary_vendor else None,
        cases=figures, checked=[c.name for c in checked.cases],
    ))


def _failures(result: EvalResult) -> list[str]:
    lines = [f"{c.name}: {c.status}: {' '.join(c.reason.split())}" for c in result.cases if c.status != "ok"]
    return lines or [f"{result.status}: {' '.join(result.reason.split())}"]
