"""A Trial: one kernel on one experiment (its entry, its launch, the timing protocol), prepared and
checked once before any GPU work.

``cudaopt evaluate``, ``guard record``, ``guard check``, ``verify``, ``replay``, the run engine
and the Python API take one, so each step runs once and in one order whoever calls: the
experiment loaded, the kernel file read and held to the signature, the launch read, the protocol
with the caller's overrides, the output paths checked, then the checks of ``cudaopt check``
(preflight.py). A run's winner becomes a Trial with :func:`winner_trial` (as shipped: best.cu and
best-launch.json) or :func:`recorded_trial` (as the run recorded it: the attempt's source, tunable
values and launch); kernel text already checked where it came from (a guard file's kernel, a
benchmark's) with :func:`source_trial`. Every Trial is made here, and every request a Trial's
kernel is measured with comes from :meth:`Trial.request`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from .errors import ExperimentError
from .experiment import Experiment, ExperimentArgs, kernel_file
from .reading import load_launch
from .wire.protocol import OPTIMIZE_TIMED_MS, CaseSpec, EvalRequest, LaunchSpec, TimingProtocol, Timeouts
from .paths import check_output_path
from .preflight import preflight
from .record.rundir import RunDir
from .record.events import OnProgress, StepProgress, ignore
from .record.files import Attempt
from .record.runs import RunSettings, load_run_experiment, open_run, read_run_json, winner

LaunchGiven = LaunchSpec | dict | str | None  # the model, its data, or JSON text / a JSON file (as --launch)


@dataclass(frozen=True)
class Trial:
    """What a measurement of one kernel needs, checked: nothing here is read again."""

    experiment: Experiment
    kernel: Path | None  # the kernel file (None: a run's candidate, its source recorded by the run)
    source: str | None  # its text, its entry matched to the signature (None: no kernel, the vendors alone)
    protocol: TimingProtocol  # the experiment's, with the caller's warm-up and iterations
    entry: str | None = None  # None: the signature's name
    launch: LaunchSpec | None = None  # None: each case's own launch
    args: ExperimentArgs | None = None  # how the experiment was given, when it was (a guard file keeps it)
    defines: dict = field(default_factory=dict)  # tunable values (#defines), as an attempt recorded them
    attempt: Attempt | None = None  # the run's attempt this kernel is (its recorded figures), when from a run

    @property
    def entry_name(self) -> str:
        return self.entry or self.experiment.signature.name

    def request(self, *, roles: set[str] | None = None, cases: Sequence[CaseSpec] | None = None,
                protocol: TimingProtocol | None = None, timeouts: Timeouts | None = None, request_id: str = "",
                vendor: bool = False, timed: bool = True) -> EvalRequest:
        """This kernel (entry, launch, tunable values) on the experiment's cases of ``roles`` (default:
        correctness and performance), or on ``cases`` (fresh seeds: the caller's); with the trial's
        protocol unless given; ``timed`` False: checked only; ``vendor``: the vendors timed beside it."""
        made = self.experiment.request(self.source, entry=self.entry, launch=self.launch, defines=self.defines,
                                       roles=roles, protocol=(protocol or self.protocol).model_copy(), timeouts=timeouts,
                                       request_id=request_id, vendor=vendor)
        if cases is not None:
            made.cases = list(cases)
        if not timed:
            made.time_roles = []
        return made

    def variant(self, source: str | None, launch: LaunchSpec | None, defines: dict | None = None) -> Trial:
        """Another kernel on the same experiment and protocol (a candidate of a run; ``source`` None:
        no kernel, the vendors alone)."""
        return replace(self, source=source, launch=launch, defines=dict(defines or {}), entry=None, attempt=None)


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
                  iterations: int | None = None, outputs: Sequence[tuple[Path, str]] = (), checks: bool = True,
                  kernel_field: str = "--kernel", on_progress: OnProgress = ignore) -> Trial:
    """Load and check everything a measurement of ``kernel`` (default: the initial kernel) needs, in
    one order; raise :class:`ExperimentError` (file or flag, and field) at the first problem.
    ``origin`` names the launch in errors (default: the flag, or the file it was read from);
    ``outputs`` are (path, flag) pairs that must take a file; ``checks`` False leaves out the
    checks of ``cudaopt check`` (a run's winner, checked when the run recorded it); the step they
    run in is said to ``on_progress``; ``kernel_field`` names the kernel file's field in errors
    (the flag that gave it; none for a run's own file)."""
    args = experiment if isinstance(experiment, ExperimentArgs) else experiment.args
    exp = args.load() if isinstance(experiment, ExperimentArgs) else experiment
    path = kernel or exp.initial_kernel_path
    if path is None:
        raise ExperimentError("--kernel", "", "no kernel given and the experiment has no initial kernel")
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
    if checks:
        on_progress(StepProgress("checking the experiment", 0, 0))
        preflight(exp, kernel=path, entry=entry, tune=False, launch=spec, launch_origin=origin)
    return Trial(experiment=exp, kernel=path, source=source, protocol=protocol, entry=entry, launch=spec, args=args)


def winner_trial(run_dir: Path | RunDir, *, what: str = "measure", **options) -> Trial:
    """A run's winner as shipped (best.cu, best-launch.json) on the experiment the run holds, its
    lock checked; ``what`` says what a run without a winner cannot have done (in the error);
    ``options`` as :func:`prepare_trial`'s (warm-up, iterations, outputs, checks, on_progress)."""
    run = run_dir if isinstance(run_dir, RunDir) else open_run(run_dir)
    experiment = load_run_experiment(run)
    best = winner(run, what)  # the run has one
    launch = run.file(RunDir.BEST_LAUNCH)
    trial = prepare_trial(experiment, run.file(RunDir.BEST), launch=str(launch) if launch.is_file() else None,
                          origin=RunDir.BEST_LAUNCH, kernel_field="", **options)
    return replace(trial, args=read_run_json(run, RunDir.SETTINGS, RunSettings).experiment, attempt=best.attempt)


def recorded_trial(run_dir: Path | RunDir, *, what: str = "verify") -> Trial:
    """A run's winner as the run recorded it (the attempt's source, tunable values and launch), on
    the experiment the run holds, its lock checked: what ``verify`` and ``replay`` measure. It was
    checked when it was recorded, so it is not preflighted again."""
    run = run_dir if isinstance(run_dir, RunDir) else open_run(run_dir)
    experiment = load_run_experiment(run)
    best = winner(run, what)
    return Trial(experiment=experiment, kernel=run.file(best.attempt.source_file), source=best.source,
                 protocol=experiment.protocol(), launch=best.launch, defines=best.defines, attempt=best.attempt,
                 args=read_run_json(run, RunDir.SETTINGS, RunSettings).experiment)


def source_trial(experiment: Experiment, source: str | None, *, kernel: Path | None = None, entry: str | None = None,
                 launch: LaunchSpec | None = None, protocol: TimingProtocol | None = None,
                 args: ExperimentArgs | None = None) -> Trial:
    """Kernel text taken as it is given, already checked where it came from (a guard file's kernel,
    now or at a git commit; a benchmark's): nothing read, no pre-flight; the experiment's protocol
    unless ``protocol``."""
    protocol = (protocol or experiment.protocol()).model_copy()
    return Trial(experiment=experiment, kernel=kernel, source=source, protocol=protocol, entry=entry, launch=launch,
                 args=args)


def run_trial(experiment: Experiment) -> Trial:
    """The run engine's Trial: the experiment and its protocol, with the initial kernel (when there is
    one) as its kernel; each candidate is a :meth:`Trial.variant` of it. A run times a long kernel's
    cases for ``OPTIMIZE_TIMED_MS`` of kernel time unless the experiment says otherwise: it measures
    dozens of candidates, each again in the finalists' rounds."""
    path = experiment.initial_kernel_path
    protocol = experiment.protocol()
    if protocol.timed_ms is None:
        protocol = protocol.model_copy(update={"timed_ms": OPTIMIZE_TIMED_MS, "min_iterations": max(
            protocol.min_iterations, protocol.checked_launches)})
    return source_trial(experiment, path.read_text() if path else None, kernel=path, protocol=protocol)
