"""The crowning audit: no kernel is a run's winner before enough of its timed launches were checked.

Each evaluation checks a few of a case's timed launches, drawn at random from its own seed (3 of
100 by default), so a kernel cheating on half of them escapes one evaluation with probability
C(50,3)/C(100,3) = 12%; a run that evaluates it again and again would crown it. So before a
winner is named, the candidate the finalists' measurement (replay.py, which measures the best
again even when it is alone) puts first must pass an audit: its finalists' rounds and then
evaluations of its own, made after it was chosen and so not chosen by its luck, until every
performance case has had ``required`` of its timed launches checked. The audit's evaluations
are what any attempt's evaluation is (the correctness and performance cases, the run's
protocol): nothing tells a kernel it is audited. A candidate that fails is refused (it cannot
win) and the next best is audited, needing one checked launch more per case than the one before.

With n timed launches of which a cheat spoils at least half, k of them checked without
replacement let it pass with probability C(floor(n/2), k) / C(n, k) < 2^-k, and evaluations with
their own seeds multiply. The i-th audit of a run (from 0) needs 11 + i, so whatever number of
cheating kernels reach an audit, the chance that one is crowned is below the sum over i of
2^-(11 + i) = 2^-10 < 0.1%. Correctness cases are never timed: every launch of theirs is checked.
"""

from __future__ import annotations

from collections.abc import Sequence
from math import comb

from ..engine.recorder import ROLES, Recorder
from ..record.events import AttemptStarted
from ..record.crown import AuditedCandidate, CrowningAudit
from ..record.files import Attempt
from ..wire.results import EvalResult
from .replay import measure_finalists

FIRST_AUDIT = 11  # checked timed launches per performance case in a run's first audit; one more in each later


def escape(draws: Sequence[tuple[int, int]]) -> float:
    """The chance, at most, that a kernel cheating on half or more of a case's timed launches in every
    evaluation passes all its checks: each evaluation's (n timed launches, k checked) at random
    without replacement, independently."""
    out = 1.0
    for n, k in draws:
        out *= comb(n // 2, k) / comb(n, k) if k else 1.0
    return out


def case_draws(results: Sequence[EvalResult]) -> dict[str, list[tuple[int, int]]]:
    """Per timed case, each evaluation's (timed launches, checked launches)."""
    out: dict[str, list[tuple[int, int]]] = {}
    for result in results:
        for case in result.cases:
            if case.timing is not None:
                checked = len(case.scan.checked_launches) if case.scan else 0
                out.setdefault(case.name, []).append((case.timing.n, checked))
    return out


def checked_per_case(results: Sequence[EvalResult], performance: Sequence[str]) -> dict[str, int]:
    """Launches checked per case: the timed ones of performance cases; of the others (never timed),
    every launch, one per input set."""
    out: dict[str, int] = {}
    for result in results:
        for case in result.cases:
            if case.name in performance:
                got = len(case.scan.checked_launches) if case.scan and case.timing else 0
            else:
                got = len({c.input_set for c in case.checks if c.phase == "check"})
            out[case.name] = out.get(case.name, 0) + got
    return out


def audit_candidate(rec: Recorder, attempt: Attempt, rounds: list[EvalResult], required: int) -> AuditedCandidate:
    """Evaluate ``attempt`` until each performance case has had ``required`` timed launches checked,
    its finalists' ``rounds`` counted; the first evaluation that fails refuses it."""
    performance = [c.name for c in rec.cases if c.role == "performance"]
    protocol = rec.trial.protocol
    have = min((sum(k for _, k in case_draws(rounds).get(name, [])) for name in performance), default=required)
    plan = []  # checked launches of each evaluation still to make, at most the run's own per evaluation
    while have + sum(plan) < required:
        plan.append(min(protocol.checked_launches, required - have - sum(plan)))
    done: list[EvalResult] = []
    status, reason = "ok", ""
    trial = rec.trial.variant(rec.source(attempt), attempt.launch, attempt.defines)
    timeouts = rec.timeouts()
    for i, checked in enumerate(plan):
        request = trial.request(roles=ROLES, request_id=f"audit-{attempt.id}-{i}", timeouts=timeouts,
                                protocol=protocol.model_copy(update={"checked_launches": checked}))
        rec.on_progress(AttemptStarted(id=attempt.id, what=f"crowning audit of #{attempt.id} ({i + 1}/{len(plan)})"))
        (measured,) = rec.evaluator.evaluate_all([request], pins=[0])
        result = measured.result
        done.append(result)
        if not result.ok:
            status, reason = result.status, result.reason
            break
        counted = case_draws([result])
        short = [n for n in performance if sum(k for _, k in counted.get(n, [])) < checked]
        if short:
            status, reason = "internal_error", f"the evaluation checked fewer than {checked} timed launches of {short}"
            break
    # the bound the audit holds its candidate to: its rounds and every evaluation it planned (a refused one stops early)
    draws = case_draws(rounds)
    bounds = [escape(draws.get(name, []) + [(protocol.iterations, k) for k in plan]) for name in performance]
    return AuditedCandidate(
        attempt=attempt.id, required=required, checked_launches_per_case=checked_per_case([*rounds, *done], performance),
        escape_bound=max(bounds, default=1.0), rounds=len(rounds), evaluations=len(done),
        seconds=round(sum(r.wall_s for r in done), 3), status=status, reason=reason)


def crown(rec: Recorder) -> CrowningAudit | None:
    """Measure the finalists again (the best alone too), then audit the winner there; a refused
    candidate cannot win and the next best is audited, until one passes or none is left. None when
    no attempt has a score."""
    rounds = measure_finalists(rec)
    if rounds is None:
        return None
    rec.settle(rounds.finalists)
    audits = list(rec.audit.audits) if rec.audit else []  # a resumed run's earlier audits count
    winner = None
    while (best := rec.best) is not None:
        outcome = audit_candidate(rec, best, rounds.results.get(best.id, []), FIRST_AUDIT + len(audits))
        audits.append(outcome)
        if outcome.status == "ok":
            winner = outcome
            break
        rec.refuse(best.id, f"{outcome.status}: {outcome.reason}")
    audit = CrowningAudit(winner=winner.attempt if winner else None,
                          checked_launches_per_case=winner.checked_launches_per_case if winner else {},
                          escape_bound=winner.escape_bound if winner else None,
                          run_escape_bound=sum(a.escape_bound for a in audits), audits=audits)
    rec.crown(audit)
    return audit
