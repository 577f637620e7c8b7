"""Every trust rule has a kernel that tries to cheat it; each must be rejected with its type."""

from __future__ import annotations

import time

import pytest

from cudaopt.wire.protocol import LaunchSpec, Limits
from tests.conftest import kernel_source
from tests.gpu.conftest import runner_without

pytestmark = pytest.mark.gpu


def failing_case(result):
    return next(c for c in result.cases if c.status != "ok")


@pytest.mark.parametrize("name", ["naive.cu", "tiled.cu"])
def test_correct_kernels_pass_every_case(supervisor, sgemm, name):
    from tests.gpu.conftest import FAST

    request = sgemm.request(kernel_source(name), protocol=FAST)
    result = supervisor.evaluate(request)
    assert result.status == "ok", result.reason
    assert [c.name for c in result.cases] == ["odd-31x37x29", "square-256", "rect-384x256x320", "square-4096"]
    for case in result.cases:
        assert case.status == "ok"
        assert case.checks and all(check.ok for check in case.checks)
        # three input sets checked before timing, then three timed launches drawn at random, on fresh inputs
        assert {(c.phase, c.input_set) for c in case.checks} >= {("check", 0), ("check", 1), ("check", 2)}
        if case.role == "performance":
            timed = [c for c in case.checks if c.phase == "timed"]
            assert [c.launch for c in timed] == case.scan.checked_launches and len(timed) == 3
            assert all(c.input_set == -1 for c in timed)
            assert case.scan.launches_scanned == 2 + 10  # every warm-up and timed launch
            t = case.timing
            assert t.n == 10 and t.min_us <= t.p10_us <= t.median_us <= t.p90_us <= t.max_us
            assert "L2 flushed" in t.method and "gated" in t.method
            assert case.roofline.floor_us < t.median_us
        else:
            assert case.timing is None  # correctness cases must pass but are not timed
    # the ptxas resource report was read on the GPU machine's NVRTC too
    assert result.compile.registers and result.compile.registers > 0
    assert result.compile.spill_stores == 0 and result.compile.spill_loads == 0
    assert result.compile.stack_bytes is not None


def test_write_past_the_end_is_a_guard_violation(supervisor, small_request):
    result = supervisor.evaluate(small_request(kernel_source("write_past_end.cu")))
    assert result.status == "guard_violation"
    assert "c: wrote past the end" in failing_case(result).reason


def test_a_case_reused_across_candidates_carries_nothing_from_a_cheater(supervisor, small_request):
    """A case's device data is kept between requests; after a kernel that scribbled past its output
    and one that changed an input, a correct kernel still passes on fresh guards and intact inputs.
    Both of its requests draw their timed launches' inputs from one seed (a request without one draws
    new ones), so every check, timed ones too, sees the same data and gives the same error."""
    from tests.gpu.conftest import FAST

    seeded = FAST.model_copy(update={"seed": 12345})
    first = supervisor.evaluate(small_request(kernel_source("tiled.cu"), protocol=seeded))
    assert first.status == "ok", first.reason
    assert supervisor.evaluate(small_request(kernel_source("write_past_end.cu"))).status == "guard_violation"
    assert supervisor.evaluate(small_request(kernel_source("modifies_input.cu"))).status == "input_modified"
    again = supervisor.evaluate(small_request(kernel_source("tiled.cu"), protocol=seeded))
    assert again.status == "ok", again.reason
    for before, after in zip(first.cases, again.cases, strict=True):
        assert [c.max_abs_error for c in before.checks] == [c.max_abs_error for c in after.checks]


def test_unwritten_output_is_a_mismatch_with_unwritten_count(supervisor, small_request):
    result = supervisor.evaluate(small_request(kernel_source("partial_write.cu")))
    assert result.status == "mismatch"
    bad = [c for c in failing_case(result).checks if not c.ok][0]
    assert bad.unwritten > 0 and bad.unwritten == bad.mismatches


def test_overwriting_an_input_is_detected(supervisor, small_request):
    result = supervisor.evaluate(small_request(kernel_source("modifies_input.cu")))
    assert result.status == "input_modified"
    assert failing_case(result).reason.startswith("a:")


def test_result_cached_in_a_device_global_is_caught(gpu, monkeypatch, supervisor, small_request):
    result = supervisor.evaluate(small_request(kernel_source("cache_global.cu")))
    assert result.status == "global_state"  # a 64 MiB __device__ table is refused outright
    request = small_request(kernel_source("cache_global.cu"))
    request.limits = Limits(global_bytes=128 << 20)
    assert supervisor.evaluate(request).status == "ok"  # with room for it: restored empty, it computes every launch
    # and with the table kept between launches (the restore off in this process), it replays stale answers
    assert runner_without(gpu, monkeypatch, restore=False).evaluate(request).status == "mismatch"


def test_a_workspace_is_poisoned_before_every_launch(supervisor, small_request):
    """workspace_assumed_zero.cu adds its sums into a __device__ array as if it started at zero.
    Over the kept-state limit it is refused; named as the experiment's workspace it is let run,
    and the poison (NaN) that fills the workspace before every launch fails its checks."""
    request = small_request(kernel_source("workspace_assumed_zero.cu"), cases={"rect-384x256x320"})
    request.limits = Limits()
    assert supervisor.evaluate(request).status == "global_state"
    request.limits = Limits(workspace=["sums"])
    result = supervisor.evaluate(request)
    assert result.status == "mismatch" and result.compile.workspace_bytes == 512 * 512 * 4, result.reason


def test_cache_keyed_on_leading_elements_is_caught_by_the_near_duplicate_set(gpu, monkeypatch, small_request):
    """With its cache kept between launches (the restore off in this process, which alone would
    empty it every launch)."""
    request = small_request(kernel_source("cache_keyed.cu"))
    request.limits = Limits(global_bytes=128 << 20)
    result = runner_without(gpu, monkeypatch, restore=False).evaluate(request)
    assert result.status == "mismatch"
    bad = [c for c in failing_case(result).checks if not c.ok][0]
    assert bad.input_set == 2  # only the near duplicate of set 0 exposes it


def test_missing_barrier_race_is_a_mismatch(supervisor, small_request):
    result = supervisor.evaluate(small_request(kernel_source("no_barrier.cu")))
    assert result.status == "mismatch"


def test_half_precision_operands_are_refused_and_where_allowed_a_mismatch(supervisor, small_request):
    refused = supervisor.evaluate(small_request(kernel_source("half_operands.cu")))
    assert refused.status == "precision" and not refused.cases
    allowed = small_request(kernel_source("half_operands.cu"))
    allowed.limits.precision = ["fp16"]  # the tolerance still judges the numbers
    assert supervisor.evaluate(allowed).status == "mismatch"


def test_kernel_assuming_tile_multiples_fails_the_odd_case(supervisor, small_request):
    result = supervisor.evaluate(small_request(kernel_source("tile_multiple.cu")))
    assert result.status in ("guard_violation", "mismatch")
    assert failing_case(result).name == "odd-31x37x29"


def test_compile_error_keeps_the_compiler_message(supervisor, small_request):
    result = supervisor.evaluate(small_request(kernel_source("compile_error.cu")))
    assert result.status == "compile_error"
    assert "error" in result.reason and "cannot be used to initialize" in result.reason
    assert result.cases == []


def test_wrong_entry_point_is_missing_entry(supervisor, small_request):
    result = supervisor.evaluate(small_request(kernel_source("wrong_entry.cu")))
    assert result.status == "missing_entry"
    assert "matmul_f32" in result.reason and "matmul" in result.reason


def test_too_much_dynamic_shared_memory_is_a_launch_error_never_a_time(supervisor, small_request):
    launch = LaunchSpec(grid=["cdiv(n, 16)", "cdiv(m, 16)"], block=[16, 16], shared_bytes=300000)
    result = supervisor.evaluate(small_request(kernel_source("big_smem.cu"), launch=launch))
    assert result.status == "launch_error"
    assert all(c.timing is None for c in result.cases)


def test_dynamic_shared_memory_above_48_kib_is_allowed_up_to_the_device_limit(supervisor, small_request):
    launch = LaunchSpec(grid=["cdiv(n, 16)", "cdiv(m, 16)"], block=[16, 16], shared_bytes=100 * 1024)
    result = supervisor.evaluate(small_request(kernel_source("big_smem.cu"), launch=launch))
    assert result.status == "ok", result.reason
    assert all(c.launch.shared_bytes == 100 * 1024 for c in result.cases)


def test_too_many_threads_per_block_is_a_launch_error(supervisor, small_request):
    launch = LaunchSpec(grid=["cdiv(n, 64)", "cdiv(m, 32)"], block=[64, 32])
    result = supervisor.evaluate(small_request(kernel_source("naive.cu"), launch=launch))
    assert result.status == "launch_error"
    assert all(c.timing is None for c in result.cases)


def test_hang_costs_seconds_and_a_fresh_worker_passes_within_the_scaled_limits(supervisor, small_request):
    from cudaopt.config import TimeoutPolicy

    baseline = supervisor.evaluate(small_request(kernel_source("naive.cu")))
    assert baseline.status == "ok", baseline.reason
    timeouts = TimeoutPolicy(multiple=20, floor_s=3).scaled(baseline.cases)
    assert timeouts.limit("check", "square-256") == 3  # a small case checks in milliseconds
    start = time.monotonic()
    result = supervisor.evaluate(small_request(kernel_source("spin_forever.cu"), timeouts=timeouts))
    assert time.monotonic() - start < 20
    assert result.status == "timeout" and "3 s timeout (20x the baseline's" in result.reason
    assert result.case("odd-31x37x29").status == "ok"  # what finished before the hang is kept
    assert result.case("square-256").status == "timeout"
    after = supervisor.evaluate(small_request(kernel_source("tiled.cu"), timeouts=timeouts))  # a fresh worker
    assert after.status == "ok", after.reason


def test_illegal_address_crashes_only_its_worker(supervisor, small_request):
    result = supervisor.evaluate(small_request(kernel_source("illegal_address.cu")))
    assert result.status == "crashed"
    assert "ILLEGAL_ADDRESS" in result.reason
    after = supervisor.evaluate(small_request(kernel_source("naive.cu")))
    assert after.status == "ok", after.reason


def test_time_below_the_speed_of_light_floor_is_implausible(supervisor, small_request):
    request = small_request(kernel_source("tiled.cu"), cases={"square-256"})
    request.cases[0].flops = "2*m*n*k*1000000"
    result = supervisor.evaluate(request)
    assert result.status == "implausible"
    assert "speed-of-light floor" in result.reason


def test_gate_keeps_host_launch_latency_out(supervisor, sgemm):
    """An empty kernel timed behind the gate is far below the ~6.5 us of naive event timing."""
    from cudaopt.wire.protocol import (
        CaseSpec,
        EvalRequest,
        KernelSpec,
        LaunchSpec,
        TimingProtocol,
    )

    case = CaseSpec(name="empty", role="performance", scalars={}, inputs={}, outputs={},
                    launch=LaunchSpec(grid=[1], block=[32]))
    request = EvalRequest(
        signature='extern "C" __global__ void empty_kernel()',
        kernel=KernelSpec(source=kernel_source("empty.cu"), entry="empty_kernel"),
        cases=[case], check=False, protocol=TimingProtocol(warmup=10, iterations=100),
    )
    result = supervisor.evaluate(request)
    assert result.status == "ok", result.reason
    assert result.cases[0].timing.median_us < 4.0


def test_launches_and_kernels_see_the_gpus_sm_count(supervisor):
    """grid = num_sms in the launch, CUDAOPT_NUM_SMS in the kernel: both the GPU's own count."""
    from cudaopt.wire.protocol import (
        CaseSpec,
        EvalRequest,
        KernelSpec,
        LaunchSpec,
        OutputSpec,
        ReferenceSpec,
        TimingProtocol,
    )

    sms = supervisor.device_info().sm_count
    source = ('extern "C" __global__ void sms(int* out) {\n'
              '    if (threadIdx.x == 0) out[blockIdx.x] = (gridDim.x == CUDAOPT_NUM_SMS) ? CUDAOPT_NUM_SMS : -1;\n}')
    reference = f"import numpy as np\n\ndef sms(**kwargs):\n    return np.full({sms}, {sms}, dtype=np.int32)\n"
    case = CaseSpec(name="one-per-sm", role="performance", scalars={}, inputs={},
                    outputs={"out": OutputSpec(shape=[sms], rtol=0, atol=0)},
                    launch=LaunchSpec(grid=["num_sms"], block=[32]))
    request = EvalRequest(signature='extern "C" __global__ void sms(int* out)',
                          kernel=KernelSpec(source=source, entry="sms"), cases=[case],
                          reference=ReferenceSpec(kind="py", source=reference, entry="sms", path="sms_reference.py"),
                          protocol=TimingProtocol(warmup=1, iterations=5))
    result = supervisor.evaluate(request)
    assert result.status == "ok", result.reason
    assert result.cases[0].launch.grid == (sms, 1, 1)


def test_a_cached_compilation_is_a_fresh_module_so_no_state_survives_a_request(supervisor, small_request):
    """The worker compiles a kernel once, but each request loads its own module: a kernel that
    counts its launches in a __device__ global starts from zero every time."""
    build = lambda: small_request(kernel_source("counts_launches.cu"), cases={"odd-31x37x29"})
    assert build().protocol.input_sets == 3  # 3 launches per request; the kernel cheats from the 5th
    results = [supervisor.evaluate(build()) for _ in range(3)]
    assert [r.status for r in results] == ["ok", "ok", "ok"]
    assert [r.compile.cached for r in results] == [False, True, True]


ROWS_FOR_BIG = "'matmul_f32_rows' if m * n > 40000 else 'matmul_f32'"


def test_each_case_launches_the_kernel_its_launch_names(supervisor, small_request):
    """A source with two kernels of the signature's parameters: each case runs (and is checked
    with) the one its launch picks, and the result says which, with that kernel's registers."""
    big = "m * n > 40000"
    launch = LaunchSpec(entry=ROWS_FOR_BIG, grid=[f"m if {big} else cdiv(n, 16)", f"1 if {big} else cdiv(m, 16)"],
                        block=[f"128 if {big} else 16", f"1 if {big} else 16"])
    result = supervisor.evaluate(small_request(kernel_source("entry_by_shape.cu"), launch=launch))
    assert result.status == "ok", result.reason
    entries = {c.name: c.launch.entry for c in result.cases}
    assert entries == {"odd-31x37x29": "matmul_f32", "square-256": "matmul_f32_rows",
                       "rect-384x256x320": "matmul_f32_rows"}
    assert list(result.compile.entries) == ["matmul_f32_rows"]
    assert result.compile.entries["matmul_f32_rows"].registers > 0
    assert result.compile.resources("matmul_f32_rows")[0] == result.compile.entries["matmul_f32_rows"].registers
    # 128-thread blocks of the row kernel: its own occupancy, not the entry's 256-thread one
    rows = next(c for c in result.cases if c.name == "square-256")
    assert rows.occupancy.blocks_per_sm is not None and rows.launch.block == (128, 1, 1)


def test_a_kernel_is_launched_within_its_own_limits_and_checked_on_what_it_wrote(supervisor, small_request):
    """The row kernel's 128-thread launch bounds hold for it alone (the entry takes 256), and a
    grid that covers half the rows leaves C unwritten: each caught as it would be for the entry."""
    def run(grid, block):
        launch = LaunchSpec(entry="matmul_f32_rows", grid=grid, block=block)
        return supervisor.evaluate(small_request(kernel_source("entry_by_shape.cu"), launch=launch,
                                                 cases={"rect-384x256x320"}))

    assert run(["cdiv(n, 16)", "cdiv(m, 16)"], [16, 16]).status == "launch_error"  # 256 threads > its bound
    half = run(["cdiv(m, 2)"], [128])
    assert half.status == "mismatch" and "unwritten" in half.reason, half.reason
    assert run(["m"], [128]).status == "ok"


@pytest.mark.parametrize("entry, status, words", [
    ("matmul_f32_short", "bad_signature", "matmul_f32_short is declared as"),  # takes no k
    ("matmul_f32_hidden", "missing_entry", "does not declare"),  # declared through a macro
    ("cudaopt_gate", "missing_entry", "does not declare"),  # the harness's own kernels are not in the module
    ("'matmul_f32_short' if m > 64 else 'matmul_f32'", "bad_signature", "matmul_f32_short"),
])
def test_a_launch_may_only_name_kernels_declared_with_the_signatures_parameters(supervisor, small_request, entry,
                                                                                status, words):
    launch = LaunchSpec(entry=entry, grid=["cdiv(n, 16)", "cdiv(m, 16)"], block=[16, 16])
    result = supervisor.evaluate(small_request(kernel_source("entry_other_params.cu"), launch=launch))
    assert result.status == status and words in result.reason, result.reason
    assert all(c.timing is None for c in result.cases if c.launch and c.launch.entry not in (None, "matmul_f32"))
