"""Kernels written the way a model rewarded for speed writes them: each must be rejected, or be
timed at its honest cost. One test per rule of docs/evaluation.md's trust table."""

from __future__ import annotations

import json

import pytest

from cudaopt.wire.protocol import Limits, TimingProtocol
from tests.conftest import kernel_source
from tests.gpu.conftest import runner_without

pytestmark = pytest.mark.gpu

MANY = TimingProtocol(warmup=5, iterations=60)


def failing_case(result):
    return next(c for c in result.cases if c.status != "ok")


def test_a_memo_table_never_hits_on_fresh_inputs(supervisor, small_request):
    """With room for its table, a 4-slot memo keyed on a sample including the last element passes,
    but at the honest cost: no launch ever sees inputs another launch saw."""
    honest = supervisor.evaluate(small_request(kernel_source("naive.cu"), protocol=MANY, cases={"rect-384x256x320"}))
    request = small_request(kernel_source("memo_multislot.cu"), protocol=MANY, cases={"rect-384x256x320"})
    assert supervisor.evaluate(request).status == "global_state"  # 1.9 MB of __device__ memory: refused
    request.limits = Limits(global_bytes=4 << 20)
    memo = supervisor.evaluate(request)
    assert honest.status == "ok" and memo.status == "ok", memo.reason
    # a replayed C costs a copy, far under the product; fresh inputs keep it at the product's cost
    assert memo.cases[0].timing.median_us >= 0.9 * honest.cases[0].timing.median_us


def test_working_on_a_few_launches_is_caught_by_the_hidden_checks(gpu, monkeypatch, supervisor, small_request):
    """With its launch counter restored before every launch it works on every launch (ok); with
    the counter left to count (the restore off in this process), the hidden checks catch it."""
    assert supervisor.evaluate(small_request(kernel_source("work_on_few_launches.cu"))).status == "ok"
    result = runner_without(gpu, monkeypatch, restore=False).evaluate(
        small_request(kernel_source("work_on_few_launches.cu"), protocol=MANY))
    assert result.status == "mismatch", result.reason
    bad = [c for c in failing_case(result).checks if not c.ok][0]
    assert bad.phase == "timed" and bad.input_set == -1 and bad.launch is not None
    assert bad.launch in (failing_case(result).scan.checked_launches if failing_case(result).scan else [bad.launch])


def test_skipping_launches_is_caught_by_the_per_launch_audit(gpu, monkeypatch, supervisor, small_request):
    """Its launch counter restored before every launch, it never skips (ok); left to count (the
    restore off in this process), the launch scan sees the launches it skipped."""
    assert supervisor.evaluate(small_request(kernel_source("skip_launches.cu"))).status == "ok"
    result = runner_without(gpu, monkeypatch, restore=False).evaluate(
        small_request(kernel_source("skip_launches.cu"), protocol=MANY))
    assert result.status == "mismatch"
    assert "launch" in result.reason and "unwritten" in result.reason


def test_which_launches_are_checked_changes_with_the_seed(supervisor, small_request):
    picks = set()
    for seed in (1, 2, 3):
        request = small_request(kernel_source("naive.cu"), protocol=TimingProtocol(warmup=2, iterations=40, seed=seed),
                                cases={"square-256"})
        result = supervisor.evaluate(request)
        assert result.status == "ok" and result.seed == seed
        picks.add(tuple(result.cases[0].scan.checked_launches))
    assert len(picks) > 1
    again = supervisor.evaluate(request)  # the same seed draws the same launches
    assert tuple(again.cases[0].scan.checked_launches) in picks


def test_a_tunable_may_not_shadow_a_case_scalar(supervisor, small_request):
    request = small_request(kernel_source("shadow_scalar.cu"))
    request.kernel.defines = {"m": 16}
    result = supervisor.evaluate(request)
    assert result.status == "bad_launch_config"
    assert "shadows the case scalar 'm'" in result.reason
    request.kernel.defines = {"TILE": 16}  # its own name is fine, and the kernel is correct
    assert supervisor.evaluate(request).status == "ok"


def test_reading_past_the_end_reads_nan(supervisor, small_request):
    result = supervisor.evaluate(small_request(kernel_source("reads_past_end.cu")))
    assert result.status == "mismatch"
    assert failing_case(result).name == "odd-31x37x29"  # 29 is not a multiple of 8
    bad = [c for c in failing_case(result).checks if not c.ok][0]
    assert bad.nan_count > 0


def test_device_malloc_is_refused(supervisor, small_request):
    result = supervisor.evaluate(small_request(kernel_source("device_malloc.cu")))
    assert result.status == "global_state" and "malloc" in result.reason
    assert result.compile.device_malloc and result.cases == []


def test_an_include_of_a_host_file_leaks_nothing(tmp_path, monkeypatch, sgemm):
    """A secret in the supervisor's environment reaches neither the worker nor the result."""
    from cudaopt.pool.supervisor import Supervisor

    secret = "sk-planted-7f3a9c1e"
    monkeypatch.setenv("OPENAI_API_KEY", secret)
    monkeypatch.setenv("SOME_SERVICE_TOKEN", secret)
    with Supervisor(devices=[0], log_dir=tmp_path) as sup:
        request = sgemm.request(kernel_source("include_environ.cu"), protocol=TimingProtocol(warmup=1, iterations=5))
        result = sup.evaluate(request)
        assert result.status == "compile_error" and "not allowed" in result.reason
        assert secret not in result.to_json()
        # a kernel may print from the device: nothing of the environment is there to print
        env_probe = sup.evaluate(sgemm.request(kernel_source("naive.cu"), protocol=TimingProtocol(warmup=1, iterations=5)))
        assert env_probe.status == "ok"
        pid = sup.workers[0].proc.pid
        environ = open(f"/proc/{pid}/environ", "rb").read().decode(errors="replace")
        assert secret not in environ and "OPENAI_API_KEY" not in environ
    assert all(secret not in p.read_text(errors="replace") for p in tmp_path.rglob("*") if p.is_file())


def test_timed_checks_are_reproducible_with_the_recorded_seed(supervisor, small_request):
    request = small_request(kernel_source("tiled.cu"), cases={"square-256"})
    first = supervisor.evaluate(request)
    request.protocol.seed = first.seed
    second = supervisor.evaluate(request)
    assert first.cases[0].scan.checked_launches == second.cases[0].scan.checked_launches
    errors = lambda r: [c.max_abs_error for c in r.cases[0].checks if c.phase == "timed"]  # noqa: E731
    assert errors(first) == errors(second)  # the same fresh inputs, the same answers
    assert json.loads(first.to_json())["seed"] == first.seed



def test_the_global_state_of_a_kernel_is_reported(supervisor, small_request):
    result = supervisor.evaluate(small_request(kernel_source("work_on_few_launches.cu")))
    assert result.compile.global_bytes == 20  # a counter, a shape, a barrier: under the limit, caught by the checks


def test_the_answer_key_is_not_on_the_device_while_a_candidate_runs(supervisor, small_request):
    """A kernel that computes one element honestly, then searches the memory after its output for a
    float64 array holding that value (the reference) and copies it: there is nothing to find."""
    result = supervisor.evaluate(small_request(kernel_source("answer_key_thief.cu"), cases={"square-256"}))
    assert result.status in ("mismatch", "crashed"), result.reason


def test_memcheck_sees_reads_past_the_end_without_guard_bands(tmp_path, sgemm):
    """Under --sanitize the buffers have no guard bands, so compute-sanitizer sees the overrun."""
    from cudaopt.winner.sanitize import find_sanitizer, sanitize

    try:
        find_sanitizer()
    except Exception:
        pytest.skip("compute-sanitizer not installed")
    cases = {"odd-31x37x29"}
    clean = sgemm.request(kernel_source("naive.cu"))
    clean.cases = [c for c in clean.cases if c.name in cases]
    (ok,) = sanitize(clean, 0, tmp_path / "clean", tools=("memcheck",))
    assert ok.passed and ok.errors == 0, ok.report
    cheat = sgemm.request(kernel_source("reads_past_end.cu"))
    cheat.cases = [c for c in cheat.cases if c.name in cases]
    (caught,) = sanitize(cheat, 0, tmp_path / "cheat", tools=("memcheck",))
    assert not caught.passed and caught.errors, caught.report
    assert "Invalid __global__ read" in caught.report
