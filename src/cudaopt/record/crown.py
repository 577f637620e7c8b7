"""What decided a run's winner, in summary.json: the finalists measured again side by side, and the
crowning audit that stands between the fastest of them and the crown (winner/crowning.py)."""

from __future__ import annotations

from pydantic import Field

from ..pool.dispatch import GpuRef
from ..wire.protocol import WireModel


class Finalist(WireModel):
    """One of the best attempts, measured again on the finalists' GPU."""

    attempt: int
    recorded_score_us: float
    recorded_gpu: GpuRef | None = None
    scores_us: list[float | None] = Field(default_factory=list)  # one per repeat; None: it failed that time
    score_us: float | None = None  # the median of the repeats; None: it failed, and cannot win
    status: str = "ok"
    reason: str = ""
    # slower than the first round's fastest beyond the rounds' noise: not measured again, cannot win
    dropped: bool = False


class Finalists(WireModel):
    """The best attempt and those recorded within a few percent of it (and, when several GPUs
    measured them, the three best) measured again, interleaved, on one GPU; the winner is the
    fastest there, so neither the moment an attempt was measured nor a GPU's own speed decides
    between them; it is crowned once it passes the crowning audit (:class:`CrowningAudit`)."""

    gpu: GpuRef
    repeats: int
    finalists: list[Finalist]
    winner: int | None
    seconds: float = 0.0  # the rounds' wall time


class AuditedCandidate(WireModel):
    """One candidate's crowning audit: the timed launches checked since it was chosen (its
    finalists' rounds, then evaluations of its own until each performance case has ``required``)."""

    attempt: int
    required: int  # checked timed launches per performance case: 11 in a run's first audit, one more in each later
    # performance cases: timed launches checked; correctness cases (never timed): launches checked, which is all of them
    checked_launches_per_case: dict[str, int]
    # the chance, at most, that a kernel cheating on half or more of one performance case's timed launches in
    # every evaluation passes all of these checks (a refused candidate's: of the checks its audit planned)
    escape_bound: float
    rounds: int  # its finalists' rounds counted
    evaluations: int  # the audit's own evaluations
    seconds: float = 0.0  # their GPU time
    status: str = "ok"  # ok: crowned; else the outcome of the evaluation that refused it
    reason: str = ""


class CrowningAudit(WireModel):
    """The crowning audits of a run, in order: each candidate refused, then the winner. ``run_escape_bound``
    adds up every audit's bound: the chance, at most, that any kernel cheating on half or more of
    one performance case's timed launches was crowned in this run (below 2^-10 by construction)."""

    winner: int | None  # None: every candidate audited was refused
    checked_launches_per_case: dict[str, int] = Field(default_factory=dict)  # the winner's
    escape_bound: float | None = None  # the winner's
    run_escape_bound: float
    audits: list[AuditedCandidate]
