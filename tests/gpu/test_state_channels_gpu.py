"""Every memory a launch can keep, on the GPU: a kernel per channel that passes without its rule
and fails with it (each rule alone: the others, which would also stop it, are switched off in
this process), and the headline case, a memo in local memory with inputs that do not vary, timed
at its honest cost with every rule in force."""

from __future__ import annotations

import pytest

from cudaopt.wire.protocol import LaunchSpec, TimingProtocol
from tests.gpu.conftest import runner_without as runner
from tests.gpu.test_exploit_families import first_bad_check, relu_case, request

pytestmark = pytest.mark.gpu

EVERY_SLOT = LaunchSpec(grid=["2 * num_sms"], block=[1024])  # two blocks of 1024 per SM: every thread slot


def clean_local_memory(gpu) -> None:
    """Wipe every thread's local memory once (what earlier tests left there would pass for a
    marker), before a test that switches the wipe off."""
    from cudaopt.worker.leftovers import Leftovers

    leftovers = Leftovers(gpu)
    leftovers.cover_local(8192)  # the test kernels' frames are 4 KiB
    leftovers.poison_local()
    gpu.stream.sync()


def fixed(n: int, launch: LaunchSpec, role: str = "correctness"):
    """Inputs that do not vary: every input set, and every launch, sees the same x."""
    return relu_case("fixed", n, -1, 1, role=role, vary=False, launch=launch)


def test_local_memory_stash_fails_with_the_local_wipe(gpu, monkeypatch):
    result = runner(gpu, monkeypatch, restore=False).evaluate(request("local_stash.cu", fixed(1024, EVERY_SLOT)))
    assert result.status == "mismatch", result.reason
    assert first_bad_check(result).nan_count > 0  # the poison, read back from a frame


def test_local_memory_stash_passes_without_the_local_wipe(gpu, monkeypatch):
    clean_local_memory(gpu)
    result = runner(gpu, monkeypatch, restore=False, local=False).evaluate(
        request("local_stash.cu", fixed(1024, EVERY_SLOT)))
    assert result.status == "ok", result.reason


def test_local_memory_stash_with_every_rule_computes_every_launch(gpu, monkeypatch):
    result = runner(gpu, monkeypatch).evaluate(request("local_stash.cu", fixed(1024, EVERY_SLOT)))
    assert result.status == "ok", result.reason  # its flag restored: it never skips the work


def test_constant_memory_stash_fails_with_the_restore(gpu, monkeypatch):
    result = runner(gpu, monkeypatch, local=False).evaluate(request("constant_stash.cu", fixed(8192, EVERY_SLOT)))
    assert result.status == "mismatch", result.reason


def test_constant_memory_stash_passes_without_the_restore(gpu, monkeypatch):
    clean_local_memory(gpu)
    result = runner(gpu, monkeypatch, local=False, restore=False).evaluate(
        request("constant_stash.cu", fixed(8192, EVERY_SLOT)))
    assert result.status == "ok", result.reason


RESERVED = LaunchSpec(grid=["num_sms"], block=[256], shared_bytes="200 * 1024")


def test_reserved_shared_memory_stash_fails_with_the_poison(gpu, monkeypatch):
    result = runner(gpu, monkeypatch, restore=False).evaluate(request("reserved_smem_stash.cu", fixed(256, RESERVED)))
    assert result.status == "mismatch", result.reason


def test_reserved_shared_memory_stash_passes_without_the_poison(gpu, monkeypatch):
    result = runner(gpu, monkeypatch, restore=False, shared=False).evaluate(
        request("reserved_smem_stash.cu", fixed(256, RESERVED)))
    assert result.status == "ok", result.reason


def test_a_local_memory_memo_is_timed_at_its_honest_cost(gpu, monkeypatch):
    """local_memo.cu with inputs that do not vary: with the wipe, every launch does the slow work;
    without it, the memo answers and the kernel looks many times faster while passing."""
    protocol = TimingProtocol(warmup=3, iterations=30)
    case = fixed(1024, EVERY_SLOT, role="performance")
    honest = runner(gpu, monkeypatch).evaluate(request("local_memo.cu", case, protocol=protocol))
    assert honest.status == "ok", honest.reason
    monkeypatch.undo()
    memo = runner(gpu, monkeypatch, local=False).evaluate(request("local_memo.cu", case, protocol=protocol))
    assert memo.status == "ok", memo.reason
    ratio = honest.cases[0].timing.median_us / memo.cases[0].timing.median_us
    print(f"local_memo: {honest.cases[0].timing.median_us:.1f} us with the wipe, "
          f"{memo.cases[0].timing.median_us:.1f} us without ({ratio:.1f}x)")
    assert ratio > 4, ratio


def test_the_local_wipe_costs_little_beside_a_launch(gpu):
    """What the wipe costs per launch (outside the timed interval), printed for the docs."""
    import time

    from cudaopt.worker.leftovers import Leftovers

    leftovers = Leftovers(gpu)
    for frame in (0, 16 * 1024):
        leftovers.cover_local(frame)
        leftovers.poison_local()
        gpu.stream.sync()
        start = time.perf_counter()
        for _ in range(20):
            leftovers.poison_local()
        gpu.stream.sync()
        per = (time.perf_counter() - start) / 20 * 1e6
        print(f"local wipe of {leftovers.local_words * 4} bytes per thread: {per:.0f} us")
        assert per < 20_000


@pytest.mark.parametrize("header", ["<cooperative_groups.h>", "<cuda/pipeline>", "<cuda/barrier>"])
def test_an_honest_kernel_that_includes_a_header_with_globals_passes(supervisor, small_request, header):
    """Headers define variables of their own; they are restored like the kernel's, never counted
    as the kernel's state beyond the limit."""
    from tests.conftest import kernel_source

    source = f"#include {header}\n" + kernel_source("naive.cu")
    result = supervisor.evaluate(small_request(source))
    assert result.status == "ok", result.reason
    assert result.compile.global_bytes > 0
