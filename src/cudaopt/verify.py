"""``cudaopt verify``: the winner on cases it never saw, with fresh seeds, against the reference.

The holdout cases of the experiment (never evaluated during the run, never shown to a model)
and any extra cases are checked — not timed — with the winner's source, tunable values and
launch expressions (shapes always from each case's own scalars). With ``--sanitize`` the
winner also runs under compute-sanitizer (sanitize.py). The outcome goes to ``verify.json`` in the run directory, where the report's
verdict reads it.
"""

from __future__ import annotations

import dataclasses
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .experiment import ExperimentError
from .harness.protocol import LaunchSpec, from_dict
from .optimize import load_run_experiment
from .record.recorder import Evaluator
from .record.rundir import RunDir
from .record.schema import History, Summary


@dataclass
class Winner:
    attempt: int
    source: str
    launch: LaunchSpec | None
    defines: dict


def winner(run: RunDir) -> Winner:
    summary = Summary.model_validate(run.read_json("summary.json"))
    if summary.best_attempt is None:
        raise ExperimentError(run.file("summary.json"), "best_attempt", "the run has no winner to verify")
    attempt = next(a for a in History.model_validate(run.read_json("history.json")).attempts
                   if a.id == summary.best_attempt)
    launch = from_dict(LaunchSpec, attempt.launch) if attempt.launch else None
    return Winner(attempt.id, run.file(attempt.source_file).read_text(), launch, dict(attempt.defines))


def verify(run_dir: Path, evaluator: Evaluator, extra: Path | None = None, seed: int | None = None,
           sanitize_device: int | None = None, on_tool: Callable[[str], None] = lambda tool: None) -> dict:
    """Check the winner on the holdout (and extra) cases; with ``sanitize_device``, also run it under
    compute-sanitizer on that GPU, on the correctness and holdout cases."""
    try:
        run = RunDir.open(run_dir)
    except FileNotFoundError as exc:
        raise ExperimentError(run_dir, "", str(exc)) from None
    experiment = load_run_experiment(run)
    best = winner(run)
    cases = experiment.cases({"holdout"}) + (experiment.extra_cases(extra) if extra else [])
    if not cases:
        raise ExperimentError(experiment.cases_path, "cases", "no holdout case to verify on (give --cases FILE)")
    seed = secrets.randbits(31) if seed is None else seed
    fresh = [dataclasses.replace(case, seed=seed + i) for i, case in enumerate(cases)]
    request = experiment.request(best.source, launch=best.launch, defines=best.defines, roles={"holdout"},
                                 request_id=f"verify-{best.attempt}")
    request.cases, request.time_roles = fresh, []
    result = evaluator.evaluate(request)
    outcome = {
        "passed": result.ok,
        "status": result.status,
        "reason": result.reason,
        "attempt": best.attempt,
        "seed": seed,
        "cases": [
            {
                "name": c.name, "role": c.role, "status": c.status, "reason": c.reason,
                "max_abs_error": max((k.max_abs_error for k in c.checks), default=None),
                "max_rel_error": max((k.max_rel_error for k in c.checks), default=None),
                "input_sets_checked": len({k.input_set for k in c.checks}),
            }
            for c in result.cases
        ],
    }
    if sanitize_device is not None:
        from .sanitize import sanitize

        checked = [dataclasses.replace(c, seed=seed + len(fresh) + i) for i, c in enumerate(experiment.cases({"correctness"}))]
        request.cases = checked + fresh
        outcome["sanitize"] = sanitize(request, sanitize_device, run.file("sanitize"), on_tool=on_tool)
        outcome["passed"] = outcome["passed"] and all(r["passed"] for r in outcome["sanitize"])
    run.write_json("verify.json", outcome)
    run.log(f"verify: attempt {best.attempt} on {len(fresh)} case(s), seed {seed}: {result.status}")
    return outcome
