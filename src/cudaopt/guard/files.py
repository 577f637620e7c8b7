"""``guard.json`` (a kernel's recorded baseline, committed beside the kernel) and the report of
``cudaopt guard check``, declared once.

A guard file names everything by paths relative to its own folder, so it means the same in any
checkout: the experiment (as ``cudaopt optimize`` records it, ``ExperimentArgs``), the kernel
file, its entry and launch. Its lock pins what defines right and wrong; the figures were taken
with ``protocol`` on ``gpu``.
"""

from __future__ import annotations

import os
import statistics
from pathlib import Path
from typing import Literal

from pydantic import Field

from ..reading import read_model_file
from ..experiment import ExperimentArgs, ExperimentLock
from ..wire.protocol import LaunchSpec, WireModel, Role, TimingProtocol
from ..wire.results import DeviceInfo, TimingStats
from ..wire.fields import version_field

PATH_FIELDS = ("config", "reference", "initial_kernel", "input_cases")


class GuardKernel(WireModel):
    file: str  # relative to the guard file's folder
    entry: str
    sha256: str  # of the file's text when recorded
    launch: LaunchSpec | None = None  # None: each case's own launch (the input cases')


class GuardCase(WireModel):
    """One performance case's figures: the median of each repeat, and one repeat's full spread."""

    name: str
    median_us: float = Field(gt=0)  # the median of ``medians_us``
    medians_us: list[float] = Field(min_length=2)
    timing: TimingStats  # the first repeat's statistics (p10/p90/stdev of single launches)
    vendor_median_us: float | None = None  # the experiment's vendor baseline, timed beside the first repeat


class GuardBaseline(WireModel):
    """guard.json: what ``cudaopt guard check`` compares with."""

    schema_version: int = version_field(1)
    cudaopt_version: str
    recorded_at: str
    experiment: ExperimentArgs  # paths relative to the guard file's folder
    lock: ExperimentLock
    kernel: GuardKernel
    protocol: TimingProtocol
    repeats: int = Field(ge=2)
    seed: int  # the fresh seed the cases were checked with
    gpu: DeviceInfo
    vendor: str | None = None  # the vendor baseline's label, when the experiment has one
    cases: list[GuardCase]
    checked: list[str]  # every case the kernel passed when recorded (holdout included)


def read_guard(path: Path) -> GuardBaseline:
    """A guard file, validated; anything wrong is bad input naming the file and the field."""
    return read_model_file(path, GuardBaseline, "guard file")


def relative_args(args: ExperimentArgs, folder: Path) -> ExperimentArgs:
    """The experiment's paths relative to ``folder`` (where the guard file goes)."""
    return args.model_copy(update={k: os.path.relpath(Path(v).resolve(), folder.resolve())
                                   for k in PATH_FIELDS if (v := getattr(args, k))})


def absolute_args(args: ExperimentArgs, folder: Path) -> ExperimentArgs:
    """The experiment's paths as stored in a guard file in ``folder``, made absolute."""
    return args.model_copy(update={k: str((folder / v).resolve()) for k in PATH_FIELDS if (v := getattr(args, k))})


# --- the report of ``guard check`` ------------------------------------------------------------

# passed / incorrect: the case's checks; the rest: a timed case's comparison. Failing:
# incorrect, regressed, error (the old kernel failed: nothing to compare with), other_gpu.
CaseVerdict = Literal["passed", "incorrect", "regressed", "improved", "within", "inconclusive", "error",
                      "other_gpu", "skipped"]
FAILING = ("incorrect", "regressed", "error", "other_gpu")


class GuardedCase(WireModel):
    name: str
    role: Role
    status: str  # the kernel's harness outcome on the case ("ok", "mismatch", ...)
    verdict: CaseVerdict
    message: str  # one line with the figures
    max_abs_error: float | None = None
    max_rel_error: float | None = None
    candidate_medians_us: list[float] = Field(default_factory=list)
    baseline_medians_us: list[float] = Field(default_factory=list)  # the old kernel's, or the recorded ones
    ratio: float | None = None  # time now / before (above 1: slower)
    ratio_low: float | None = None  # its confidence interval
    ratio_high: float | None = None

    @property
    def failed(self) -> bool:
        return self.verdict in FAILING

    def cells(self) -> list[str]:
        """The case's row in a table (the terminal's, the Markdown summary's)."""
        median = lambda values: f"{statistics.median(values):.2f}" if values else "-"
        interval = f"{_change(self.ratio_low)} to {_change(self.ratio_high)}" if self.ratio_low is not None else "-"
        return [self.name, self.role, self.verdict, median(self.candidate_medians_us),
                median(self.baseline_medians_us), _change(self.ratio), interval]


def _change(ratio: float | None) -> str:
    return f"{(ratio - 1) * 100:+.1f}%" if ratio is not None else "-"


class GuardCheck(WireModel):
    """One guard file checked."""

    file: str
    kernel: str
    source_changed: bool  # the kernel's text differs from the one recorded
    mode: Literal["ab", "recorded"]
    against: str  # what the kernel was compared with, in words
    seed: int
    repeats: int
    protocol: TimingProtocol
    max_slowdown: float
    confidence: float
    method: str = ""  # the interval's method
    gpu: DeviceInfo
    environment_differences: list[str] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)
    cases: list[GuardedCase]
    score_ratio: float | None = None  # the geomean over the timed cases, now / before, with its interval
    score_low: float | None = None
    score_high: float | None = None
    passed: bool
    wall_s: float = 0.0

    def title(self) -> str:
        """One line: the file, the verdict, what was compared and how."""
        how = "A/B in one worker" if self.mode == "ab" else "recorded figures"
        unit = "pairs" if self.mode == "ab" else "repeats"
        return (f"guard {self.file}: {'PASSED' if self.passed else 'FAILED'} — {self.kernel} against {self.against} "
                f"({how}, {self.repeats} {unit} per case, limit +{self.max_slowdown:.1%}, "
                f"{self.confidence:.0%} interval, seed {self.seed})")

    def lines(self) -> list[str]:
        """What follows the table: the score, why the GPU matters, notes, and each failure's figures."""
        lines = []
        if self.score_ratio is not None:
            lines.append(f"score (geomean over the timed cases): time {_change(self.score_ratio)} "
                         f"({_change(self.score_low)} to {_change(self.score_high)})")
        if self.environment_differences:
            what = ("the A/B comparison holds; the recorded figures would not" if self.mode == "ab" else
                    "record the guard again on this GPU (cudaopt guard record) or compare A/B (--against, "
                    "--against-ref)")
            lines.append(f"recorded on another GPU or driver ({'; '.join(self.environment_differences)}): {what}")
        lines += [f"note: {note}" for note in self.notes]
        lines += [f"{c.name}: {c.verdict}: {c.message}" for c in self.cases if c.failed or c.verdict == "inconclusive"]
        return lines


class GuardReport(WireModel):
    """What ``cudaopt guard check --json`` writes."""

    schema_version: int = version_field(1)
    passed: bool
    checks: list[GuardCheck]
