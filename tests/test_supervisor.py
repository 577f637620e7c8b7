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


def test_prefetch_reaches_the_worker_without_an_answer(supervisor, sgemm):
    kernels = [sgemm.request("// source", entry="ok", defines={"B": b}).kernel for b in (1, 2, 3)]
    supervisor.prefetch(kernels)
    result = supervisor.evaluate(request(sgemm, "ok"))  # the next answer is this request's result
    assert result.status == "ok" and result.reason == "prefetched 3"


def test_vendor_results_pass_through_the_supervisor(supervisor, sgemm):
    req = sgemm.request("// source", entry="ok", vendor=True)
    result = supervisor.evaluate(req)
    (vendor,) = result.case("square-256").vendors
    assert vendor.label == "cuBLAS SGEMM (cupy)" and vendor.status == "ok" and vendor.timing.median_us == 7.0
    assert result.case("odd-31x37x29").vendors == []  # correctness cases are not timed


def test_a_hang_is_killed_at_its_phase_timeout_and_the_worker_replaced(supervisor, sgemm):
    first_pid = supervisor.device_info().pci_bus_id
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
    assert after.status == "ok" and after.device.pci_bus_id != first_pid


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
