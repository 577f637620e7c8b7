import json

import pytest

from cudaopt.harness.protocol import EvalRequest, from_dict, request_from_json, to_dict, to_json
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
                                "gate": True, "chunk": 25}


def test_unknown_fields_and_wrong_types_are_rejected(sgemm):
    data = to_dict(sgemm.request("x"))
    data["kernel"]["surprise"] = 1
    with pytest.raises(ValueError, match="unknown field"):
        from_dict(EvalRequest, data)
    data = to_dict(sgemm.request("x"))
    data["protocol"]["iterations"] = "many"
    with pytest.raises(ValueError, match="iterations"):
        from_dict(EvalRequest, data)
