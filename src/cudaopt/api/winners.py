"""``verify``, ``replay`` and ``report``: what stands on a finished run's winner (``cudaopt verify``,
``replay`` and ``report``). Each reads and checks everything it needs before any GPU work, and a
run's ``report.html`` is rebuilt once ``verify.json`` or ``replay.json`` changed, so the verdict it
shows is never stale, whichever door was taken.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError

from ..config import RoiInputs
from ..errors import ExperimentError, validation_message
from ..paths import writable
from ..pool.dispatch import Evaluator
from ..record.events import OnProgress, StepProgress, ignore
from ..record.files import ReplayOutcome, Summary, VerifyOutcome
from ..record.rundir import RunDir
from ..record.runs import open_run, read_run_json
from ..report.build import build, run_roi
from ..trial import Trial
from ..winner.replay import load_target
from ..winner.replay import replay as run_replay
from ..winner.sanitize import find_sanitizer
from ..winner.verify import prepare
from ..winner.verify import verify as run_verify
from .arguments import check as check_arguments
from .arguments import path_of
from .experiments import PathArg
from .workers import Devices, chosen, workers


def verify(run: PathArg | Trial, *, cases: PathArg | None = None, shapes: PathArg | None = None, repeats: int = 3,
           seed: int | None = None, sanitize: bool = False, evaluator: Evaluator | None = None,
           device: int | None = None, devices: Devices = None, ray: str | None = None,
           on_progress: OnProgress = ignore) -> VerifyOutcome:
    """Check a run's winner (or a Trial) on the holdout cases (and the extra ``cases``) with fresh
    seeds, and time the holdout cases that declare their work (and every shape of ``shapes``) beside
    the baseline and the vendor; ``sanitize`` also runs it under compute-sanitizer. A run gets
    ``verify.json`` and its report rebuilt; nothing is written for a Trial."""
    check_arguments({"repeats": repeats, "seed": seed, "device": device, "ray": ray})
    choice = chosen(device, devices, ray)
    target = run if isinstance(run, Trial) else path_of(run, "run", required=True)
    extra, grid = path_of(cases, "cases"), path_of(shapes, "shapes")
    prepared = prepare(target, extra, grid)  # read once, before any GPU work
    if sanitize:
        if ray is not None:
            raise ExperimentError("--sanitize", "", "runs compute-sanitizer on this machine's GPU; it does not "
                                                    "combine with --ray")
        if prepared.run is None:
            raise ExperimentError("--sanitize", "", "compute-sanitizer writes its logs into a run directory: "
                                                    "verify a run")
        find_sanitizer()  # before any GPU work: a missing tool is bad input
    with workers(choice, evaluator, on_progress) as pool:
        outcome = run_verify(target, pool, extra, seed,
                             sanitize_device=pool.gpus()[0].index if sanitize else None,
                             on_tool=lambda tool: on_progress(StepProgress(f"compute-sanitizer --tool {tool}", 0, 0)),
                             shapes=grid, repeats=repeats,
                             on_step=lambda what, done, total: on_progress(StepProgress(f"timing {what}", done, total)),
                             prepared=prepared)
    _refresh(prepared.run)
    return outcome


def replay(target: PathArg, *, repeats: int = 5, evaluator: Evaluator | None = None, device: int | None = None,
           devices: Devices = None, ray: str | None = None, on_progress: OnProgress = ignore) -> ReplayOutcome:
    """Measure a run's winner (or one ``best-case-N.json`` request) again beside its baseline,
    interleaved: recorded vs now, within noise or not, beats the baseline or not. A run gets
    ``replay.json`` and its report rebuilt."""
    check_arguments({"repeats": repeats, "device": device, "ray": ray})
    choice = chosen(device, devices, ray)
    loaded = load_target(path_of(target, "target", required=True))  # read once, before any GPU work
    with workers(choice, evaluator, on_progress) as pool:
        outcome = run_replay(loaded, pool, repeats)
    _refresh(loaded.run)
    return outcome


def _refresh(run: RunDir | None) -> None:
    """The run's report.html rebuilt: its verdict reads verify.json and replay.json."""
    if run is not None and run.file(RunDir.SUMMARY).is_file():
        build(run.path)


def report(run: PathArg, *, engineer_hours: float | None = None, engineer_rate_usd: float | None = None,
           gpu_hour_usd: float | None = None, calls_per_month: float | None = None,
           payback_window_months: float | None = None, roi_case: str | None = None) -> Path:
    """Rebuild a run's self-contained ``report.html`` (verdict, per-case table, charts, attempts,
    usage, ROI), the ROI inputs given here overriding the experiment's ``roi`` section; its path."""
    given = {"engineer_hours": engineer_hours, "engineer_rate_usd": engineer_rate_usd, "gpu_hour_usd": gpu_hour_usd,
             "calls_per_month": calls_per_month, "payback_window_months": payback_window_months}
    check_arguments(given)
    path = path_of(run, "run", required=True)
    if not path.exists():
        raise ExperimentError(path, "", "not found")
    if not (path / RunDir.SUMMARY).is_file() or not (path / RunDir.HISTORY).is_file():
        raise ExperimentError(path, "", f"not a run directory (no {RunDir.SUMMARY})")
    if not writable(path):
        raise ExperimentError(path, "", f"not writable: {RunDir.REPORT} is written in the run directory")
    opened = open_run(path)
    if roi_case is not None:
        cases = [c.name for c in read_run_json(opened, RunDir.SUMMARY, Summary).cases]
        if roi_case not in cases:
            raise ExperimentError("--roi-case", "", f"{roi_case!r} is not a case of the run ({', '.join(cases)})")
    given["case"] = roi_case
    base = run_roi(opened).model_dump()
    try:
        inputs = RoiInputs(**{**base, **{k: v for k, v in given.items() if v is not None}})
    except ValidationError as exc:
        field, message = validation_message(exc, RoiInputs)
        raise ExperimentError(f"--{field.replace('_', '-')}" if given.get(field) is not None else path,
                              "" if given.get(field) is not None else f"roi.{field}", message) from None
    try:
        return build(path, inputs)
    except PermissionError as exc:  # writable by the check above, yet refused (a mount's rules, say)
        raise ExperimentError(path, "", f"{RunDir.REPORT} cannot be written: {exc.strerror}") from None
