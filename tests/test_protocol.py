"""The wire types: requests and results survive JSON unchanged, and anything else is refused."""

import json
import math

import pytest
from pydantic import ValidationError

from cudaopt.wire.messages import CaseDone, Done, PhaseStarted, Prefetch, read_message, read_order
from cudaopt.wire.protocol import EvalRequest, TimingProtocol
from cudaopt.wire.results import CaseResult, CheckInfo, EvalResult, ResolvedLaunch, VendorResult
from tests.conftest import ROOT, SGEMM
from tests.scripted import stats


def test_request_round_trips_through_json(sgemm):
    request = sgemm.request((SGEMM / "initial.cu").read_text(), defines={"TILE": 16})
    again = EvalRequest.model_validate_json(request.to_json())
    assert again == request
    assert again.cases[0].launch.grid == ["cdiv(n, 16)", "cdiv(m, 16)"]


def test_request_is_self_contained(sgemm):
    data = json.loads(sgemm.request("kernel source").to_json())
    assert data["reference"]["source"].startswith("// Trusted reference")
    assert data["kernel"]["source"] == "kernel source"
    assert {c["role"] for c in data["cases"]} == {"correctness", "performance"}  # holdout stays out
    assert data["protocol"] == {"warmup": 10, "iterations": 100, "flush_l2": True, "input_sets": 3,
                                "gate": True, "chunk": 25, "checked_launches": 3, "seed": None,
                                "timed_ms": None, "min_iterations": 20}
    assert data["limits"] == {"global_bytes": 65536, "workspace": ["spread_bands"], "allow_tf32": False,
                              "precision": None}


def test_unknown_fields_and_wrong_types_are_rejected(sgemm):
    data = sgemm.request("x").to_data()
    data["kernel"]["surprise"] = 1
    with pytest.raises(ValidationError, match="surprise"):
        EvalRequest.model_validate(data)
    data = sgemm.request("x").to_data()
    data["protocol"]["iterations"] = "many"
    with pytest.raises(ValidationError, match="iterations"):
        EvalRequest.model_validate(data)


def test_vendor_request_and_results_round_trip_through_json(sgemm):
    request = sgemm.request("kernel source", vendor=True)
    assert EvalRequest.model_validate_json(request.to_json()) == request
    assert json.loads(request.to_json())["vendors"][0]["label"] == "cuBLAS SGEMM (cupy)"
    timing = stats(7.0, "cuda-events, chunks interleaved with the candidate")
    bad = CheckInfo(output="c", input_set=0, phase="check", ok=False, elements=4, mismatches=1, max_abs_error=0.5,
                    first_bad_index=[1, 0], expected=1.0, actual=1.5)
    result = EvalResult(status="ok", cases=[
        CaseResult(name="square-256", role="performance", status="ok", timing=timing,
                   vendors=[VendorResult(label="cuBLAS", status="ok", timing=timing)]),
        CaseResult(name="rect", role="performance", status="ok", timing=timing,
                   vendors=[VendorResult(label="cuBLAS", status="mismatch", reason="c: 1/4 wrong", checks=[bad])]),
        CaseResult(name="square-4096", role="performance", status="ok", timing=timing,
                   vendors=[VendorResult(label="cuBLAS", status="error", reason="cupy is not installed")]),
    ])
    assert EvalResult.model_validate_json(result.to_json()) == result
    data = result.to_data()
    data["cases"][0]["vendors"][0]["status"] = "slow"
    with pytest.raises(ValidationError, match="slow"):
        EvalResult.model_validate(data)


def test_non_finite_values_survive_the_wire():
    check = CheckInfo(output="c", input_set=0, phase="check", ok=False, elements=1, max_abs_error=math.inf)
    result = EvalResult(status="mismatch", cases=[CaseResult(name="a", role="correctness", status="mismatch",
                                                             checks=[check])])
    again = EvalResult.model_validate_json(result.to_json())
    assert again.cases[0].checks[0].max_abs_error == math.inf


def test_worker_messages_are_typed_by_their_type_field():
    case = CaseResult(name="a", role="performance", status="ok",
                      launch=ResolvedLaunch(grid=(4, 1, 1), block=(256, 1, 1)))
    assert read_message(PhaseStarted(phase="check", case="a").to_json()) == PhaseStarted(phase="check", case="a")
    assert read_message(CaseDone(case=case).to_json()).case.launch.threads == 256
    assert isinstance(read_message(Done(result=EvalResult(status="ok")).to_json()), Done)
    with pytest.raises(ValidationError):
        read_message('{"type": "phase", "phase": "lunch"}')
    with pytest.raises(ValidationError):
        read_message('{"type": "gossip"}')


def test_the_worker_tells_requests_from_prefetches(sgemm):
    request = sgemm.request("x")
    assert read_order(request.to_json()) == request
    prefetch = Prefetch(prefetch=[request.kernel])
    assert read_order(prefetch.to_json()) == prefetch


def test_history_before_schema_2_still_reads():
    """history.json version 1 wrote {} for a launch or roofline that was not there."""
    old = {"name": "a", "role": "correctness", "status": "crashed", "launch": {}, "occupancy": {},
           "roofline": {}, "audit": {}, "clocks": {}}  # history.json 1 (and "audit", the scan's old name)
    case = CaseResult.model_validate(old)
    assert case.launch is None and case.roofline is None and case.scan is None


def test_the_published_json_schemas_match_the_models(tmp_path):
    """docs/schemas/ is what `python -m cudaopt.schemas` writes; regenerate after changing a model."""
    from cudaopt.schemas import write

    published = ROOT / "docs" / "schemas"
    fresh = {p.name: p.read_text() for p in write(tmp_path)}
    assert sorted(fresh) == sorted(p.name for p in published.glob("*.json"))
    stale = [name for name, text in fresh.items() if (published / name).read_text() != text]
    assert not stale, f"regenerate docs/schemas (python -m cudaopt.schemas docs/schemas): {stale}"


def test_every_file_of_a_run_carries_a_schema_version():
    from cudaopt.schemas import FILES

    versioned = [name for name, model in FILES.items() if "schema_version" in getattr(model, "model_fields", {})]
    unversioned = {"best-case-N.json", "cache-result.json", "experiment.json", "input_cases.json",
                   "worker-message.json"}  # requests and results carry harness_version; user files and the wire none
    assert set(FILES) - set(versioned) == unversioned


def test_a_time_bound_lowers_the_timed_launches_of_a_long_kernel_only_down_to_its_floor():
    bounded = TimingProtocol(iterations=100, timed_ms=50, min_iterations=20)
    assert bounded.timed_launches(0.1) == 100  # 100 launches of 0.1 ms fit 50 ms
    assert bounded.timed_launches(1.0) == 50
    assert bounded.timed_launches(10.0) == 20  # never below min_iterations
    assert bounded.timed_launches(None) == 100  # no warm-up measured: every iteration
    assert TimingProtocol(iterations=100).timed_launches(10.0) == 100  # no bound: every iteration
    assert TimingProtocol(iterations=10, timed_ms=50, min_iterations=20).timed_launches(10.0) == 10


def test_a_time_bound_keeps_room_for_every_checked_launch():
    with pytest.raises(ValidationError, match="exceeds min_iterations"):
        TimingProtocol(checked_launches=8, min_iterations=5, timed_ms=50)


def test_an_optimize_run_bounds_a_long_kernels_timing_unless_its_experiment_says(sgemm):
    from cudaopt.trial import run_trial
    from cudaopt.wire.protocol import OPTIMIZE_TIMED_MS

    assert sgemm.protocol().timed_ms is None  # evaluate, verify, replay, guard: every iteration
    assert run_trial(sgemm).protocol.timed_ms == OPTIMIZE_TIMED_MS
    sgemm.timing = sgemm.timing.model_copy(update={"timed_ms": 0.0})
    assert run_trial(sgemm).protocol.timed_ms == 0.0
