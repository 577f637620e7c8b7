"""A guard file made ready for checking, before any GPU work: read and validated, its experiment
loaded from the paths it names and lock-checked, its kernel read, and the old kernel to measure
beside it (``--against`` a file, ``--against-ref`` a commit). Anything wrong is bad input naming
the file and the field.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError

from ..checks import check_kernel_entry, check_launch, kernel_file
from ..errors import ExperimentError, validation_message
from ..experiment import Experiment
from ..wire.protocol import CaseSpec, EvalRequest, LaunchSpec, TimingProtocol
from .files import GuardBaseline, GuardKernel, absolute_args, read_guard
from .git import file_at


@dataclass(frozen=True)
class Kernel:
    """A kernel to measure: source, entry and launch, and what to call it in a report."""

    source: str
    entry: str
    launch: LaunchSpec | None
    label: str

    def request(self, experiment: Experiment, cases: list[CaseSpec], protocol: TimingProtocol, *, timed: bool,
                vendor: bool = False) -> EvalRequest:
        """Checked on ``cases`` (fresh seeds: the caller's), and timed on their performance ones when ``timed``."""
        made = experiment.request(self.source, entry=self.entry, launch=self.launch, protocol=protocol, vendor=vendor,
                                  request_id=f"guard-{'timed' if timed else 'check'}")
        made.cases = cases
        if not timed:
            made.time_roles = []
        return made


@dataclass(frozen=True)
class Guarded:
    path: Path
    baseline: GuardBaseline
    experiment: Experiment
    kernel: Kernel
    against: Kernel | None  # None: compare with the recorded figures
    notes: list[str] = field(default_factory=list)

    @property
    def against_label(self) -> str:
        return self.against.label if self.against else f"the figures recorded on {self.baseline.recorded_at[:10]}"

    @property
    def source_changed(self) -> bool:
        return sha256(self.kernel.source) != self.baseline.kernel.sha256


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def shown(path: Path) -> str:
    """A path as a user would type it: relative to the working directory when under it."""
    path = path.resolve()
    return os.path.relpath(path) if path.is_relative_to(Path.cwd().resolve()) else str(path)


def load_guard(path: Path, against: Path | None = None, against_ref: str | None = None) -> Guarded:
    baseline = read_guard(path)
    folder = path.parent
    experiment = absolute_args(baseline.experiment, folder).load()
    if experiment.lock().lock != baseline.lock.lock:
        raise ExperimentError(path, "lock", "the reference, the input cases or the harness changed since this guard "
                                            "was recorded; record it again (cudaopt guard record) and review it")
    timed = sorted(c.name for c in experiment.cases({"performance"}))
    recorded = sorted(c.name for c in baseline.cases)
    if recorded != timed:
        raise ExperimentError(path, "cases", f"figures for {recorded}, but the experiment times {timed}")
    kernel = _current_kernel(path, baseline.kernel, experiment)
    notes: list[str] = []
    old = None
    if against is not None:
        old = Kernel(kernel_file(against, baseline.kernel.entry, experiment.signature, "--against"),
                     baseline.kernel.entry, baseline.kernel.launch, shown(against))
    elif against_ref is not None:
        old = _kernel_at(against_ref, path, baseline, experiment, notes)
    for measured in (kernel, old):
        if measured is not None:  # every case's launch resolves and fits a GPU, before any worker starts
            for i, case in enumerate(experiment.case_specs):
                launch = measured.launch or case.launch
                field = "kernel.launch" if measured.launch else f"{shown(experiment.cases_path)}: cases[{i}].launch"
                if launch is not None:
                    check_launch(path, field, launch, case, kernel=(measured.source, experiment.signature))
    return Guarded(path, baseline, experiment, kernel, old, notes)


def _current_kernel(path: Path, recorded: GuardKernel, experiment: Experiment) -> Kernel:
    file = path.parent / recorded.file
    if not file.is_file():
        raise ExperimentError(path, "kernel.file", f"{shown(file)} not found")
    source = kernel_file(file, recorded.entry, experiment.signature, "kernel.file")
    return Kernel(source, recorded.entry, recorded.launch, shown(file))


def _kernel_at(ref: str, path: Path, baseline: GuardBaseline, experiment: Experiment,
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
            field_name, message = validation_message(exc)
            notes.append(f"{shown(path)} at {ref} is unreadable ({field_name}: {message}); the old kernel runs "
                         "with this guard's entry and launch")
    file = folder / recorded.file
    source = file_at(ref, file, folder)
    if source is None:
        notes.append(f"{shown(file)} is not in {ref}: compared with the recorded figures instead")
        return None
    label = f"{shown(file)} at {ref}"
    check_kernel_entry(Path(label), source, recorded.entry, experiment.signature)
    return Kernel(source, recorded.entry, recorded.launch, label)
