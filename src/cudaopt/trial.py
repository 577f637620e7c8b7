"""A Trial: one kernel on one experiment (its entry, its launch, the timing protocol), prepared and
checked once before any GPU work.

``cudaopt evaluate``, ``guard record`` and the Python API take one, so each step runs once and in
one order whoever calls: the experiment loaded, the kernel file read and held to the signature,
the launch read, the protocol with the caller's overrides, the output paths checked, then the
checks of ``cudaopt check`` (preflight.py). A run's winner becomes a Trial with
:func:`winner_trial`: the experiment the run holds (lock-checked), best.cu and best-launch.json.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, replace
from pathlib import Path

from .checks import kernel_file
from .errors import ExperimentError
from .experiment import Experiment, load_launch
from .wire.protocol import LaunchSpec, TimingProtocol
from .paths import check_output_path
from .preflight import preflight
from .record.runs import ExperimentArgs

LaunchGiven = LaunchSpec | dict | str | None  # the model, its data, or JSON text / a JSON file (as --launch)


@dataclass(frozen=True)
class Trial:
    """What a measurement of one kernel needs, checked: nothing here is read again."""

    experiment: Experiment
    kernel: Path  # the kernel file
    source: str  # its text, its entry matched to the signature
    protocol: TimingProtocol  # the experiment's, with the caller's warm-up and iterations
    entry: str | None = None  # None: the signature's name
    launch: LaunchSpec | None = None  # None: each case's own launch
    args: ExperimentArgs | None = None  # how the experiment was given, when it was (a guard file keeps it)

    @property
    def entry_name(self) -> str:
        return self.entry or self.experiment.signature.name


def launch_origin(text: str | None) -> str:
    """How errors name a launch given as text: the flag for JSON written inline, else its file."""
    return "--launch" if text is None or text.lstrip().startswith("{") else text


def as_launch(launch: LaunchGiven) -> LaunchSpec | None:
    """A launch given as the model, its data, or JSON text / a JSON file (as --launch)."""
    if launch is None or isinstance(launch, LaunchSpec):
        return launch
    if isinstance(launch, dict):
        return load_launch(json.dumps(launch))
    return load_launch(str(launch))


def prepare_trial(experiment: Experiment | ExperimentArgs, kernel: Path | None = None, *, entry: str | None = None,
                  launch: LaunchGiven = None, origin: str | None = None, warmup: int | None = None,
                  iterations: int | None = None, outputs: Sequence[tuple[Path, str]] = (),
                  kernel_field: str = "--kernel",
                  checking: Callable[[], AbstractContextManager] = contextlib.nullcontext) -> Trial:
    """Load and check everything a measurement of ``kernel`` (default: the initial kernel) needs, in
    one order; raise :class:`ExperimentError` (file or flag, and field) at the first problem.
    ``origin`` names the launch in errors (default: the flag, or the file it was read from);
    ``outputs`` are (path, flag) pairs that must take a file; ``kernel_field`` names the kernel in
    errors (the flag, or the API's argument); ``checking`` frames the preflight (a spinner)."""
    args = experiment if isinstance(experiment, ExperimentArgs) else None
    exp = args.load() if args is not None else experiment
    path = kernel or exp.initial_kernel_path
    if path is None:
        raise ExperimentError(kernel_field, "", "no kernel given and the experiment has no initial kernel")
    source = kernel_file(path, entry or exp.signature.name, exp.signature, field=kernel_field)
    spec = as_launch(launch)
    protocol = exp.protocol()
    if warmup is not None:
        protocol.warmup = warmup
    if iterations is not None:
        protocol.iterations = iterations
    for out, flag in outputs:
        check_output_path(out, flag)
    if origin is None:
        origin = launch_origin(launch if isinstance(launch, str) else None)
    with checking():
        preflight(exp, kernel=path, entry=entry, tune=False, launch=spec, launch_origin=origin)
    return Trial(experiment=exp, kernel=path, source=source, protocol=protocol, entry=entry, launch=spec, args=args)


def winner_trial(run_dir: Path, *, what: str = "measure", **options) -> Trial:
    """A run's winner as shipped (best.cu, best-launch.json) on the experiment the run holds, its
    lock checked; ``what`` says what a run without a winner cannot have done (in the error);
    ``options`` as :func:`prepare_trial`'s (warm-up, iterations, outputs, checking)."""
    from .record.runs import RunSettings, load_run_experiment, open_run, read_run_json, winner

    run = open_run(run_dir)
    experiment = load_run_experiment(run)
    winner(run, what)  # the run has one
    launch = run.file("best-launch.json")
    trial = prepare_trial(experiment, run.file("best.cu"), launch=str(launch) if launch.is_file() else None,
                          origin="best-launch.json", **options)
    return replace(trial, args=read_run_json(run, "settings.json", RunSettings).experiment)
