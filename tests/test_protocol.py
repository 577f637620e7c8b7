import json

import pytest

from cudaopt.harness.protocol import (
    CaseResult,
    CheckInfo,
    EvalRequest,
    EvalResult,
    TimingStats,
    VendorResult,
    from_dict,
    request_from_json,
    result_from_json,
    to_dict,
    to_json,
)
from tests.conftest import SGEMM


def test_request_round_trips_through_json(sgemm):
    request = sgemm.request((SGEMM / "initial.cu").read_text(), defines={"TILE": 16})
    again = request_from_json(to_json(request))
    assert again == request
    assert again.cases[0].launch.grid == ["cdiv(n, 16)", "cdiv(m, 16)"]


def test_request_is_self_contained(sgemm):
    data = json.loads(to_json(sgemm.request("kernel source")))
    assert data["reference"]["source"].startswith("// Trusted reference")
    assert data["kernel"]["source"] == "kernel source"
    assert {c["role"] for c in data["cases"]} == {"correctness", "performance"}  # holdout stays out
    assert data["protocol"] == {"warmup": 10, "iterations": 100, "flush_l2": True, "input_sets": 3,
                                "gate": True, "chunk": 25, "checked_launches": 3, "seed": None}
    assert data["limits"] == {"global_bytes": 1024, "allow_tf32": False}


def test_unknown_fields_and_wrong_types_are_rejected(sgemm):
    data = to_dict(sgemm.request("x"))
    data["kernel"]["surprise"] = 1
    with pytest.raises(ValueError, match="unknown field"):
        from_dict(EvalRequest, data)
    data = to_dict(sgemm.request("x"))
    data["protocol"]["iterations"] = "many"
    with pytest.raises(ValueError, match="iterations"):
        from_dict(EvalRequest, data)


def test_vendor_request_and_results_round_trip_through_json(sgemm):
    request = sgemm.request("kernel source", vendor=True)
    assert request_from_json(to_json(request)) == request
    assert json.loads(to_json(request))["vendor"]["label"] == "cuBLAS SGEMM (cupy)"
    timing = TimingStats(7.0, 7.1, 0.2, 6.8, 7.9, 6.9, 7.4, 100, "cuda-events, chunks interleaved with the candidate")
    bad = CheckInfo(output="c", input_set=0, phase="check", ok=False, elements=4, mismatches=1, max_abs_error=0.5,
                    first_bad_index=[1, 0], expected=1.0, actual=1.5)
    result = EvalResult(status="ok", cases=[
        CaseResult("square-256", "performance", "ok", timing=timing, vendor=VendorResult("cuBLAS", "ok", timing=timing)),
        CaseResult("rect", "performance", "ok", timing=timing,
                   vendor=VendorResult("cuBLAS", "mismatch", "c: 1/4 wrong", checks=[bad])),
        CaseResult("square-4096", "performance", "ok", timing=timing,
                   vendor=VendorResult("cuBLAS", "error", "cupy is not installed")),
    ])
    assert result_from_json(to_json(result)) == result
    data = to_dict(result)
    data["cases"][0]["vendor"]["status"] = "slow"
    with pytest.raises(ValueError, match="slow"):
        from_dict(EvalResult, data)
