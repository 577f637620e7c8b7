"""The Ray backend on a local Ray cluster with two (logical) GPUs and the fake worker: one actor
per GPU, results in request order, one request per GPU at a time, hangs, crashes, a lost actor,
and no secret in the cluster's processes. Skipped when Ray is not installed."""

from __future__ import annotations

import os
import threading
import time

import pytest

from tests.conftest import optional

ray = optional("ray")

from cudaopt.pool.dispatch import WorkerError  # noqa: E402
from cudaopt.pool.ray_cluster import RayPool, connect  # noqa: E402
from cudaopt.wire.messages import PhaseStarted  # noqa: E402
from cudaopt.wire.protocol import Timeouts  # noqa: E402
from tests.fakes import FAKE, batch, intervals, one_at_a_time  # noqa: E402

SECRET = "CUDAOPT_TEST_SECRET_TOKEN"


@pytest.fixture(scope="module")
def cluster():
    """A local cluster started as ``--ray local`` starts one, with a secret in this process's environment."""
    os.environ[SECRET] = "tok-not-for-workers"
    start = time.monotonic()
    assert connect("local", gpus=2, cpus=2)
    print(f"local Ray cluster started in {time.monotonic() - start:.2f} s")
    try:
        yield
    finally:
        ray.shutdown()
        os.environ.pop(SECRET, None)


@pytest.fixture
def pool(cluster, tmp_path):
    trace = tmp_path / "trace.txt"
    with RayPool("local", command=FAKE, env={"CUDAOPT_FAKE_TRACE": str(trace)}, log_dir=tmp_path / "logs") as pool:
        yield pool, trace


def test_one_actor_per_gpu_results_in_request_order_one_request_per_gpu_at_a_time(pool, sgemm):
    pool, trace = pool
    gpus = pool.gpus()
    assert sorted(g.index for g in gpus) == [0, 1] and all(g.host and g.name == "fake" for g in gpus)
    order = []
    results = pool.evaluate_all(batch(sgemm, ["sleep:800", "sleep:100", "sleep:100", "sleep:100", "ok"]),
                                on_done=lambda i, m: order.append(i))
    assert order == [0, 1, 2, 3, 4]
    assert [m.result.request_id for m in results] == ["r0", "r1", "r2", "r3", "r4"]
    assert all(m.result.status == "ok" and m.result.case("square-256").timing for m in results)
    spans = intervals(trace)
    assert len(spans) == 5 and one_at_a_time(spans) and {s.gpu for s in spans} == {"0", "1"}
    slow = max(spans, key=lambda s: s.end - s.start)
    assert sum(1 for s in spans if s.end < slow.end) == 4  # the others finished first, on the other GPU


def test_hangs_and_crashes_are_caught_by_the_same_worker_code(pool, sgemm):
    pool, _ = pool
    results = pool.evaluate_all(batch(sgemm, ["hang", "ok", "die", "ok"]))
    assert [m.result.status for m in results] == ["timeout", "ok", "crashed", "ok"]
    assert "check phase ran past its 1 s timeout; the worker was killed" in results[0].result.reason
    assert "simulated fatal error" in results[2].result.reason  # the worker's log tail, from the node
    assert pool.evaluate(batch(sgemm, ["ok"])[0]).status == "ok"  # fresh workers serve the next requests


def test_the_workers_messages_stream_back_as_they_come(pool, sgemm):
    pool, _ = pool
    phases = []
    result = pool.evaluate(batch(sgemm, ["ok"])[0], on_event=lambda m: phases.append(m))
    assert result.status == "ok"
    assert [m.phase for m in phases if isinstance(m, PhaseStarted)] == ["compile"] + ["check"] * 4


def test_an_actor_lost_during_a_request_hands_it_back_to_run_again(pool, sgemm):
    pool, _ = pool
    running = threading.Event()
    started = {}

    def on_start(i, gpu):
        started.setdefault(i, next(lane for lane in pool.lanes if lane.ref == gpu))
        running.set()

    killed = []

    def kill_later():
        running.wait(30)
        time.sleep(0.5)
        killed.append(started[0].actor)
        ray.kill(killed[0])

    killer = threading.Thread(target=kill_later)
    killer.start()
    requests = batch(sgemm, ["sleep:2500", "ok"])
    requests[0].timeouts = Timeouts(compile_s=5, check_s=20, timing_s=5)
    results = pool.evaluate_all(requests, on_start=on_start)
    killer.join()
    assert [m.result.status for m in results] == ["ok", "ok"]  # run again, not blamed on the candidate
    assert started[0].actor is not killed[0]  # the actor that ran it first is gone
    assert len(pool.gpus()) == 2 and pool.notices == []  # the lane got a fresh actor


def test_no_secret_reaches_the_clusters_processes(pool, sgemm):
    pool, _ = pool
    assert os.environ[SECRET] == "tok-not-for-workers"  # this process keeps it

    @ray.remote(num_cpus=0)
    def environment():
        return sorted(os.environ)

    assert SECRET not in ray.get(environment.remote())
    seen = pool.evaluate(batch(sgemm, ["environ"])[0]).reason.split(",")
    assert "CUDA_VISIBLE_DEVICES" in seen and SECRET not in seen


def test_a_cluster_without_a_free_gpu_is_a_clear_error(pool):
    pool, _ = pool
    pool.gpus()  # both GPUs held by this pool's actors
    with pytest.raises(WorkerError, match="has no free GPU"):
        RayPool("local", command=FAKE)


def test_a_worker_that_cannot_start_on_a_node_is_a_clear_error(cluster, sgemm):
    with RayPool("local", command=[*FAKE, "--no-start"]) as pool:
        with pytest.raises(WorkerError, match=r"did not start.*no GPU here.*\(Ray node "):
            pool.evaluate(batch(sgemm, ["ok"])[0])


def test_the_command_line_says_why_no_worker_started_on_the_cluster(cluster):
    """`--ray local` joins the running cluster; its workers (the real ones) find no GPU here: exit 3."""
    from typer.testing import CliRunner

    from cudaopt.cli import app
    from tests.conftest import SGEMM

    result = CliRunner(env={"COLUMNS": "200"}).invoke(app, ["evaluate", "--config", str(SGEMM / "experiment.json"),
                                                            "--ray", "local"])
    assert result.exit_code == 3, result.output
    text = " ".join(result.output.split())
    assert "did not start: cannot initialise the GPU" in text and "(Ray node " in text and "cudaopt doctor" in text
