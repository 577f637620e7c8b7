"""``cudaopt verify``: the winner on cases it never saw, with fresh seeds, against the reference.

The holdout cases of the experiment (never evaluated during the run, never shown to a model)
and any extra cases are checked with the winner's source, tunable values and launch
expressions (shapes always from each case's own scalars); on several GPUs the checks are shared
out among them. The holdout cases that declare their work or ``"timed": true``, and every shape
of ``--shapes FILE``, are also timed beside the baseline and the vendor (shapes.py), each shape's
repeats on one GPU; a shape where the winner is slower than the baseline beyond noise is a
regression, and fails verification. A run whose dispatch table was adopted (``dispatch.json``)
runs each case and shape with its class's configuration, and times the single winner beside it
where the two differ. With ``--sanitize`` the winner also runs under
compute-sanitizer (sanitize.py). The outcome goes to ``verify.json`` in the run directory, where
the report's verdict reads it. A :class:`~cudaopt.trial.Trial` given instead of a run (the
Python API's) is verified the same way, and nothing is written.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from ..errors import ExperimentError
from ..preflight import check_memory, gpu_memory
from ..pool.dispatch import Evaluator
from ..wire.protocol import CaseSpec, EvalRequest, TimingProtocol
from ..record.rundir import RunDir
from ..record.runs import open_run
from ..record.files import VerifiedCase, VerifyOutcome
from ..record.dispatch_table import DispatchTable, read_dispatch
from ..trial import Trial, recorded_trial
from .shapes import load_shapes, sweep_protocol, time_shapes
from .sanitize import sanitize


def fresh_cases(cases: list[CaseSpec], seed: int) -> list[CaseSpec]:
    """The cases with input sets none of them was checked on before: seeds ``seed``, ``seed + 1``, ..."""
    return [case.model_copy(update={"seed": seed + i}) for i, case in enumerate(cases)]


@dataclass(frozen=True)
class Prepared:
    """Everything verify reads, read and checked once before any GPU work."""
    run: RunDir | None  # None: a trial verified outside a run (nothing written)
    trial: Trial  # the winner as the run recorded it
    sweep: list[CaseSpec]  # the shapes to time
    cases: list[CaseSpec]  # the holdout cases and the extra ones


def prepare(target: Path | Trial, extra: Path | None = None, shapes: Path | None = None) -> Prepared:
    """Everything verify reads (the run, its experiment and winner, the extra cases, the shapes),
    read and checked before any GPU work."""
    run = None if isinstance(target, Trial) else open_run(target)
    trial = target if isinstance(target, Trial) else recorded_trial(run)
    experiment = trial.experiment
    sweep = load_shapes(shapes, experiment) if shapes else []
    holdouts = experiment.cases({"holdout"})
    extras = experiment.extra_cases(extra) if extra else []
    for i, case in enumerate(extras):
        if case.name in {c.name for c in holdouts}:
            raise ExperimentError(extra, f"cases[{i}].name", f"{case.name!r} is already a holdout case of "
                                                              f"{experiment.cases_path.name}: name it apart")
    if extras or sweep:
        memory = gpu_memory()
        check_memory(experiment, extras, extra, "cases", memory)
        check_memory(experiment, sweep, shapes, "shapes", memory)
    cases = holdouts + extras
    if not cases and not sweep:
        raise ExperimentError(experiment.cases_path, "cases", "no holdout case to verify on (give --cases FILE)")
    return Prepared(run, trial, sweep, cases)


def verify(target: Path | Trial, evaluator: Evaluator, extra: Path | None = None, seed: int | None = None,
           sanitize_device: int | None = None, on_tool: Callable[[str], None] = lambda tool: None,
           shapes: Path | None = None, repeats: int = 3,
           on_step: Callable[[str, int, int], None] = lambda what, done, total: None,
           prepared: Prepared | None = None) -> VerifyOutcome:
    """Check the winner on the holdout (and extra) cases and time what should be timed; with
    ``sanitize_device``, also run it under compute-sanitizer on that GPU, on the correctness and
    holdout cases. ``on_step(what, done, total)`` follows the timed part. ``prepared``: what
    :func:`prepare` read of the same target, extra cases and shapes (read here otherwise). ``target``:
    a run directory (verify.json written there) or a Trial (nothing written; no ``sanitize_device``)."""
    prepared = prepared or prepare(target, extra, shapes)
    run, trial, sweep, cases = prepared.run, prepared.trial, prepared.sweep, prepared.cases
    experiment = trial.experiment
    if run is None and sanitize_device is not None:
        raise ExperimentError("--sanitize", "", "compute-sanitizer writes its logs into a run directory: verify a run")
    best = trial.attempt.id if trial.attempt is not None else None
    table = read_dispatch(run) if run is not None else None
    table = table if table is not None and table.adopted and table.winner_attempt == best else None
    seed = secrets.randbits(31) if seed is None else seed
    fresh = fresh_cases(cases, seed)
    request = trial.request(cases=fresh, request_id=f"verify-{best if best is not None else 'trial'}", timed=False)
    parts = []
    for attempt, group in _by_configuration(fresh, table, best).items():
        mine = request if table is None else request.model_copy(update={
            "kernel": request.kernel.model_copy(update={"defines": _defines(table, group[0], trial)}),
            "id": f"verify-{attempt}"})
        width = min(len(evaluator.gpus()), len(group))
        parts += [mine.model_copy(update={"cases": group})] if width == 1 else [
            mine.model_copy(update={"cases": group[k::width], "id": f"{mine.id}-{k}"}) for k in range(width)]
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
        attempt=best, seed=seed, cases=verified, repeats=repeats,
        shapes_file=str(shapes) if shapes else None, dispatch=table is not None,
    )
    timed = [c for c in fresh if c.role == "holdout" and c.timed_in_verify]
    total = (len(timed) + len(sweep)) * repeats
    done = 0

    def step(name: str) -> None:
        nonlocal done
        done += 1
        on_step(name, done, total)

    if timed:
        outcome.timed += _time(evaluator, timed, "holdout", trial, trial.protocol, repeats, step, table)
    if sweep:
        sweep = fresh_cases(sweep, seed + len(fresh))
        outcome.timed += _time(evaluator, sweep, "shapes", trial, sweep_protocol(trial.protocol), repeats, step,
                               table)
    outcome.regressions = [c.name for c in outcome.timed if c.regression]
    broken = [c for c in outcome.timed if c.status != "ok"]
    outcome.passed = outcome.passed and not broken and not outcome.regressions
    if broken and outcome.status == "ok":
        outcome.status, outcome.reason = broken[0].status, f"case {broken[0].name}: {broken[0].reason}"
    if sanitize_device is not None:
        checked = fresh_cases(experiment.cases({"correctness"}), seed + len(fresh) + len(sweep))
        request.cases = checked + fresh
        outcome.sanitize = sanitize(request, sanitize_device, run.file(RunDir.SANITIZE), on_tool=on_tool)
        outcome.passed = outcome.passed and all(r.passed for r in outcome.sanitize)
    if run is None:
        return outcome
    run.write_model(RunDir.VERIFY, outcome)
    run.log(f"verify: attempt {best} on {len(fresh)} case(s) and {len(sweep)} shape(s), seed {seed}: "
            f"{'passed' if outcome.passed else 'failed'}"
            + (f", regressions: {', '.join(outcome.regressions)}" if outcome.regressions else ""))
    return outcome


def _by_configuration(cases: list[CaseSpec], table: DispatchTable | None, winner: int) -> dict[int, list[CaseSpec]]:
    """The cases by the attempt whose configuration each runs with (all the winner's without a table)."""
    groups: dict[int, list[CaseSpec]] = {}
    for case in cases:
        groups.setdefault(table.choose(case.scalars)[1] if table else winner, []).append(case)
    return groups


def _defines(table: DispatchTable | None, case: CaseSpec, trial: Trial) -> dict:
    return table.choose(case.scalars)[2] if table else trial.defines


def _time(evaluator, cases, origin, trial: Trial, protocol, repeats, step, table):
    """Time the cases; with a table, each with its class's configuration, the single winner beside it
    where they differ, and the class recorded."""
    winner, baseline, single = _requests(trial, protocol, table)
    out = time_shapes(evaluator, cases, origin, winner, baseline, repeats, step, single=single if table else None)
    for timed, case in zip(out, cases, strict=True):
        if table is not None:
            timed.dispatch_class, timed.dispatch_attempt, _ = table.choose(case.scalars)
    return out


def _requests(trial: Trial, protocol: TimingProtocol, table: DispatchTable | None = None):
    """How the winner (with the vendor beside it; with a table, the shape's class's configuration),
    the baseline and the single winner (where a table chose another configuration) are asked to
    time one case."""
    experiment = trial.experiment

    def timed(case: CaseSpec, defines: dict, request_id: str, vendor: bool) -> EvalRequest:
        request = replace(trial, defines=defines).request(cases=[case], protocol=protocol, request_id=request_id,
                                                          vendor=vendor)
        request.time_roles = ["holdout"]
        return request

    def winner_request(case: CaseSpec) -> EvalRequest:
        return timed(case, _defines(table, case, trial), f"verify-time-{case.name}", True)

    def single_request(case: CaseSpec) -> EvalRequest | None:
        if table is None or _defines(table, case, trial) == trial.defines:
            return None
        return timed(case, trial.defines, f"verify-single-{case.name}", False)

    def baseline_request(case: CaseSpec) -> EvalRequest:
        request = experiment.request(experiment.initial_kernel_path.read_text(), protocol=protocol,
                                     request_id=f"verify-baseline-{case.name}")
        request.cases, request.time_roles = [case], ["holdout"]
        return request

    return winner_request, (baseline_request if experiment.initial_kernel_path else None), single_request
