"""Phase timeouts scaled from the run's baseline: a hanging candidate costs seconds, not minutes."""

from __future__ import annotations

import time

import pytest

from cudaopt.config import TimeoutPolicy
from cudaopt.pool.supervisor import Supervisor
from cudaopt.experiment import load_experiment
from cudaopt.wire.protocol import CaseTimeouts, Timeouts
from cudaopt.wire.results import CaseResult
from tests.fakes import FAKE
from tests.test_experiment import expect_error


def case(name, phases, status="ok"):
    return CaseResult(name=name, role="performance", status=status, phases=phases)


PASSED = [
    case("tiny", {"setup_s": 0.01, "reference_s": 0.02, "check_s": 0.01}),
    case("big", {"setup_s": 0.4, "reference_s": 0.1, "check_s": 0.1, "timing_s": 1.9, "timed_checks_s": 0.1}),
    case("huge", {"setup_s": 5, "reference_s": 5, "check_s": 5, "timing_s": 40}),
]


def test_limits_are_a_multiple_of_the_baseline_with_a_floor_and_a_ceiling():
    timeouts = TimeoutPolicy(check_s=300, timing_s=300, multiple=20, floor_s=10).scaled(PASSED)
    assert timeouts.limit("check", "tiny") == 10  # 20 x 0.04 s, raised to the floor
    assert timeouts.limit("timing", "tiny") == 300  # a correctness case is never timed: the fixed limit
    assert timeouts.limit("check", "big") == 12 and timeouts.limit("timing", "big") == 40
    assert timeouts.limit("check", "huge") == 300 and timeouts.limit("timing", "huge") == 300  # capped
    assert timeouts.limit("check", "not measured") == 300 and timeouts.limit("compile") == 60
    assert "20x the baseline" in timeouts.basis


def test_failed_or_unmeasured_cases_and_fixed_policies_keep_the_fixed_limits():
    failed = [case("big", PASSED[1].phases, status="mismatch"), case("old", {})]
    assert TimeoutPolicy().scaled(failed).cases == {}
    assert TimeoutPolicy(multiple=None).scaled(PASSED).cases == {}
    assert TimeoutPolicy().scaled(failed).basis == ""


def test_a_hang_costs_the_cases_scaled_limit_and_the_reason_says_why(tmp_path, sgemm):
    timeouts = Timeouts(compile_s=5, check_s=120, timing_s=120, cases={"square-256": CaseTimeouts(check_s=1.0, timing_s=5.0)},
                        basis="20x the baseline's time in this phase")
    with Supervisor(devices=[0], log_dir=tmp_path, command=FAKE) as sup:
        start = time.monotonic()
        result = sup.evaluate(sgemm.request("// source", entry="hang", timeouts=timeouts))
    assert time.monotonic() - start < 10  # not the 120 s fixed limit
    assert result.status == "timeout"
    assert "check phase ran past its 1 s timeout (20x the baseline's time in this phase)" in result.reason


def test_the_experiment_sets_the_policy(example):
    folder, edit = example
    edit("experiment.json", lambda d: d.update(timeouts={"check_s": 60, "multiple": 5, "floor_s": 2}))
    exp = load_experiment(folder / "experiment.json")
    assert exp.timeouts == TimeoutPolicy(compile_s=60, check_s=60, timing_s=300, multiple=5, floor_s=2)
    assert exp.request("// source").timeouts == Timeouts(compile_s=60, check_s=60, timing_s=300, launch_multiple=5,
                                                         launch_floor_s=2)


@pytest.mark.parametrize(
    "timeouts, field, message",
    [
        ({"check_s": 0}, "timeouts.check_s", "greater than 0"),
        ({"timing_s": float("inf")}, "timeouts.timing_s", "finite number"),
        ({"multiple": 0.5}, "timeouts.multiple", "greater than or equal to 1"),
        ({"floor": 3}, "timeouts.floor", "not a field of this file (did you mean 'floor_s'?)"),
    ],
)
def test_a_bad_timeouts_section_names_its_field(example, timeouts, field, message):
    folder, edit = example
    edit("experiment.json", lambda d: d.update(timeouts=timeouts))
    expect_error(folder, field, message)


def test_a_cached_result_is_found_whatever_the_timeouts(tmp_path, sgemm):
    from cudaopt.record.cache import ResultCache
    from cudaopt.wire.results import DeviceInfo

    cache = ResultCache(tmp_path, DeviceInfo(name="GPU"))
    scaled = Timeouts(cases={"square-256": CaseTimeouts(check_s=10, timing_s=12)}, basis="scaled")
    assert cache.key(sgemm.request("// a")) == cache.key(sgemm.request("// a", timeouts=scaled))
    assert cache.key(sgemm.request("// a")) != cache.key(sgemm.request("// b"))
