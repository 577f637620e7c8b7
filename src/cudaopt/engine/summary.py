"""summary.json from a run's attempts: a pure function of the attempts, the model calls and what
the run is (:class:`RunFacts`), so the figures a user reads are tested without a run directory."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from ..config import CHECK_STEPS
from ..wire.precision import math_text
from ..wire.protocol import CaseSpec, VendorSpec
from ..wire.results import CaseResult
from ..wire.stats import geomean
from ..record.crown import CrowningAudit, Finalists
from ..record.rundir import RunDir
from ..record.files import (
    Attempt,
    CaseSummary,
    CaseVendor,
    KernelBenchMetrics,
    ModelCall,
    Summary,
    TimeSpent,
    Totals,
    VendorSummary,
)
from .scoring import baseline_of, best_of, geomean_of, medians, per_case_best

REVIEW_SPEEDUP = 10.0  # a larger speed-up over the baseline is flagged for review


@dataclass(frozen=True)
class RunFacts:
    """What a run is, beside its attempts: the experiment's cases and vendors, the strategy, the model."""

    run: str  # the run directory's name
    strategy: str
    description: str
    signature: str
    cases: Sequence[CaseSpec]  # the correctness and performance cases, in order
    vendors: Sequence[VendorSpec] = ()
    baseline_label: str = "initial kernel"
    model: dict = field(default_factory=dict)
    prices: dict = field(default_factory=dict)
    kernelbench_changes: list[str] | None = None  # an imported KernelBench problem's changed checks


def time_spent(attempts: Sequence[Attempt], finalists: Finalists | None, audit: CrowningAudit | None,
               before: TimeSpent, wall_seconds: float) -> TimeSpent:
    """Where the run's time went: ``before`` holds what came before its first attempt (the
    pre-flight, the workers' start); the GPU steps come from the measured attempts' cases."""
    measured = [a for a in attempts if not a.cached]
    phases = [c.phases for a in measured for c in a.cases]
    return before.model_copy(update=dict(
        checks_s=round(sum(p.get(k, 0.0) for p in phases for k in (*CHECK_STEPS, "timed_checks_s")), 3),
        timing_s=round(sum(p.get("timing_s", 0.0) for p in phases), 3),
        measured_again_s=round(finalists.seconds, 3) if finalists else 0.0,
        audit_s=round(sum(a.seconds for a in audit.audits), 3) if audit else 0.0,
        compile_s=round(sum(a.compile.seconds for a in measured if a.compile), 3),
        wall_s=round(before.preflight_s + before.workers_s + wall_seconds, 3),
        gpus=max(1, len({(a.gpu.host, a.gpu.pci_bus_id or a.gpu.index) for a in measured if a.gpu}))))


def summarise(facts: RunFacts, attempts: Sequence[Attempt], calls: Sequence[ModelCall], *, stop_reason: str = "",
              wall_seconds: float = 0.0, finalists: Finalists | None = None, disqualified: Sequence[int] = (),
              ablation: dict | None = None, audit: CrowningAudit | None = None,
              before: TimeSpent | None = None) -> Summary:
    """The run's summary: per case the baseline and the best, the vendors, the totals, the review flags."""
    baseline, best = baseline_of(attempts), best_of(attempts, finalists, disqualified)
    base_m, best_m = medians(baseline), medians(best)
    timed = {c.name: c for c in (baseline.cases if baseline else []) if c.vendors}
    cases = []
    for case in facts.cases:
        b, n = base_m.get(case.name), best_m.get(case.name)
        cases.append(CaseSummary(name=case.name, role=case.role, baseline_median_us=b, best_median_us=n,
                                 speedup=(b / n) if b and n else None,
                                 vendors=case_vendors(facts.vendors, timed.get(case.name), n)))
    perf = [c for c in cases if c.role == "performance"]
    base_score = baseline.score_us if baseline and baseline.source_file else geomean_of(
        [c.baseline_median_us for c in perf])
    best_score = best.score_us if best else None
    vendors = []
    for i, spec in enumerate(facts.vendors):
        v_score = geomean_of([c.vendors[i].median_us if i < len(c.vendors) else None for c in perf])
        vendors.append(VendorSummary(label=spec.label, pytorch=spec.pytorch, score_us=v_score,
                                     speedup=(v_score / best_score) if v_score and best_score else None))
    usage: Counter = Counter()
    for c in calls:
        usage.update(c.usage.model_dump())
    per_case = per_case_best(attempts, facts.cases, best)
    return Summary(
        run=facts.run, strategy=facts.strategy, description=facts.description,
        signature=facts.signature, model=facts.model, baseline_attempt=0,
        best_attempt=best.id if best else None, best_source_file=RunDir.BEST if best else None,
        best_defines=best.defines if best else {},
        best_math=math_text(best.compile) if best and best.compile else None,
        cases=cases, baseline=facts.baseline_label, baseline_score_us=base_score, best_score_us=best_score,
        speedup=(base_score / best_score) if base_score and best_score else None,
        vendors=vendors, kernelbench=KernelBenchMetrics.of(
            vendors, best is not None, facts.kernelbench_changes),
        stop_reason=stop_reason or "running",
        attempts=len(attempts), valid=sum(1 for a in attempts if a.status == "ok"),
        rejected_by_reason=dict(Counter(a.status for a in attempts if a.status != "ok")),
        totals=Totals(
            model_calls=sum(c.requests for c in calls), input_tokens=usage["input_tokens"],
            output_tokens=usage["output_tokens"], reasoning_tokens=usage["reasoning_tokens"],
            cost_usd=round(sum(c.cost_usd for c in calls), 6),
            gpu_seconds=round(sum(a.eval_seconds for a in attempts), 3), wall_seconds=round(wall_seconds, 3),
        ),
        prices_usd_per_million_tokens=facts.prices,
        ablation=ablation,
        review=[f"{c.name}: {c.speedup:.1f}x over the baseline; check it before trusting it"
                for c in cases if c.speedup and c.speedup > REVIEW_SPEEDUP],
        per_case_best=per_case,
        dispatch_score_us=geomean([b.best_us for b in per_case]) if per_case else None,
        finalists=finalists,
        audit=audit,
        time=time_spent(attempts, finalists, audit, before or TimeSpent(), wall_seconds),
    )


def case_vendors(vendors: Sequence[VendorSpec], timed: CaseResult | None, best_us: float | None) -> list[CaseVendor]:
    """Each of the experiment's vendors on one case, from the baseline evaluation."""
    out = []
    for i, spec in enumerate(vendors):
        result = timed.vendors[i] if timed and i < len(timed.vendors) else None
        median = timed.vendor_median_us(i) if timed else None
        out.append(CaseVendor(label=spec.label, median_us=median, status=result.status if result else None,
                              speedup=(median / best_us) if median and best_us else None))
    return out
