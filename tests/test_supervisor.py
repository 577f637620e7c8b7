"""Timeouts, crashes and respawn, with a scripted worker (no GPU needed)."""

import sys
import time
from pathlib import Path

import pytest

from cudaopt.evaluation.supervisor import Supervisor, WorkerError
from cudaopt.harness.protocol import Timeouts

FAKE = [sys.executable, str(Path(__file__).with_name("fake_worker.py"))]


@pytest.fixture
def supervisor(tmp_path):
    with Supervisor(devices=[0], log_dir=tmp_path, command=FAKE) as sup:
        yield sup


def request(sgemm, entry, check_s=1.0):
    req = sgemm.request("// source", entry=entry, timeouts=Timeouts(compile_s=5, check_s=check_s, timing_s=5))
    return req


def test_a_good_request_passes(supervisor, sgemm):
    result = supervisor.evaluate(request(sgemm, "ok"))
    assert result.status == "ok" and len(result.cases) == 4


def test_a_hang_is_killed_at_its_phase_timeout_and_the_worker_replaced(supervisor, sgemm):
    first_pid = supervisor.device_info()["pid"]
    start = time.monotonic()
    result = supervisor.evaluate(request(sgemm, "hang", check_s=1.0))
    assert time.monotonic() - start < 10
    assert result.status == "timeout"
    assert "check phase ran past its 1 s timeout" in result.reason
    statuses = {c.name: c.status for c in result.cases}
    assert statuses["odd-31x37x29"] == "ok"  # finished before the hang: kept
    assert statuses["square-256"] == "timeout"
    assert result.case("square-4096").reason.startswith("not run")
    after = supervisor.evaluate(request(sgemm, "ok"))
    assert after.status == "ok" and after.device["pid"] != first_pid


def test_a_dead_worker_is_a_crash_with_its_log_and_is_replaced(supervisor, sgemm):
    result = supervisor.evaluate(request(sgemm, "die"))
    assert result.status == "crashed"
    assert "simulated fatal error" in result.reason
    assert result.case("odd-31x37x29").status == "ok"
    assert supervisor.evaluate(request(sgemm, "ok")).status == "ok"


def test_a_worker_that_cannot_start_is_a_clear_error(tmp_path, sgemm):
    with Supervisor(devices=[0], log_dir=tmp_path, command=[*FAKE, "--no-start"]) as sup:
        with pytest.raises(WorkerError, match="did not start.*no GPU here"):
            sup.evaluate(request(sgemm, "ok"))


def test_requests_spread_over_several_workers(tmp_path, sgemm):
    with Supervisor(devices=[0, 1], log_dir=tmp_path, command=FAKE) as sup:
        results = sup.evaluate_many([request(sgemm, "ok") for _ in range(4)])
    assert [r.status for r in results] == ["ok"] * 4
    assert len({r.device["pid"] for r in results}) == 2
