"""``load``, ``check`` and ``evaluate``: an experiment, checked without a GPU, and one kernel on it
measured (``cudaopt check`` and ``cudaopt evaluate``).

An experiment is given as a config path (``str`` or ``Path``), as :class:`ExperimentArgs` (a config
and/or the seed-style fields, as the flags give them), as an :class:`Experiment` already loaded
(:func:`load`, or built in Python by ``api.experiment``), or, to ``evaluate``, as a prepared
:class:`Trial`.
"""

from __future__ import annotations

import os
import re

from ..cpu_controls import refuse_results
from ..errors import ExperimentError
from ..evaluate import Evaluation, evaluate_trial
from ..experiment import Experiment, ExperimentArgs, kernel_file
from ..paths import check_output_path
from ..pool.dispatch import Evaluator
from ..preflight import Checked, preflight
from ..record.events import OnProgress, PhaseProgress, StepProgress, ignore
from ..record.rundir import write_atomic
from ..trial import LaunchGiven, Trial, as_launch, launch_origin
from ..trial import prepare_trial as prepare
from ..wire.messages import PhaseStarted
from .arguments import check as check_arguments
from .arguments import path_of
from .workers import Devices, chosen, workers

PathArg = str | os.PathLike
Given = Experiment | ExperimentArgs | PathArg  # how a function is given an experiment


def load(config: PathArg | None = None, *, description: str | None = None, signature: str | None = None,
         reference: PathArg | None = None, initial_kernel: PathArg | None = None,
         input_cases: PathArg | None = None, max_iterations: int | None = None) -> Experiment:
    """An experiment from a config file and/or the seed-style fields (fields win), checked as
    every command checks it."""
    check_arguments({"description": description, "signature": signature, "max_iterations": max_iterations})
    paths = {name: path_of(value, name) for name, value in (("config", config), ("reference", reference),
                                                             ("initial_kernel", initial_kernel),
                                                             ("input_cases", input_cases))}
    return ExperimentArgs(**{name: str(path) if path is not None else None for name, path in paths.items()},
                          description=description, signature=signature, max_iterations=max_iterations).load()


def experiment_of(given: Given) -> Experiment:
    """The experiment ``given`` stands for, loaded (bad input: one line naming the file and field)."""
    if isinstance(given, Experiment):
        return given
    if isinstance(given, ExperimentArgs):
        return given.load()
    if isinstance(given, (str, os.PathLike)):
        return ExperimentArgs(config=str(given)).load()
    raise ExperimentError("--config", "", f"a {type(given).__name__} is no experiment: give a config path, "
                                          "ExperimentArgs or an Experiment (api.load, api.experiment)")


def check(experiment: Given, *, kernel: PathArg | None = None, entry: str | None = None,
          launch: LaunchGiven = None, arch: str | None = None) -> list[Checked]:
    """Every check that needs no GPU (``cudaopt check``): files, fields, every expression on every
    case, each case's launch (or ``launch``, for every case) against the kernel, the reference (a
    ``.py`` one called on the smallest case, the negative controls on the CPU), each kernel
    (``kernel`` instead of the initial one) compiled with NVRTC for ``arch`` (default: this
    machine's GPU, else sm_90a). What was checked, one line each."""
    check_arguments({"entry": entry, "arch": arch})
    exp = experiment_of(experiment)
    path = path_of(kernel, "kernel") or (exp.initial_kernel_path if entry is not None or launch is not None else None)
    if path is None and (entry is not None or launch is not None):
        raise ExperimentError("--entry" if launch is None else "--launch", "", "no kernel to check it with: give "
                                                                                "--kernel (the experiment has no "
                                                                                "initial kernel)")
    if path is not None:
        kernel_file(path, entry or exp.signature.name, exp.signature)
    if arch is not None and not re.fullmatch(r"sm_\d{2,3}[a-z]?", arch):
        raise ExperimentError("--arch", "", f"{arch!r} is not an architecture such as sm_90a")
    spec = as_launch(launch)
    origin = launch_origin(launch if isinstance(launch, str) else None)
    return preflight(exp, kernel=path, entry=entry, arch=arch, launch=spec, launch_origin=origin)


def prepare_trial(experiment: Given, kernel: PathArg | None = None, *, entry: str | None = None,
                  launch: LaunchGiven = None, warmup: int | None = None, iterations: int | None = None,
                  on_progress: OnProgress = ignore) -> Trial:
    """A kernel (default: the initial kernel) on the experiment, with its launch and your warm-up and
    iterations, every check of ``cudaopt evaluate`` done once: hand it to ``evaluate``, ``verify``,
    ``guard_record``."""
    check_arguments({"entry": entry, "warmup": warmup, "iterations": iterations})
    return trial_of(experiment, kernel, entry=entry, launch=launch, warmup=warmup, iterations=iterations,
                    on_progress=on_progress)


def trial_of(experiment: Given | Trial, kernel: PathArg | None = None, *, entry: str | None = None,
             launch: LaunchGiven = None, warmup: int | None = None, iterations: int | None = None,
             outputs=(), on_progress: OnProgress = ignore) -> Trial:
    """A Trial prepared once (:func:`~cudaopt.trial.prepare_trial`), or the one given as it is."""
    if not isinstance(experiment, Trial):
        given = experiment if isinstance(experiment, (Experiment, ExperimentArgs)) else experiment_of(experiment)
        return prepare(given, path_of(kernel, "kernel"), entry=entry, launch=launch, warmup=warmup,
                       iterations=iterations, outputs=outputs, on_progress=on_progress)
    extra = [name for name, v in (("--kernel", kernel), ("--entry", entry), ("--launch", launch), ("--warmup", warmup),
                                  ("--iterations", iterations)) if v is not None]
    if extra:
        raise ExperimentError(extra[0], "", "a Trial holds its kernel, entry, launch and protocol: give them to "
                                            "prepare_trial")
    for out, flag in outputs:
        check_output_path(out, flag)
    return experiment


def evaluate(experiment: Given | Trial, kernel: PathArg | None = None, *, entry: str | None = None,
             launch: LaunchGiven = None, warmup: int | None = None, iterations: int | None = None,
             time_reference: bool = True, json_out: PathArg | None = None, evaluator: Evaluator | None = None,
             device: int | None = None, devices: Devices = None, ray: str | None = None,
             on_progress: OnProgress = ignore) -> Evaluation:
    """Check and time a kernel (default: the initial kernel) on the correctness and performance
    cases (``cudaopt evaluate``), with the vendor baseline and a ``.cu`` reference timed beside it
    (``time_reference``). Every check of :func:`check` runs first, before any GPU work; the result
    is written to ``json_out`` when given; a case that accepted a trivial output (the GPU's
    negative controls) is then refused as bad input, as the CPU's are, and so is a kernel whose
    compiled code uses math the experiment's precision policy leaves out."""
    check_arguments({"entry": entry, "warmup": warmup, "iterations": iterations, "device": device, "ray": ray})
    choice = chosen(device, devices, ray)
    out = path_of(json_out, "json_out")
    trial = trial_of(experiment, kernel, entry=entry, launch=launch, warmup=warmup, iterations=iterations,
                     outputs=[(out, "--json")] if out is not None else [], on_progress=on_progress)
    exp = trial.experiment
    name = trial.kernel.name if trial.kernel is not None else "the kernel"
    on_progress(StepProgress(f"evaluating {name} on {len(exp.cases({'correctness', 'performance'}))} cases", 0, 0))

    def event(message) -> None:
        if isinstance(message, PhaseStarted):
            on_progress(PhaseProgress(phase=message.phase, case=message.case))

    with workers(choice, evaluator, on_progress) as pool:
        result = evaluate_trial(trial, pool, time_reference=time_reference, on_event=event)
    if out is not None:
        write_atomic(out, result.to_json(indent=2) + "\n")  # what was measured is kept, even when refused next
    refuse_results(exp, result.candidate.cases)
    if result.candidate.status == "precision":  # the worker read the policy's breach in the compiled code
        raise ExperimentError(trial.kernel or "the kernel", "limits.precision", result.candidate.reason)
    return result
