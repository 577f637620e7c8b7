"""A guard file made ready for checking, before any GPU work: read and validated, its experiment
loaded from the paths it names and lock-checked, its kernel read (a Trial, with the recorded
protocol), and the old kernel to measure beside it (``--against`` a file, ``--against-ref`` a
commit). Anything wrong is bad input naming the file and the field.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError

from ..crosschecks import check_kernel_entry, check_launch
from ..errors import ExperimentError, validation_message
from ..experiment import Experiment, ExperimentArgs, kernel_file
from ..trial import Trial, source_trial
from ..wire.protocol import CaseSpec, EvalRequest, TimingProtocol
from .files import GuardBaseline, GuardKernel, absolute_args, read_guard
from .git import file_at


@dataclass(frozen=True)
class Kernel:
    """A kernel to measure (a Trial: source, entry, launch, protocol) and what to call it in a report."""

    trial: Trial
    label: str

    def request(self, cases: list[CaseSpec], protocol: TimingProtocol | None = None, *, timed: bool,
                vendor: bool = False) -> EvalRequest:
        """Checked on ``cases`` (fresh seeds: the caller's), and timed on their performance ones when
        ``timed``; with the trial's protocol unless given."""
        return self.trial.request(cases=cases, protocol=protocol, vendor=vendor, timed=timed,
                                  request_id=f"guard-{'timed' if timed else 'check'}")


@dataclass(frozen=True)
class Guarded:
    path: Path
    baseline: GuardBaseline
    kernel: Kernel
    against: Kernel | None  # None: compare with the recorded figures
    notes: list[str] = field(default_factory=list)

    @property
    def experiment(self) -> Experiment:
        return self.kernel.trial.experiment

    @property
    def against_label(self) -> str:
        return self.against.label if self.against else f"the figures recorded on {self.baseline.recorded_at[:10]}"

    @property
    def source_changed(self) -> bool:
        return sha256(self.kernel.trial.source) != self.baseline.kernel.sha256


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def shown(path: Path) -> str:
    """A path as a user would type it: relative to the working directory when under it."""
    path = path.resolve()
    return os.path.relpath(path) if path.is_relative_to(Path.cwd().resolve()) else str(path)


def load_guard(path: Path, against: Path | None = None, against_ref: str | None = None) -> Guarded:
    baseline = read_guard(path)
    folder = path.parent
    args = absolute_args(baseline.experiment, folder)
    experiment = args.load()
    if experiment.lock().lock != baseline.lock.lock:
        raise ExperimentError(path, "lock", "the reference, the input cases or the harness changed since this guard "
                                            "was recorded; record it again (cudaopt guard record) and review it")
    timed = sorted(c.name for c in experiment.cases({"performance"}))
    recorded = sorted(c.name for c in baseline.cases)
    if recorded != timed:
        raise ExperimentError(path, "cases", f"figures for {recorded}, but the experiment times {timed}")
    kernel = _current_kernel(path, baseline, experiment, args)
    notes: list[str] = []
    old = None
    if against is not None:
        source = kernel_file(against, baseline.kernel.entry, experiment.signature, "--against")
        old = _kernel(baseline, baseline.kernel, experiment, args, against, source, shown(against))
    elif against_ref is not None:
        old = _kernel_at(against_ref, path, baseline, experiment, args, notes)
    for measured in (kernel, old):
        if measured is not None:  # every case's launch resolves and fits a GPU, before any worker starts
            for i, case in enumerate(experiment.case_specs):
                launch = measured.trial.launch or case.launch
                field = "kernel.launch" if measured.trial.launch else f"{shown(experiment.cases_path)}: cases[{i}].launch"
                if launch is not None:
                    check_launch(path, field, launch, case, kernel=(measured.trial.source, experiment.signature))
    return Guarded(path, baseline, kernel, old, notes)


def _kernel(baseline: GuardBaseline, recorded: GuardKernel, experiment: Experiment, args: ExperimentArgs,
            file: Path, source: str, label: str) -> Kernel:
    """A kernel of the guard as a Trial: the recorded entry, launch and protocol."""
    return Kernel(source_trial(experiment, source, kernel=file, entry=recorded.entry, launch=recorded.launch,
                               protocol=baseline.protocol, args=args), label)


def _current_kernel(path: Path, baseline: GuardBaseline, experiment: Experiment, args: ExperimentArgs) -> Kernel:
    recorded = baseline.kernel
    file = path.parent / recorded.file
    if not file.is_file():
        raise ExperimentError(path, "kernel.file", f"{shown(file)} not found")
    source = kernel_file(file, recorded.entry, experiment.signature, "kernel.file")
    return _kernel(baseline, recorded, experiment, args, file, source, shown(file))


def _kernel_at(ref: str, path: Path, baseline: GuardBaseline, experiment: Experiment, args: ExperimentArgs,
               notes: list[str]) -> Kernel | None:
    """The kernel as it is at ``ref``, with the entry and launch its guard file had there (the
    current file's when the guard is new or unreadable there); None when the kernel is not there."""
    folder = path.parent
    recorded = baseline.kernel
    old_guard = file_at(ref, path, folder)
    if old_guard is not None:
        try:
            recorded = GuardBaseline.model_validate_json(old_guard).kernel
        except ValidationError as exc:
            field_name, message = validation_message(exc, GuardBaseline)
            notes.append(f"{shown(path)} at {ref} is unreadable ({field_name}: {message}); the old kernel runs "
                         "with this guard's entry and launch")
    file = folder / recorded.file
    source = file_at(ref, file, folder)
    if source is None:
        notes.append(f"{shown(file)} is not in {ref}: compared with the recorded figures instead")
        return None
    label = f"{shown(file)} at {ref}"
    check_kernel_entry(Path(label), source, recorded.entry, experiment.signature)
    return _kernel(baseline, recorded, experiment, args, Path(label), source, label)
