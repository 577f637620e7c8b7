"""``cudaopt verify``: the winner on cases it never saw, with fresh seeds, against the reference.

The holdout cases of the experiment (never evaluated during the run, never shown to a model)
and any extra cases are checked — not timed — with the winner's source, tunable values and
launch expressions (shapes always from each case's own scalars). On several GPUs the cases are
shared out among them (checks only, nothing is timed). With ``--sanitize`` the winner also runs
under compute-sanitizer (sanitize.py). The outcome goes to ``verify.json`` in the run
directory, where the report's verdict reads it.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from pathlib import Path

from .errors import ExperimentError
from .record.recorder import Evaluator
from .record.runs import load_run_experiment, open_run, winner
from .record.schema import VerifiedCase, VerifyOutcome


def verify(run_dir: Path, evaluator: Evaluator, extra: Path | None = None, seed: int | None = None,
           sanitize_device: int | None = None, on_tool: Callable[[str], None] = lambda tool: None) -> VerifyOutcome:
    """Check the winner on the holdout (and extra) cases; with ``sanitize_device``, also run it under
    compute-sanitizer on that GPU, on the correctness and holdout cases."""
    run = open_run(run_dir)
    experiment = load_run_experiment(run)
    best = winner(run)
    cases = experiment.cases({"holdout"}) + (experiment.extra_cases(extra) if extra else [])
    if not cases:
        raise ExperimentError(experiment.cases_path, "cases", "no holdout case to verify on (give --cases FILE)")
    seed = secrets.randbits(31) if seed is None else seed
    fresh = [case.model_copy(update={"seed": seed + i}) for i, case in enumerate(cases)]
    request = experiment.request(best.source, launch=best.launch, defines=best.defines, roles={"holdout"},
                                 request_id=f"verify-{best.attempt.id}")
    request.cases, request.time_roles = fresh, []
    width = min(len(evaluator.gpus()), len(fresh))
    parts = [request] if width == 1 else [
        request.model_copy(update={"cases": fresh[k::width], "id": f"{request.id}-{k}"}) for k in range(width)]
    measured = evaluator.evaluate_all(parts)
    order = {c.name: i for i, c in enumerate(fresh)}
    failed = min((m.result for m in measured if not m.result.ok), default=None,  # the first failure, in case order
                 key=lambda r: min((order[c.name] for c in r.cases if c.status != "ok"), default=-1))
    verified = sorted((VerifiedCase(
        name=c.name, role=c.role, status=c.status, reason=c.reason,
        max_abs_error=max((k.max_abs_error for k in c.checks), default=None),
        max_rel_error=max((k.max_rel_error for k in c.checks), default=None),
        input_sets_checked=len({k.input_set for k in c.checks}), gpu=m.gpu,
    ) for m in measured for c in m.result.cases), key=lambda v: order[v.name])
    outcome = VerifyOutcome(
        passed=failed is None, status=failed.status if failed else "ok", reason=failed.reason if failed else "",
        attempt=best.attempt.id, seed=seed, cases=verified,
    )
    if sanitize_device is not None:
        from .sanitize import sanitize

        checked = [c.model_copy(update={"seed": seed + len(fresh) + i})
                   for i, c in enumerate(experiment.cases({"correctness"}))]
        request.cases = checked + fresh
        outcome.sanitize = sanitize(request, sanitize_device, run.file("sanitize"), on_tool=on_tool)
        outcome.passed = outcome.passed and all(r.passed for r in outcome.sanitize)
    run.write_model("verify.json", outcome)
    run.log(f"verify: attempt {best.attempt.id} on {len(fresh)} case(s), seed {seed}: {outcome.status}")
    return outcome
