"""``guard_record`` and ``guard_check``: the kernel regression guard for CI (``cudaopt guard record``
and ``guard check``, docs/guard.md)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ..errors import ExperimentError
from ..guard.check import Settings
from ..guard.check import check as run_check
from ..guard.files import GuardReport
from ..guard.junit import junit_xml
from ..guard.load import load_guard
from ..guard.record import Recorded, record
from ..guard.summaries import guard_markdown
from ..paths import check_output_path
from ..pool.dispatch import Evaluator
from ..record.events import OnProgress, StepProgress, ignore
from ..record.rundir import write_atomic
from ..trial import LaunchGiven, Trial, winner_trial
from .arguments import check as check_arguments
from .arguments import path_of
from .experiments import Given, PathArg, trial_of
from .workers import chosen, workers


def guard_record(run: PathArg | Trial | None = None, *, experiment: Given | Trial | None = None,
                 kernel: PathArg | None = None, entry: str | None = None, launch: LaunchGiven = None,
                 out: PathArg = "guard.json", repeats: int = 5, warmup: int | None = None,
                 iterations: int | None = None, seed: int | None = None, evaluator: Evaluator | None = None,
                 device: int = 0, on_progress: OnProgress = ignore) -> Recorded:
    """Check a kernel on every case (holdout included) and time it (``cudaopt guard record``): a run's
    winner, a prepared Trial, or a kernel with its experiment (default: the initial kernel). The
    guard file's content (``baseline``) is written to ``out``; when a case fails, nothing is written
    and ``failures`` says why. The experiment must say how it was given (a config path,
    ExperimentArgs, or what api.load returned): the guard file records it."""
    check_arguments({"repeats": repeats, "warmup": warmup, "iterations": iterations, "seed": seed, "device": device,
                     "entry": entry}, lowest={"repeats": 2})
    if isinstance(run, Trial) and experiment is None:
        run, experiment = None, run
    target = path_of(out, "out")
    checks = dict(warmup=warmup, iterations=iterations, outputs=[(target, "--out")], on_progress=on_progress)
    if run is not None:
        if any(v is not None for v in (experiment, kernel, entry, launch)):
            raise ExperimentError(run, "", "give a run directory or an experiment (--config, --kernel, ...), not both")
        trial = winner_trial(path_of(run, "run"), what="record", **checks)
    elif experiment is not None:
        trial = trial_of(experiment, kernel, entry=entry, launch=launch, **checks)
    else:
        raise ExperimentError("RUN_DIR", "", "give a run directory or an experiment (--config, --kernel, ...)")
    if trial.args is None:
        raise ExperimentError("--config", "", "a guard file records how its experiment was given: give a config "
                                              "path, ExperimentArgs or what api.load returned")
    with workers(chosen(device), evaluator, on_progress) as pool:
        done = record(trial, pool, out=target, repeats=repeats, seed=seed,
                      on_progress=lambda text: on_progress(StepProgress(text, 0, 0)))
    if done.baseline is not None:
        write_atomic(target, done.baseline.to_json(indent=2) + "\n")
    return done


def guard_check(files: PathArg | Sequence[PathArg], *, against: PathArg | None = None, against_ref: str | None = None,
                max_slowdown: str | float = "3%", confidence: float = 0.95, repeats: int | None = None,
                quick: bool = False, other_gpu: str = "fail", seed: int | None = None, junit: PathArg | None = None,
                markdown: PathArg | None = None, json_out: PathArg | None = None, evaluator: Evaluator | None = None,
                device: int = 0, on_progress: OnProgress = ignore) -> GuardReport:
    """Check kernels against their guard files (``cudaopt guard check``): correct on every case with
    fresh seeds, and not slower beyond ``max_slowdown`` (``"3%"`` or ``0.03``) with ``confidence``;
    A/B beside the old kernel (``against``, ``against_ref``) or against the recorded figures. The
    report, also written as JUnit XML, Markdown and JSON where asked."""
    check_arguments({"confidence": confidence, "repeats": repeats, "seed": seed, "device": device},
                    lowest={"repeats": 2})
    paths = [path_of(f, "files", True) for f in (files if isinstance(files, (list, tuple)) else [files])]
    if not paths:
        raise ExperimentError("FILES", "", "give at least one guard file")
    old = path_of(against, "against")
    if old is not None and against_ref is not None:
        raise ExperimentError("--against", "", "give --against or --against-ref, not both")
    if old is not None and len(paths) > 1:
        raise ExperimentError("--against", "", f"names one old kernel, but {len(paths)} guard files were given "
                                               "(use --against-ref for many)")
    if other_gpu not in ("fail", "skip"):
        raise ExperimentError("--other-gpu", "", f"{other_gpu!r} is not fail or skip")
    settings = Settings(max_slowdown=slowdown(max_slowdown), confidence=confidence, repeats=repeats, quick=quick,
                        other_gpu=other_gpu, seed=seed)
    outputs = {"--junit": path_of(junit, "junit"), "--markdown": path_of(markdown, "markdown"),
               "--json": path_of(json_out, "json_out")}
    for option, path in outputs.items():
        if path is not None:
            check_output_path(path, option)
    guarded = [load_guard(f, old, against_ref) for f in paths]  # every file before any GPU work
    with workers(chosen(device), evaluator, on_progress) as pool:
        checks = [run_check(g, pool, settings, on_progress=lambda text: on_progress(StepProgress(text, 0, 0)))
                  for g in guarded]
    report = GuardReport(passed=all(c.passed for c in checks), checks=checks)
    written = {"--junit": junit_xml(report), "--markdown": guard_markdown(report),
               "--json": report.to_json(indent=2) + "\n"}
    for option, path in outputs.items():
        if path is not None:
            write_atomic(path, written[option])
    return report


def slowdown(given: str | float) -> float:
    """``max_slowdown`` as a fraction: "3%" and 0.03 both mean 3%; "3" is refused (300% or 3%?)."""
    text = str(given).strip()
    try:
        value = float(text.removesuffix("%")) / (100 if text.endswith("%") else 1)
    except ValueError:
        raise ExperimentError("--max-slowdown", "", f"{text!r} is not a percentage (3%) or a fraction (0.03)") from None
    if not 0 <= value < 1:
        raise ExperimentError("--max-slowdown", "", f"{text!r}: give a percentage below 100% (3%) or a fraction "
                                                    "below 1 (0.03)")
    return value
