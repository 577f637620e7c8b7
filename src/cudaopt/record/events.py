"""Progress events: what a command tells the terminal while it works (the CLI's progress line and
spinner are listeners; a Python caller passes its own ``on_progress``).

In memory only; every fact they carry is also in the run directory or the returned result.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class AttemptStarted:
    id: int
    what: str  # "baseline", "proposing", "evaluating", "tuning {...}"


@dataclass(frozen=True)
class PhaseProgress:
    phase: str  # the worker's phase: compile, check, timing
    case: str = ""


@dataclass(frozen=True)
class UsageProgress:
    tokens: int
    cost: float


@dataclass(frozen=True)
class AttemptFinished:
    id: int
    status: str
    score: float | None
    best: float | None
    best_id: int | None


@dataclass(frozen=True)
class StepProgress:
    """A step of a longer check (verify's timed shapes, a compute-sanitizer tool): ``done`` of ``total``
    (0 of 0: not counted)."""

    what: str
    done: int
    total: int


@dataclass(frozen=True)
class Notice:
    """A line the user should read while the work goes on: the strategy ``auto`` chose, a GPU that
    left the pool, a documentation page that could not be fetched, a fleet member's outcome."""

    text: str


ProgressEvent = AttemptStarted | PhaseProgress | UsageProgress | AttemptFinished | StepProgress | Notice
OnProgress = Callable[[ProgressEvent], None]


def ignore(event: ProgressEvent) -> None:
    """The default listener."""
