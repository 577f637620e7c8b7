"""Scoring a run's attempts: pure functions of the attempts, no files and no GPU.

An attempt's score is the geometric mean of its performance medians when every case passed. The
best attempt is the fastest there in the finalists' measurement, else the fastest scored attempt
measured on the baseline's GPU model (a resumed run may have moved to another), never one
disqualified (by the finalists' measurement or the crowning audit).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from ..wire.protocol import CaseSpec
from ..wire.results import CaseResult
from ..wire.stats import geomean
from ..record.crown import Finalists
from ..record.files import Attempt, CaseBest


def score(cases: list[CaseResult]) -> float | None:
    """Geometric mean of the performance medians when every case passed, else None."""
    if not cases or any(c.status != "ok" for c in cases):
        return None
    medians = [c.timing.median_us for c in cases if c.role == "performance" and c.timing]
    return geomean(medians) if medians else None


def medians(attempt: Attempt | None) -> dict[str, float]:
    """Each case's median (µs) of an attempt; none for no attempt."""
    return attempt.medians() if attempt else {}


def geomean_of(values: list[float | None]) -> float | None:
    """The geometric mean when every value is there, else None."""
    return geomean(values) if values and all(values) else None


def baseline_of(attempts: Sequence[Attempt]) -> Attempt | None:
    """Attempt 0, the bar every candidate is measured against, once evaluated."""
    return next((a for a in attempts if a.kind == "baseline"), None)


def comparable(attempt: Attempt, baseline: Attempt | None) -> bool:
    """Measured on the baseline's GPU model (files from before GPUs were recorded: assumed so)."""
    model = baseline.gpu.name if baseline is not None and baseline.gpu is not None else None
    return model is None or attempt.gpu is None or attempt.gpu.name == model


def best_of(attempts: Sequence[Attempt], finalists: Finalists | None = None,
            disqualified: Iterable[int] = ()) -> Attempt | None:
    """The fastest finalist of the finalists' measurement, else the fastest scored attempt measured
    on the baseline's GPU model; never one disqualified (a finalist that failed when measured
    again, a candidate the crowning audit refused). Ties: the earlier attempt."""
    baseline, out = baseline_of(attempts), set(disqualified)
    if finalists is not None:
        qualified = [f for f in finalists.finalists if f.score_us is not None and not f.dropped and f.attempt not in out]
        if qualified:
            return attempts[min(qualified, key=lambda f: (f.score_us, f.attempt)).attempt]
    scored = [a for a in attempts if a.score_us is not None and a.id not in out and comparable(a, baseline)]
    return min(scored, key=lambda a: (a.score_us, a.id)) if scored else None


def per_case_best(attempts: Sequence[Attempt], cases: Sequence[CaseSpec], best: Attempt | None) -> list[CaseBest]:
    """Per performance case, the fastest attempt that passed every case (what a dispatch that picks a
    configuration per shape could reach), beside the winner's time on that case; empty unless every
    performance case has one."""
    baseline = baseline_of(attempts)
    passed = [(a, a.medians()) for a in attempts if a.score_us is not None and comparable(a, baseline)]
    winner = medians(best)
    out = []
    performance = [c for c in cases if c.role == "performance"]
    for case in performance:
        timed = [(m[case.name], a) for a, m in passed if case.name in m]
        if not timed:
            continue
        best_us, attempt = min(timed, key=lambda t: (t[0], t[1].id))
        mine = winner.get(case.name)
        out.append(CaseBest(case=case.name, attempt=attempt.id, defines=attempt.defines, best_us=best_us,
                            winner_us=mine, gain=(mine / best_us) if mine else None))
    return out if len(out) == len(performance) else []
