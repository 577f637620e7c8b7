"""Timeouts, crashes and respawn, and requests spread over several workers, with a scripted
worker (no GPU needed)."""

import time

import pytest

from cudaopt.pool.supervisor import Supervisor, Worker, WorkerError
from cudaopt.wire.protocol import Timeouts
from tests.fakes import FAKE, batch, intervals, one_at_a_time


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


def test_a_batch_is_compiled_ahead_without_an_answer(supervisor, sgemm):
    requests = [sgemm.request("// source", entry="ok", defines={"B": b}) for b in (1, 2, 3)]
    results = supervisor.evaluate_all(requests)  # each answer is its request's result
    assert [m.result.reason for m in results] == ["prefetched 3"] * 3
    assert supervisor.evaluate(request(sgemm, "ok")).reason == "prefetched 3"  # a single request: nothing more


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


@pytest.fixture
def pair(tmp_path):
    """Two fake GPUs whose workers trace when each request starts and ends."""
    trace = tmp_path / "trace.txt"
    with Supervisor(devices=[0, 1], log_dir=tmp_path, command=FAKE,
                    env={"CUDAOPT_FAKE_TRACE": str(trace), "CUDAOPT_FAKE_BROKEN": str(tmp_path / "broken")}) as sup:
        yield sup, trace


def test_results_come_in_request_order_whatever_finishes_first(pair, sgemm):
    sup, trace = pair
    order = []
    results = sup.evaluate_all(batch(sgemm, ["sleep:800", "ok", "ok", "ok"]), on_done=lambda i, m: order.append(i))
    assert order == [0, 1, 2, 3]
    assert [m.result.request_id for m in results] == ["r0", "r1", "r2", "r3"]
    assert [m.result.status for m in results] == ["ok"] * 4
    spans = intervals(trace)
    slow = next(s for s in spans if s.end - s.start > 0.7)
    assert sum(1 for s in spans if s.end < slow.end) == 3  # the others finished first, on the other GPU
    assert {m.gpu.index for m in results} == {0, 1} and results[0].gpu.name == "fake"


def test_never_two_requests_on_one_gpu_at_a_time_and_both_gpus_busy(pair, sgemm):
    sup, trace = pair
    results = sup.evaluate_all(batch(sgemm, ["sleep:300"] * 6))
    assert all(m.result.status == "ok" for m in results)
    spans = intervals(trace)
    assert len(spans) == 6 and one_at_a_time(spans), spans
    assert sorted(s.gpu for s in spans) == ["0"] * 3 + ["1"] * 3  # each GPU ran its share
    busy = max(s.end for s in spans) - min(s.start for s in spans)  # from the first request to the last
    assert busy < 6 * 0.3  # so the two GPUs worked at the same time (the workers' start left out)


def test_a_hang_and_a_crash_on_one_gpu_leave_the_batch_going(pair, sgemm):
    sup, _ = pair
    results = sup.evaluate_all(batch(sgemm, ["hang", "ok", "die", "ok", "ok"]))
    assert [m.result.status for m in results] == ["timeout", "ok", "crashed", "ok", "ok"]
    assert "check phase ran past its 1 s timeout" in results[0].result.reason
    assert "simulated fatal error" in results[2].result.reason


def test_pinned_requests_run_on_their_gpu_in_their_order(pair, sgemm):
    sup, trace = pair
    requests = batch(sgemm, ["sleep:50"] * 5)
    results = sup.evaluate_all(requests, pins=[1, 1, None, 1, 0])
    assert [m.gpu.index for m in results][:2] == [1, 1] and results[3].gpu.index == 1 and results[4].gpu.index == 0
    on_one = [s for s in intervals(trace) if s.gpu == "1"]
    assert len(on_one) >= 3 and all(a.start < b.start for a, b in zip(on_one, on_one[1:]))


def test_once_told_to_stop_nothing_more_starts(pair, sgemm):
    sup, _ = pair
    done = []
    results = sup.evaluate_all(batch(sgemm, ["sleep:200"] * 6), should_stop=lambda: len(done) >= 1,
                               on_done=lambda i, m: done.append((i, m is not None)))
    ran = [m is not None for m in results]
    assert ran[:2] == [True, True] and not all(ran)  # the first two started at once; later ones never did
    assert [i for i, _ in done] == list(range(6)) and [r for _, r in done] == ran


def test_a_gpu_whose_worker_no_longer_starts_leaves_the_pool_and_its_request_runs_elsewhere(pair, sgemm, tmp_path):
    sup, _ = pair
    sup.evaluate_all(batch(sgemm, ["ok", "ok"]))
    (tmp_path / "broken").write_text("1\n")  # GPU 1's next worker will not start
    first = sup.evaluate_all(batch(sgemm, ["die", "die"]))  # kills both workers
    assert [m.result.status for m in first] == ["crashed", "crashed"]
    results = sup.evaluate_all(batch(sgemm, ["ok", "ok", "ok"]))
    assert [m.result.status for m in results] == ["ok"] * 3 and {m.gpu.index for m in results} == {0}
    assert any(n.startswith("GPU 1 left the pool") and "did not start" in n for n in sup.notices), sup.notices
    assert [g.index for g in sup.gpus()] == [0]


def test_gpus_of_another_model_are_left_out(tmp_path, sgemm):
    with Supervisor(devices=[0, 1], log_dir=tmp_path, command=FAKE,
                    env={"CUDAOPT_FAKE_GPU_NAMES": "0=fake-h200,1=fake-a100"}) as sup:
        assert [g.label for g in sup.gpus()] == ["GPU 0"]
        assert sup.notices == ["GPU 1 (fake-a100) left out: this pool measures on fake-h200 GPUs only, so that "
                               "its measurements compare"]
        results = sup.evaluate_all(batch(sgemm, ["ok"] * 3))
        assert {m.gpu.name for m in results} == {"fake-h200"}


def test_one_worker_per_gpu():
    with pytest.raises(ValueError, match="one worker per GPU"):
        Supervisor(devices=[0, 0])


def test_the_default_command_starts_the_real_worker_module(tmp_path):
    """``python -m cudaopt.worker.main``, as the supervisor starts it, runs and speaks the protocol:
    Ready where there is a GPU, Fatal naming the GPU where there is none (never an import error)."""
    worker = Worker(0, tmp_path / "worker.log")
    try:
        worker.start()
    except WorkerError as exc:
        assert "cannot initialise the GPU" in str(exc), str(exc)
    else:
        assert worker.info is not None
    finally:
        worker.stop()
