"""The Python API (docs/api.md): what the command line does, as functions returning typed results.

Load an experiment, prepare a Trial (a kernel on it, checked once), evaluate it, optimise, verify,
replay, record its guard file, export. Each function returns the
types the audit pack is written from (``Evaluation``, ``Summary``, ``VerifyOutcome``,
``ReplayOutcome``, the written paths), raises :class:`~cudaopt.errors.ExperimentError` for bad input
(one line naming the file and the field) and ``WorkerError`` when no GPU worker can start. Progress
goes to one callback, ``on_progress(event)``, with the events of record/events.py: the terminal's
progress line is one such listener. Functions that measure take an ``evaluator`` (an open pool, from
:func:`gpus`, or any object with the ``Evaluator`` methods) or open a pool on ``devices`` for the
call. Nothing here touches a GPU before it is called: ``import cudaopt`` stays fast.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from .evaluate import Evaluation, evaluate_trial
from .errors import ExperimentError
from .pool.dispatch import Evaluator
from .guard.record import Recorded, record
from .experiment import Experiment, load_experiment
from .wire.messages import PhaseStarted
from .wire.protocol import LaunchSpec
from .optimize import Options, start_or_resume
from .record.events import OnProgress, PhaseProgress, StepProgress, ignore
from .record.runs import Budget, ExperimentArgs
from .record.files import ReplayOutcome, Summary, VerifyOutcome
from .trial import Trial, prepare_trial

__all__ = ["Evaluation", "Experiment", "RunResult", "Trial", "evaluate", "export", "gpus", "guard_record", "load",
           "optimize", "prepare_trial", "replay", "verify"]


def load(config: str | Path | None = None, *, description: str | None = None, signature: str | None = None,
         reference: str | Path | None = None, initial_kernel: str | Path | None = None,
         input_cases: str | Path | None = None, max_iterations: int | None = None) -> Experiment:
    """An experiment from a config file and/or the seed-style fields (fields win), checked as the CLI checks it."""
    p = lambda v: Path(v) if v is not None else None
    return load_experiment(p(config), description=description, signature=signature, reference=p(reference),
                           initial_kernel=p(initial_kernel), input_cases=p(input_cases), max_iterations=max_iterations)


@contextlib.contextmanager
def gpus(devices: list[int] | None = None, ray: str | None = None) -> Iterator[Evaluator]:
    """A pool of GPU workers (one per GPU of ``devices``, default every visible one; or a Ray cluster),
    for several calls in a row; closed on leaving the ``with`` block."""
    from .pool.pools import open_pool

    with open_pool(devices, ray) as pool:
        yield pool


@contextlib.contextmanager
def _pool(evaluator: Evaluator | None, devices: list[int] | None) -> Iterator[Evaluator]:
    if evaluator is not None:
        yield evaluator
    else:
        with gpus(devices) as pool:
            yield pool


def evaluate(experiment: Experiment | Trial, kernel: str | Path | None = None, *, entry: str | None = None,
             launch: LaunchSpec | dict | str | None = None, evaluator: Evaluator | None = None,
             devices: list[int] | None = None, on_progress: OnProgress = ignore) -> Evaluation:
    """Check and time a kernel file (default: the initial kernel) on the correctness and performance cases;
    every check of ``cudaopt evaluate`` runs first, before any GPU work. Given a Trial (from
    :func:`prepare_trial`), that trial is measured as prepared (``kernel``, ``entry``, ``launch`` not given)."""
    def event(message) -> None:
        if isinstance(message, PhaseStarted):
            on_progress(PhaseProgress(phase=message.phase, case=message.case))

    trial = _trial(experiment, kernel, entry, launch)
    with _pool(evaluator, devices) as pool:
        return evaluate_trial(trial, pool, on_event=event)


def _trial(experiment: Experiment | Trial, kernel, entry, launch) -> Trial:
    if not isinstance(experiment, Trial):
        return prepare_trial(experiment, Path(kernel) if kernel is not None else None, entry=entry, launch=launch,
                             origin="--launch", kernel_field="kernel")
    if any(v is not None for v in (kernel, entry, launch)):
        raise ExperimentError("kernel", "", "a Trial holds its kernel, entry and launch; give them to prepare_trial")
    return experiment


class RunResult:
    """A finished run: its directory and its summary (``summary.json``)."""

    def __init__(self, path: Path, summary: Summary):
        self.path, self.summary = path, summary

    def __repr__(self) -> str:
        return f"RunResult({str(self.path)!r}, best={self.summary.best_score_us}, speedup={self.summary.speedup})"


def optimize(config: str | Path, *, strategy: str = "agent", model: str = "openai:gpt-5-mini",
             base_url: str | None = None, budget: Budget | None = None, results: str | Path = "results",
             evaluator: Evaluator | None = None, devices: list[int] | None = None, resume: str | Path | None = None,
             on_progress: OnProgress = ignore, **options) -> RunResult:
    """Run ``strategy`` (tune, agent, agent+tune) on the experiment in ``config`` to a stop reason; the
    audit pack lands in ``results/run-NNN`` (or the run ``resume`` names goes on). ``options``: more of
    :class:`cudaopt.optimize.Options` (max_evals, seed, chat_model, proposals, ...)."""
    from . import strategies
    from .agent.model import ModelSettings

    if strategy not in strategies.names() or strategy == strategies.AUTO:
        raise ExperimentError("strategy", "", f"{strategy!r} is not one of "
                                              f"{', '.join(n for n in strategies.names() if n != strategies.AUTO)}")
    args = ExperimentArgs(config=str(Path(config).resolve()))
    settings = ModelSettings(model=model, base_url=base_url)
    with _pool(evaluator, devices) as pool:
        run, summary = start_or_resume(args, settings, budget or Budget(), Path(results), pool,
                                       Options(strategy=strategy, **options),
                                       resume=Path(resume) if resume else None, on_progress=on_progress)
    return RunResult(run.path, summary)


def verify(run: str | Path | Trial, *, cases: str | Path | None = None, shapes: str | Path | None = None, repeats: int = 3,
           seed: int | None = None, evaluator: Evaluator | None = None, devices: list[int] | None = None,
           on_progress: OnProgress = ignore) -> VerifyOutcome:
    """Check a run's winner (or a Trial) on the holdout cases (and ``cases``) with fresh seeds, time what
    should be timed; ``verify.json`` is written into the run (nothing is written for a Trial)."""
    from .winner.verify import verify as run_verify

    with _pool(evaluator, devices) as pool:
        return run_verify(run if isinstance(run, Trial) else Path(run), pool, Path(cases) if cases else None, seed,
                          shapes=Path(shapes) if shapes else None, repeats=repeats,
                          on_tool=lambda tool: on_progress(StepProgress(f"compute-sanitizer --tool {tool}", 0, 0)),
                          on_step=lambda what, done, total: on_progress(StepProgress(what, done, total)))


def replay(target: str | Path, *, repeats: int = 5, evaluator: Evaluator | None = None,
           devices: list[int] | None = None) -> ReplayOutcome:
    """Measure a run's winner (or one best-case-N.json) again beside its baseline."""
    from .winner.replay import replay as run_replay

    with _pool(evaluator, devices) as pool:
        return run_replay(Path(target), pool, repeats)


def guard_record(trial: Trial, *, out: str | Path = "guard.json", repeats: int = 5, seed: int | None = None,
                 evaluator: Evaluator | None = None, devices: list[int] | None = None,
                 on_progress: OnProgress = ignore) -> Recorded:
    """Check a Trial on every case (holdout included) and time it, as ``cudaopt guard record``: the guard
    file's content (``baseline``, written to ``out``), or, with nothing written, the ``failures``. The Trial
    must come from :func:`prepare_trial` on an ``ExperimentArgs`` (the file records how to load it
    again) or from a run (``winner_trial``)."""
    from .record.rundir import write_atomic

    if trial.args is None:
        raise ExperimentError("trial", "", "a guard file records how its experiment was given: prepare the trial "
                                           "from an ExperimentArgs (or a run's winner)")
    out = Path(out)
    with _pool(evaluator, devices) as pool:
        done = record(trial, pool, out=out, repeats=repeats, seed=seed,
                      on_progress=lambda text: on_progress(StepProgress(text, 0, 0)))
    if done.baseline is not None:
        write_atomic(out, done.baseline.to_json(indent=2) + "\n")
    return done


def export(run: str | Path | None = None, *, to: str, out: str | Path, experiment: Experiment | None = None,
           kernel: str | Path | None = None, entry: str | None = None, launch: str | None = None,
           unverified: bool = False, force: bool = False) -> list[Path]:
    """Write a run's verified winner (or, with ``experiment``, a kernel file) as target ``to``
    (torch, cuda, kernelbench) into the folder ``out``; the paths written."""
    from . import exporter as targets

    if (run is None) == (experiment is None):
        raise ExperimentError("export", "", "give a run directory or an experiment (with kernel, entry, launch)")
    if run is not None:
        if any(v is not None for v in (kernel, entry, launch)):
            raise ExperimentError("export", "", "kernel, entry and launch come from the run; give them with an "
                                                "experiment instead")
        src = targets.from_run(Path(run), unverified=unverified)
    else:
        src = targets.from_flags(experiment, kernel=Path(kernel) if kernel else None, entry=entry, launch=launch,
                                 unverified=unverified)
    return targets.write(src, to, Path(out), force=force)
