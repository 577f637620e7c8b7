"""``cudaopt audit``: which of a fleet's kernels are worth optimising, and optimising the best bets.

A fleet is a folder of experiments (every ``experiment.json`` below it) or a list file (one
config path a line, relative to the file; ``#`` starts a comment). Every experiment's kernel
(its ``initial_kernel``) is checked and timed with its vendor baseline beside it, all of them at
once on every GPU of the pool; an experiment without one (a KernelBench import) has its vendor
measured alone, the bar its run will have to beat. fleet/headroom.py estimates what each could
gain and return; the experiments are ranked by that return. One experiment's problem (a file
that does not load, a failed check, a run that stops on an error) is its row's outcome, never the
end of the audit. With a plan (``--optimize``) the chosen strategy runs on
the top ones with headroom, one after another on every GPU, each getting an equal share of the
cost and time left when it starts; each run's directory lands in ``runs/NAME/run-001``.
``audit.json`` and ``audit.html`` are written after the measurements and after every run.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from .. import strategies
from ..reading import read_text_file
from ..errors import ExperimentError
from ..pool.dispatch import Evaluator
from ..experiment import Experiment, ExperimentArgs
from ..optimize import Options, start_or_resume
from ..record.rundir import RunDir, write_atomic
from ..record.runs import Budget
from ..record.files import Summary
from ..report.roi import compute
from .files import AuditEntry, AuditPlan, AuditReport, OptimizedRun
from .headroom import estimate, estimate_vendor, returns
from .page import build

MIN_SHARE_S = 1.0  # a run with less time than this is not started


@dataclass
class Member:
    """One experiment of the fleet; ``error`` (and no experiment) when it cannot be measured."""
    name: str
    config: Path
    experiment: Experiment | None
    error: str = ""


@dataclass
class Plan:
    """``--optimize``: what to run on the top experiments, and the budget they share."""
    strategy: str
    top: int = 3
    max_cost_usd: float | None = None
    time_limit_s: float | None = None
    max_iterations: int | None = None
    settings: object = None  # agent.model.ModelSettings
    options: dict = field(default_factory=dict)  # more optimize.Options (max_evals, seed, chat_model, ...)


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def discover(source: Path) -> list[Path]:
    """The config files of a fleet: every experiment.json below a folder, or those a list file names."""
    if not source.exists():
        raise ExperimentError(source, "", "not found (give a folder of experiments or a list file)")
    if source.is_dir():
        found = sorted(p for p in source.rglob("experiment.json")
                       if not any(part.startswith(".") for part in p.relative_to(source).parts))
        if not found:
            raise ExperimentError(source, "", "no experiment.json below it")
        return found
    configs = []
    listing = read_text_file(source, "")
    for number, line in enumerate(listing.splitlines(), start=1):
        text = line.split("#", 1)[0].strip()
        if not text:
            continue
        path = (source.parent / text).resolve()
        if not path.is_file():
            raise ExperimentError(source, f"line {number}", f"{path} not found")
        configs.append(path)
    if not configs:
        raise ExperimentError(source, "", "names no experiment")
    return configs


def load_fleet(source: Path) -> list[Member]:
    """Every experiment of the fleet loaded and checked; one that does not load keeps its one-line
    error (naming the file and the field) as its row's outcome."""
    members, taken = [], set()
    for config in discover(source):
        base = config.parent.relative_to(source).as_posix() if source.is_dir() else config.parent.name
        base = base if base != "." else config.parent.resolve().name
        if config.stem != "experiment":
            base = f"{base}/{config.stem}"
        name, n = base, 1
        while name in taken:
            n += 1
            name = f"{base}-{n}"
        taken.add(name)
        try:
            experiment = ExperimentArgs(config=str(config.resolve())).load()
        except ExperimentError as exc:
            members.append(Member(name, config.resolve(), None, str(exc)))
            continue
        member = Member(name, config.resolve(), experiment)
        if experiment.initial_kernel_path is None and not experiment.vendors:
            member.error = f"{config}: initial_kernel: missing, and no vendor: nothing to measure"
        members.append(member)
    return members


def audit(members: list[Member], evaluator: Evaluator, folder: Path, source: Path, *, roof_target: float = 0.7,
          plan: Plan | None = None, on_line: Callable[[str], None] = lambda line: None) -> AuditReport:
    """Measure, estimate, rank and (with a plan) optimise; audit.json and audit.html in ``folder``."""
    started = time.monotonic()
    report = AuditReport(source=str(source), started_at=_now(), gpus=evaluator.gpus(), backend=evaluator.backend,
                         roof_target=roof_target, entries=[],
                         plan=AuditPlan(strategy=plan.strategy, top=plan.top, max_cost_usd=plan.max_cost_usd,
                                        time_limit_s=plan.time_limit_s) if plan else None)
    ready = [m for m in members if not m.error]
    requests = [m.experiment.request(_kernel(m.experiment), vendor=True, request_id=f"audit-{m.name}")
                for m in ready]
    measured = dict(zip((m.name for m in ready), evaluator.evaluate_all(requests), strict=True))
    entries = [_entry(member, measured.get(member.name), roof_target) for member in members]
    entries.sort(key=lambda e: (e.net_usd is None, -(e.net_usd or 0.0), e.name))
    for rank, entry in enumerate(entries, start=1):
        entry.rank = rank
    report.entries = entries
    _write(folder, report)
    if plan is not None:
        by_name = {m.name: m for m in members}
        chosen = [e for e in entries if e.headroom is not None and e.headroom.headroom > 1][:plan.top]
        spent = 0.0
        for n, entry in enumerate(chosen):
            try:
                spent += _optimize(by_name[entry.name], entry, plan, evaluator, folder, started, spent,
                                   len(chosen) - n, on_line)
            except ExperimentError as exc:
                entry.note = f"not optimised: {exc}"
            except Exception as exc:  # this experiment's run failed; the audit goes on with the others
                entry.note = f"optimisation stopped: {type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
                on_line(f"{entry.name}: {entry.note}")
            _write(folder, report)
    report.finished_at = _now()
    _write(folder, report)
    return report


def _kernel(experiment: Experiment) -> str | None:
    """The kernel the audit measures: the initial kernel; None (the vendor alone) without one."""
    path = experiment.initial_kernel_path
    return path.read_text() if path is not None else None


def _entry(member: Member, measured, roof_target: float) -> AuditEntry:
    """One experiment's row: its outcome, and its headroom and estimated return when it was timed."""
    row = AuditEntry(rank=0, name=member.name, config=str(member.config), status="bad_input", reason=member.error)
    if member.error:
        return row
    if measured is None:
        row.status, row.reason = "not_measured", "the pool stopped before it was measured"
        return row
    exp, result = member.experiment, measured.result
    headroom = estimate(result, exp.roi, roof_target) if exp.initial_kernel_path is not None else \
        estimate_vendor(result, exp.case_specs, exp.signature, exp.roi, roof_target)
    roi, net = returns(headroom, exp.roi) if headroom else (None, None)
    row.status, row.reason, row.gpu = result.status, " ".join(result.reason.split()), measured.gpu
    row.headroom, row.roi, row.net_usd = headroom, roi, net
    return row


def _optimize(member: Member, entry: AuditEntry, plan: Plan, evaluator: Evaluator, folder: Path, started: float,
              spent: float, left: int, on_line: Callable[[str], None]) -> float:
    """One experiment's run, on its share of what is left; the cost it spent."""
    time_share = cost_share = None
    if plan.time_limit_s is not None:
        time_share = (plan.time_limit_s - (time.monotonic() - started)) / left
        if time_share < MIN_SHARE_S:
            entry.note = "not optimised: the audit's time limit was reached"
            return 0.0
    if plan.max_cost_usd is not None:
        cost_share = (plan.max_cost_usd - spent) / left
        if cost_share <= 0:
            entry.note = "not optimised: the audit's cost budget is spent"
            return 0.0
    try:
        strategies.get(plan.strategy).check(member.experiment, str(member.config))
    except ExperimentError as exc:
        entry.note = f"not optimised: {exc.field + ': ' if exc.field else ''}{exc.message}"
        return 0.0
    budget = Budget(max_iterations=plan.max_iterations or member.experiment.max_iterations,
                    max_cost_usd=cost_share, time_limit_s=time_share)
    share = f"{time_share:.0f} s" if time_share is not None else "no time limit"
    on_line(f"optimising {member.name} ({plan.strategy}, {share})")
    results = folder / "runs" / member.name.replace("/", "-")
    run, summary = start_or_resume(ExperimentArgs(config=str(member.config)), plan.settings, budget, results,
                                   evaluator, Options(strategy=plan.strategy, **plan.options))
    entry.optimized = _outcome(run.path, folder, plan.strategy, budget, summary, member, entry)
    on_line(f"{member.name}: {summary.stop_reason}; score {summary.speedup or 0:.2f}× over its baseline "
            f"({run.path.relative_to(folder)})")
    return summary.totals.cost_usd


def _outcome(run: Path, folder: Path, strategy: str, budget: Budget, summary: Summary, member: Member,
             entry: AuditEntry) -> OptimizedRun:
    case = next((c for c in summary.cases if entry.headroom and c.name == entry.headroom.case), None)
    baseline, best = (case.baseline_median_us, case.best_median_us) if case else (None, None)
    t = summary.totals
    roi = compute(member.experiment.roi, case.name, baseline, best, t.cost_usd, t.gpu_seconds) \
        if case and baseline and best else None
    return OptimizedRun(run=str(run.relative_to(folder)), report=str((run / RunDir.REPORT).relative_to(folder)),
                        strategy=strategy, budget=budget, stop_reason=summary.stop_reason, baseline_us=baseline,
                        best_us=best, speedup=summary.speedup, cost_usd=t.cost_usd, gpu_seconds=t.gpu_seconds,
                        wall_seconds=t.wall_seconds, roi=roi)


def _write(folder: Path, report: AuditReport) -> None:
    write_atomic(folder / "audit.json", report.to_json(indent=2) + "\n")
    build(folder, report)
