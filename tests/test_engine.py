"""The run engine's scoring and summary: pure functions of the attempts (no run directory, no GPU)."""

from __future__ import annotations

import pytest

from cudaopt.engine.scoring import best_of, comparable, per_case_best, score
from cudaopt.engine.summary import REVIEW_SPEEDUP, RunFacts, summarise
from cudaopt.pool.dispatch import GpuRef
from cudaopt.wire.protocol import CaseSpec, OutputSpec, VendorSpec
from cudaopt.wire.results import CaseResult, TimingStats, VendorResult
from cudaopt.record.crown import Finalist, Finalists
from cudaopt.record.files import ModelCall, ModelUsage

CASES = [CaseSpec(name="small", role="correctness", outputs={"y": OutputSpec(shape=["1"])}),
         CaseSpec(name="a", role="performance", outputs={"y": OutputSpec(shape=["1"])}),
         CaseSpec(name="b", role="performance", outputs={"y": OutputSpec(shape=["1"])})]
H200, A100 = GpuRef(name="NVIDIA H200", index=0), GpuRef(name="NVIDIA A100", index=1)


def timing(us: float) -> TimingStats:
    return TimingStats(median_us=us, mean_us=us, stdev_us=0.0, min_us=us, max_us=us, p10_us=us, p90_us=us, n=10)


def case(name: str, us: float | None, status: str = "ok", vendor_us: float | None = None) -> CaseResult:
    role = "correctness" if name == "small" else "performance"
    vendors = [VendorResult(label="cuBLAS", status="ok", timing=timing(vendor_us))] if vendor_us else []
    return CaseResult(name=name, role=role, status=status, timing=timing(us) if us and role == "performance" else None,
                      vendors=vendors)


def attempt(i: int, a: float, b: float, *, kind: str = "tune", status: str = "ok", gpu: GpuRef = H200,
            vendor: tuple[float, float] | None = None):
    from cudaopt.record.files import Attempt

    cases = [case("small", None, status), case("a", a, vendor_us=vendor and vendor[0]),
             case("b", b, vendor_us=vendor and vendor[1])]
    return Attempt(id=i, parent=None, kind=kind, status=status, source_file=f"candidates/{i:03d}.cu", cases=cases,
                   score_us=score(cases), defines={"TILE": 16 * (i + 1)}, gpu=gpu, eval_seconds=1.5,
                   started_at="t", finished_at="t")


def test_a_score_is_the_geomean_of_the_performance_medians_and_none_when_a_case_failed():
    assert score([case("small", None), case("a", 4.0), case("b", 9.0)]) == pytest.approx(6.0)
    assert score([case("small", None, "mismatch"), case("a", 4.0), case("b", 9.0)]) is None
    assert score([]) is None


def test_the_best_is_the_fastest_on_the_baselines_gpu_model_not_disqualified():
    attempts = [attempt(0, 10, 10, kind="baseline"), attempt(1, 5, 5), attempt(2, 1, 1, gpu=A100), attempt(3, 4, 4)]
    assert not comparable(attempts[2], attempts[0])
    assert best_of(attempts).id == 3
    assert best_of(attempts, disqualified=[3]).id == 1
    finalists = Finalists(gpu=H200, repeats=3, finalists=[Finalist(attempt=1, recorded_score_us=5.0, score_us=5.0)], winner=1)
    assert best_of(attempts, finalists).id == 1  # the finalists' measurement decides


def test_per_case_best_names_the_fastest_attempt_of_each_case_beside_the_winner():
    attempts = [attempt(0, 10, 10, kind="baseline"), attempt(1, 2, 8), attempt(2, 8, 2), attempt(3, 3, 3)]
    best = best_of(attempts)
    assert best.id == 3
    rows = {r.case: r for r in per_case_best(attempts, CASES, best)}
    assert (rows["a"].attempt, rows["a"].best_us, rows["a"].winner_us, rows["a"].gain) == (1, 2.0, 3.0, 1.5)
    assert (rows["b"].attempt, rows["b"].gain) == (2, 1.5)


def test_the_summary_holds_speedups_vendors_totals_and_review_flags():
    vendor = VendorSpec(source="def f(): pass", entry="f", label="cuBLAS")
    facts = RunFacts(run="run-001", strategy="tune", description="d", signature="s", cases=CASES, vendors=[vendor],
                     model={"model": None})
    attempts = [attempt(0, 40, 10, kind="baseline", vendor=(20, 10)), attempt(1, 2, 5),
                attempt(2, 1, 1, status="mismatch")]
    calls = [ModelCall(id=0, attempt=1, model="m", messages=[], usage=ModelUsage(input_tokens=7, output_tokens=3),
                       requests=2, cost_usd=0.5)]
    summary = summarise(facts, attempts, calls, stop_reason="budget", wall_seconds=12.3456)
    by_case = {c.name: c for c in summary.cases}
    assert summary.best_attempt == 1 and summary.best_score_us == pytest.approx(10 ** 0.5)
    assert summary.speedup == pytest.approx(20 / 10 ** 0.5)
    assert by_case["a"].speedup == 20 and by_case["b"].speedup == 2
    assert by_case["a"].vendors[0].median_us == 20 and by_case["a"].vendors[0].speedup == 10
    assert summary.vendors[0].score_us == pytest.approx(200 ** 0.5)
    assert (summary.attempts, summary.valid, summary.rejected_by_reason) == (3, 2, {"mismatch": 1})
    assert (summary.totals.model_calls, summary.totals.input_tokens, summary.totals.cost_usd) == (2, 7, 0.5)
    assert summary.totals.gpu_seconds == 4.5 and summary.totals.wall_seconds == 12.346
    assert 20 > REVIEW_SPEEDUP and summary.review == ["a: 20.0x over the baseline; check it before trusting it"]
    assert summary.stop_reason == "budget"


def test_a_run_without_a_passing_candidate_has_no_best():
    facts = RunFacts(run="run-002", strategy="tune", description="d", signature="s", cases=CASES)
    summary = summarise(facts, [attempt(0, 10, 10, kind="baseline", status="mismatch")], [])
    assert summary.best_attempt is None and summary.speedup is None and summary.stop_reason == "running"
    assert summary.per_case_best == []


def test_the_summary_says_where_the_runs_time_went():
    """Checks and timing summed from the measured attempts' cases (a cached one cost nothing now),
    the finalists' rounds and the audit from their own records, the start from the caller; the rest
    of the wall time is the host's; NVRTC apart, as it runs beside the GPU."""
    from cudaopt.cli.render_experiments import time_line
    from cudaopt.record.crown import AuditedCandidate, CrowningAudit
    from cudaopt.record.files import TimeSpent
    from cudaopt.wire.results import CompileInfo

    facts = RunFacts(run="run-003", strategy="tune", description="d", signature="s", cases=CASES)
    attempts = [attempt(0, 10, 10, kind="baseline"), attempt(1, 5, 5), attempt(2, 4, 4)]
    for a in attempts:
        a.compile = CompileInfo(ok=True, log="", seconds=2.0)
        for c in a.cases:
            c.phases = {"setup_s": 0.1, "reference_s": 0.2, "controls_s": 0.3, "check_s": 0.4, "timing_s": 1.0,
                        "timed_checks_s": 0.5}
    attempts[2].cached = True
    finalists = Finalists(gpu=H200, repeats=3, finalists=[Finalist(attempt=1, recorded_score_us=5.0, score_us=5.0)],
                          winner=1, seconds=4.0)
    audit = CrowningAudit(winner=1, run_escape_bound=1e-4, audits=[AuditedCandidate(
        attempt=1, required=11, checked_launches_per_case={}, escape_bound=1e-4, rounds=3, evaluations=1, seconds=0.75)])
    summary = summarise(facts, attempts, [], wall_seconds=20.0, finalists=finalists, audit=audit,
                        before=TimeSpent(preflight_s=1.5, workers_s=2.5))
    spent = summary.time
    assert (spent.checks_s, spent.timing_s, spent.compile_s) == (2 * 3 * 1.5, 2 * 3 * 1.0, 4.0)
    assert (spent.measured_again_s, spent.audit_s, spent.wall_s) == (4.0, 0.75, 24.0)
    assert spent.other_s == pytest.approx(24.0 - (1.5 + 2.5 + 9.0 + 6.0 + 4.0 + 0.75))
    assert time_line(spent) == ("time 24.0 s: pre-flight 1.5 s, workers started 2.5 s, checks 9.0 s, timing 6.0 s, "
                                "finalists measured again 4.0 s, crowning audit 0.8 s, host and compile waits 0.2 s; "
                                "NVRTC 4.0 s of CPU beside them")
