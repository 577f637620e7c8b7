"""The runner's logic on the CPU, through the fake device (tests/fake_device.py): staging input
sets, guard bands, the launch scan, checked launches against the answer key, timing
statistics and every status a case can end with. The kernels are compiled by NVRTC as for a GPU;
what they do is a Python function registered under the kernel's name."""

from __future__ import annotations

import re

import numpy as np
import pytest

from cudaopt.worker.runner import Runner
from cudaopt.worker.timing import LaunchPlan
from cudaopt.wire.protocol import (
    CaseSpec,
    EvalRequest,
    InitSpec,
    InputSpec,
    KernelSpec,
    LaunchSpec,
    OutputSpec,
    ReferenceSpec,
    TimingProtocol,
)
from tests.fake_device import FakeDevice

SIGNATURE = 'extern "C" __global__ void relu(const float* x, float* y, int n)'
SOURCE = SIGNATURE + " {\n    int i = blockIdx.x * blockDim.x + threadIdx.x;\n    if (i < n) y[i] = fmaxf(x[i], 0.0f);\n}\n"
REFERENCE = "import numpy as np\n\n\ndef relu(x, n):\n    return np.maximum(x, np.float32(0))\n"
SIZES = [8, 8, 4]  # two pointers and an int
PROTOCOL = TimingProtocol(warmup=2, iterations=10, chunk=4, checked_launches=2, seed=11)


def case(name: str = "c", n: int = 1000, **extra) -> CaseSpec:
    extra.setdefault("launch", LaunchSpec(grid=["cdiv(n, 256)"], block=[256]))
    return CaseSpec(name=name, role="performance", seed=3, scalars={"n": n},
                    inputs={"x": InputSpec(shape=["n"], init=InitSpec(dist="uniform", low=-1, high=1))},
                    outputs={"y": OutputSpec(shape=["n"])}, **extra)


def request(*cases: CaseSpec, source: str = SOURCE, reference: str = REFERENCE,
            protocol: TimingProtocol = PROTOCOL) -> EvalRequest:
    return EvalRequest(signature=SIGNATURE, kernel=KernelSpec(source=source, entry="relu"),
                       cases=list(cases or [case()]), protocol=protocol,
                       reference=ReferenceSpec(kind="py", source=reference, entry="relu", path="reference.py"))


def relu(dev, launch, x, y, n, *, out=None):
    """The honest kernel, with an optional change to what it writes (``out(x, y)``)."""
    xs, ys = dev.view(x, np.float32, int(n)), dev.view(y, np.float32, int(n))
    ys[:] = np.maximum(xs, 0)
    if out is not None:
        out(dev, xs, ys, int(x), int(y), int(n))


def run(device: FakeDevice, req: EvalRequest | None = None, body=relu, duration_ms=0.02):
    device.kernel("relu", body, SIZES, duration_ms)
    return Runner(device).evaluate(req or request())


@pytest.fixture
def device():
    return FakeDevice()


def test_an_honest_kernel_passes_every_check_and_is_timed_as_scripted(device):
    times = [0.030, 0.010, 0.020, 0.040]  # ms, cycled over every launch
    result = run(device, duration_ms=lambda k: times[k % 4])
    assert result.status == "ok", result.reason
    (out,) = result.cases
    checks = [(c.phase, c.input_set) for c in out.checks]
    assert checks[:3] == [("check", 0), ("check", 2), ("check", 1)]  # the near duplicate right after set 0
    assert [c.phase for c in out.checks[3:]] == ["timed", "timed"]  # the hidden checked launches
    assert all(c.ok for c in out.checks)
    # 3 checks and 2 warm-ups come first: the timed launches are launch numbers 5..14
    timed = [times[k % 4] * 1000 for k in range(5, 15)]
    assert out.timing.n == 10
    assert out.timing.median_us == pytest.approx(float(np.median(timed)))
    assert out.timing.min_us == pytest.approx(10.0) and out.timing.max_us == pytest.approx(40.0)
    assert "gated queue" in out.timing.method and "L2 flushed" in out.timing.method
    assert out.scan.launches_scanned == 12 and len(out.scan.checked_launches) == 2
    assert device.flushes == 10 and device.gates_closed == 3  # one flush per timed launch, chunks of 4
    assert device.wipes.poisons == 3 + 12  # before every launch of the candidate
    assert tuple(out.launch.grid) == (4, 1, 1) and out.occupancy.blocks_per_sm == 8


def test_the_answer_key_is_locked_whenever_the_candidate_runs(device):
    seen = []
    run(device, body=lambda dev, launch, *args: (seen.append(len(dev.locked)), relu(dev, launch, *args)))
    assert seen and min(seen) == 3  # the three input sets' answers, each in its own locked mapping


def test_a_wrong_answer_is_a_mismatch_that_names_the_element(device):
    def off_by_one(dev, xs, ys, *_):
        ys[7] += 1.0

    result = run(device, body=lambda *a: relu(*a, out=off_by_one))
    assert result.status == "mismatch"
    bad = next(c for c in result.cases[0].checks if not c.ok)
    assert bad.first_bad_index == [7] and bad.mismatches == 1 and bad.input_set == 0
    assert "case c: y (input set 0, check): 1/1000 wrong" in result.reason


def test_a_non_finite_output_fails_and_is_counted(device):
    def nan(dev, xs, ys, *_):
        ys[5] = np.nan

    result = run(device, body=lambda *a: relu(*a, out=nan))
    bad = next(c for c in result.cases[0].checks if not c.ok)
    assert result.status == "mismatch" and bad.nan_count == 1 and bad.actual is None


def test_a_write_past_the_end_lands_in_the_guard_band(device):
    def past_the_end(dev, xs, ys, x, y, n):
        dev.view(y + 4 * n, np.float32, 3)[:] = 0.0

    result = run(device, body=lambda *a: relu(*a, out=past_the_end))
    assert result.status == "guard_violation"
    assert "y: wrote past the end (from byte 1 after the last element)" in result.reason


def test_a_write_before_the_start_lands_in_the_guard_band(device):
    def before(dev, xs, ys, x, y, n):
        dev.view(y - 8, np.float32, 1)[:] = 0.0

    result = run(device, body=lambda *a: relu(*a, out=before))
    assert result.status == "guard_violation" and "y: wrote before the start (from byte 8" in result.reason


def test_a_kernel_that_changes_its_input_is_caught(device):
    def scribble(dev, xs, ys, *_):
        xs[2] = 42.0

    result = run(device, body=lambda *a: relu(*a, out=scribble))
    assert result.status == "input_modified" and "x: 4 bytes changed, first in element 2" in result.reason


def test_a_launch_that_skips_its_work_after_the_checks_is_caught_by_the_audit(device):
    def lazy(dev, launch, x, y, n):
        if dev.kernels["relu"].launches < 3:  # the three checked input sets, then nothing
            relu(dev, launch, x, y, n)

    result = run(device, body=lazy)
    assert result.status == "mismatch"
    assert "warm-up launch 0 left 1000 output elements unwritten" in result.reason


def test_an_illegal_address_loses_the_context_and_the_later_cases(device):
    def wild(dev, xs, ys, x, y, n):
        dev.view(y + (1 << 24), np.float32, 1)[:] = 0.0

    runner_result = run(device, request(case("first"), case("second", n=500)), body=lambda *a: relu(*a, out=wild))
    first, second = runner_result.cases
    assert first.status == "crashed" and "ILLEGAL_ADDRESS" in first.reason
    assert second.status == "crashed" and second.reason == "not run: the GPU context was lost"
    assert runner_result.status == "crashed"


def test_a_gate_that_timed_out_is_said_in_the_method(device):
    device.gate_times_out = True
    result = run(device)
    assert result.status == "ok"
    assert "gate timed out in 3 chunk(s): host latency may be included" in result.cases[0].timing.method


def test_a_time_under_the_speed_of_light_is_implausible(device):
    # 8 MiB moved in 0.1 us is far beyond the fake's 4.8 TB/s
    result = run(device, request(case(n=1 << 20, bytes="8 * n")), duration_ms=1e-4)
    assert result.status == "implausible" and result.cases[0].roofline.floor_us > 0.1


def test_a_reference_that_accepts_a_trivial_output_is_refused(device):
    zeros = "import numpy as np\n\n\ndef relu(x, n):\n    return np.zeros_like(x)\n"
    result = run(device, request(reference=zeros), body=lambda dev, launch, x, y, n: dev.view(
        y, np.float32, int(n)).fill(0))
    assert result.status == "non_discriminating"


def test_a_launch_of_a_kernel_the_module_lacks_is_a_missing_entry(device):
    req = request(case(launch=LaunchSpec(grid=["cdiv(n, 256)"], block=[256], entry="relu_fast")))
    result = run(device, req)
    assert result.status == "missing_entry" and "relu_fast" in result.reason


def test_a_kernel_that_does_not_compile_never_reaches_the_device(device):
    result = run(device, request(source=SIGNATURE + " { this is not C++ }\n"))
    assert result.status == "compile_error" and device.kernels["relu"].launches == 0


def test_an_argument_size_that_differs_from_the_signature_is_refused(device):
    device.kernel("relu", relu, [8, 8, 8])
    result = Runner(device).evaluate(request())
    assert result.status == "bad_signature" and "argument sizes [8, 8, 8] != expected [8, 8, 4]" in result.reason


def test_passing_buffers_are_kept_for_the_next_request_with_fresh_guards(device):
    device.kernel("relu", relu, SIZES)
    runner = Runner(device)
    assert runner.evaluate(request()).status == "ok"
    allocations = len(device.memory)
    assert runner.evaluate(request()).status == "ok"
    assert len(device.memory) == allocations  # the same buffers, the same answer key


def test_a_kernel_wrong_only_while_timed_is_caught_by_the_hidden_checked_launches(device):
    def wrong_when_timed(dev, launch, x, y, n):
        relu(dev, launch, x, y, n)
        if dev.kernels["relu"].launches >= 5:  # after the checks and the warm-ups: a plausible wrong answer
            dev.view(y, np.float32, int(n))[:] = dev.view(x, np.float32, int(n))

    result = run(device, body=wrong_when_timed)
    bad = next(c for c in result.cases[0].checks if not c.ok)
    assert result.status == "mismatch" and bad.phase == "timed" and bad.launch in result.cases[0].scan.checked_launches


def test_inputs_learned_in_one_case_do_not_mark_the_checked_launches_of_the_next(device):
    """A kernel honest throughout the first case, remembering a fingerprint of every input it was
    given; in the next case honest through the input-set checks and warm-ups, then only on inputs
    it has seen before. Were the checked launches' inputs shared, or the same from case to case,
    it would pass: they are drawn per launch and per case."""
    seen, launches = set(), {}

    def fingerprint_cheat(dev, launch, x, y, n):
        xs = dev.view(x, np.float32, int(n))
        key = xs[:4].tobytes()
        launches[int(n)] = launches.get(int(n), 0) + 1
        if int(n) == 1000 or launches[int(n)] <= 3 + PROTOCOL.warmup or key in seen:
            relu(dev, launch, x, y, n)
        else:  # an unchecked launch, it supposes: any output will do
            dev.view(y, np.float32, int(n))[:] = 0
        seen.add(key)

    result = run(device, request(case("first", n=1000), case("second", n=1200)), body=fingerprint_cheat)
    second = result.cases[1]
    bad = next(c for c in second.checks if not c.ok)
    assert result.status == "mismatch" and bad.phase == "timed" and bad.launch in second.scan.checked_launches


def test_a_kernel_that_rewrites_the_copy_fixed_inputs_are_staged_from_is_caught(device):
    """x must not vary, so every launch (and the hidden checks' reference) copies it from input set
    0's device copy. A kernel honest through the input-set checks, then finding that copy (a buffer
    holding x's bytes) and zeroing it, would have its zeros checked against a reference of zeros."""
    fixed = case()
    fixed.inputs["x"].init.vary = False

    def rewrite_the_source(dev, launch, x, y, n):
        relu(dev, launch, x, y, n)
        if dev.kernels["relu"].launches > 3:
            mine = dev.view(x, np.uint8, 4 * int(n)).copy()
            for base, data in dev.memory.items():
                if base != int(x) and data.size == mine.size and np.array_equal(data, mine):
                    data[:] = 0
            dev.view(x, np.float32, int(n))[:] = 0
            dev.view(y, np.float32, int(n))[:] = 0

    result = run(device, request(fixed), body=rewrite_the_source)
    assert result.status == "input_modified"
    assert "x: the copy every launch is staged from was changed" in result.reason


def test_each_launch_of_each_case_draws_its_inputs_from_a_key_of_its_own():
    plan = LaunchPlan(warmup=2, iterations=10, checked=(1, 4), case="a")
    keys = {plan.inputs_key(11, stream) for stream in range(12)}
    keys |= {LaunchPlan(2, 10, (1, 4), case="b").inputs_key(11, stream) for stream in range(12)}
    keys |= {plan.inputs_key(12, stream) for stream in range(12)}
    assert len(keys) == 36 and all(0 <= key < 2**63 for key in keys)
    assert plan.inputs_key(11, 3) == LaunchPlan(2, 10, (1, 4), case="a").inputs_key(11, 3)  # reproducible


@pytest.mark.parametrize("implementation", ["cudaopt.worker.gpu:Gpu", "tests.fake_device:FakeDevice"])
def test_the_real_device_and_the_fake_have_every_method_of_the_interface(implementation):
    import importlib

    from cudaopt.worker import device

    module, name = implementation.split(":")
    cls = getattr(importlib.import_module(module), name)
    for protocol in (device.Device,):
        wanted = {n for n, v in vars(protocol).items() if callable(v) and not n.startswith("_")} | {"peaks"}
        missing = sorted(n for n in wanted if not hasattr(cls, n) and n not in getattr(cls, "__dataclass_fields__", {}))
        assert not missing, f"{implementation} lacks {missing}"


def test_a_case_that_does_not_fit_beside_the_caches_frees_them_first(monkeypatch):
    """Kept buffers and cached answers of other cases are freed (oldest first) until the case has
    room: on a device where a small case's kept buffers and answers (5.4 MB, within the caches'
    budgets) leave too little for a large one (about 12 MB at its peak, of 14), both pass, again and
    again, where without the room made the large one fails for want of memory."""
    two = request(case("a", n=100_000), case("b", n=200_000))
    device = FakeDevice(memory_total=14 << 20)
    device.kernel("relu", relu, SIZES, 0.02)
    runner = Runner(device)
    for _ in range(2):
        result = runner.evaluate(two)
        assert result.status == "ok" and [c.status for c in result.cases] == ["ok", "ok"], result.reason

    monkeypatch.setattr(Runner, "_make_room", lambda self, *args: None)
    device = FakeDevice(memory_total=14 << 20)
    device.kernel("relu", relu, SIZES, 0.02)
    a, b = Runner(device).evaluate(two).cases
    assert a.status == "ok" and b.status == "internal_error" and "OUT_OF_MEMORY" in b.reason


def test_a_case_that_memory_held_elsewhere_leaves_no_room_for_says_so_with_the_figures():
    """Another process holds most of the GPU: the worker frees its own caches, and the allocation
    that still fails says what the case needs, what was free, and where the rest went."""
    device = FakeDevice(memory_total=14 << 20)
    device.kernel("relu", relu, SIZES, 0.02)
    runner = Runner(device)
    assert runner.evaluate(request(case("a", n=100_000))).status == "ok"  # its buffers and answers kept
    elsewhere = device.alloc(8 << 20)  # another process's share of the same GPU
    result = runner.evaluate(request(case("b", n=200_000)))
    (b,) = result.cases
    assert b.status == "internal_error" and b.reason.startswith("CUDA error: CUDA_ERROR_OUT_OF_MEMORY"), b.reason
    assert not runner._devices.kept and not runner._answers.items  # its own caches went first
    assert re.search(r"the case needs about [\d.]+ MiB of GPU memory at its peak and [\d.]+ MiB of 14 MiB were "
                     r"free once this worker had freed its caches: other processes on this GPU hold the rest", b.reason)
    elsewhere.close()
    assert runner.evaluate(request(case("b", n=200_000))).status == "ok"


def test_a_case_that_fits_beside_the_caches_keeps_them():
    device = FakeDevice()
    device.kernel("relu", relu, SIZES, 0.02)
    runner = Runner(device)
    for _ in range(2):
        assert runner.evaluate(request(case("a", n=100_000), case("b", n=100_000))).status == "ok"
    assert len(runner._devices.kept) == 2 and len(runner._answers.items) == 2


WORKSPACE_SOURCE = ("__device__ float ws[16384];\n__device__ unsigned launches[2];\n" + SIGNATURE +
                    " {\n    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
                    "    if (i < n) { ws[i % 16384] += 1.0f; y[i] = fmaxf(x[i], 0.0f) + ws[i % 16384] - 1.0f; }\n}\n")


def test_a_declared_workspace_is_poisoned_before_every_launch_and_not_counted_as_kept_state(device):
    """64 KiB of __device__ memory is over the default limit, unless the experiment names it a
    workspace: then the harness fills it with NaN before every launch of the candidate (checks,
    warm-ups, timed launches), so whatever a launch leaves there, the next one finds only poison."""
    from cudaopt.wire.protocol import Limits

    refused = run(device, request(source=WORKSPACE_SOURCE))
    assert refused.status == "global_state" and "65544 bytes" in refused.reason
    device.globals_ = {"ws": 65536}
    seen = []

    def carries(dev, launch, x, y, n):  # what a launch finds in the workspace, then leaves there
        ws = dev.view(device.global_range(None, "ws")[0], np.float32, 16384)
        seen.append(bool(np.isnan(ws).all()))
        ws[:] = 1.0
        relu(dev, launch, x, y, n)

    req = request(source=WORKSPACE_SOURCE)
    req.limits = Limits(workspace=["ws", "not_in_the_module"])
    result = run(device, req, body=carries)
    assert result.status == "ok", result.reason
    assert result.compile.workspace_bytes == 65536 and result.compile.global_bytes == 65544
    assert len(seen) == 3 + 12 and all(seen)  # every launch of the candidate found the poison


def test_a_kernel_that_counts_on_a_cleared_workspace_fails(monkeypatch):
    """A kernel that adds into its workspace as if it started at zero (the harness's clearing
    would be work it gets untimed, and an export would sum launch upon launch) passes if the
    workspace is cleared, and fails because it is poisoned."""
    import cudaopt.worker.entries as entries
    from cudaopt.wire.protocol import Limits

    def adds_into(dev, launch, x, y, n):
        ws = dev.view(dev.global_range(None, "ws")[0], np.float32, 16384)
        relu(dev, launch, x, y, n)
        ys = dev.view(y, np.float32, int(n))
        ws[:int(n)] += ys
        ys[:] = ws[:int(n)]

    def evaluate(fill):
        monkeypatch.setattr(entries, "WORKSPACE_POISON", fill)
        dev = FakeDevice()
        dev.globals_ = {"ws": 65536}
        dev.kernel("relu", adds_into, SIZES, 0.02)
        req = request(source=WORKSPACE_SOURCE)
        req.limits = Limits(workspace=["ws"])
        return Runner(dev).evaluate(req)

    poison = entries.WORKSPACE_POISON
    assert evaluate(b"\0\0\0\0").status == "ok"  # without the rule: cleared for it, it passes
    assert evaluate(poison).status == "mismatch"


def test_state_kept_besides_the_workspace_is_still_refused(device):
    from cudaopt.wire.protocol import Limits

    source = WORKSPACE_SOURCE.replace("launches[2]", "launches[512]")
    req = request(source=source)
    req.limits = Limits(global_bytes=1024, workspace=["ws"])
    device.globals_ = {"ws": 65536}
    result = run(device, req)
    assert result.status == "global_state"
    assert "keeps 2048 bytes of module variables" in result.reason
    assert "besides the workspace it poisons (ws)" in result.reason and "limits.global_bytes" in result.reason


def test_a_workspace_name_must_be_an_identifier():
    from pydantic import ValidationError

    from cudaopt.wire.protocol import Limits

    with pytest.raises(ValidationError, match="not a C identifier"):
        Limits(workspace=["ws[0]"])


def test_buffers_larger_than_the_budget_are_freed_without_pushing_out_the_others():
    """A case whose buffers exceed the whole budget for kept buffers (45% of the device) is
    uploaded again per request, but the other cases' kept buffers stay: kept, it would push them
    all out, then itself, and every case would be uploaded again on every request."""
    device = FakeDevice(memory_total=160 << 20)
    device.kernel("relu", relu, SIZES, 0.02)
    runner = Runner(device)
    assert runner._devices.budget == (160 << 20) * 45 // 100
    runner._devices._budget = 40 << 20  # below the large case's buffers, above the small case's
    small, large = case("small", n=100_000), case("large", n=1_600_000)
    for _ in range(2):
        assert runner.evaluate(request(small, large)).status == "ok"
        (kept,) = runner._devices.kept.values()
        assert kept.output_shapes["y"] == (100_000,)  # the small case's; the large case's 7 buffers were freed
    assert 7 * 4 * 1_600_000 > runner._devices.budget  # 3 input sets, the working input and output, 2 checked copies
    allocations = len(device.memory)
    assert runner.evaluate(request(small)).status == "ok"
    assert len(device.memory) == allocations  # the small case's buffers, kept beside the large case's requests


def test_a_long_kernel_gets_fewer_timed_launches_and_its_checked_ones_are_drawn_among_them(device):
    bounded = PROTOCOL.model_copy(update={"iterations": 40, "timed_ms": 10.0, "min_iterations": 5})
    result = run(device, request(protocol=bounded), duration_ms=1.0)  # 1 ms warm-ups: 10 launches fill 10 ms
    assert result.status == "ok", result.reason
    (out,) = result.cases
    assert out.timing.n == 10
    assert out.scan.launches_scanned == 2 + 10  # the warm-ups and the launches timed, no more
    assert len(out.scan.checked_launches) == 2 and all(0 <= i < 10 for i in out.scan.checked_launches)
    assert [c.phase for c in out.checks].count("timed") == 2


def test_a_short_kernel_and_a_protocol_without_a_time_bound_time_every_iteration(device):
    bounded = PROTOCOL.model_copy(update={"iterations": 40, "timed_ms": 10.0, "min_iterations": 5})
    assert run(device, request(protocol=bounded), duration_ms=0.01).cases[0].timing.n == 40
    assert run(FakeDevice(), request(protocol=PROTOCOL.model_copy(update={"iterations": 40})),
               duration_ms=5.0).cases[0].timing.n == 40


def test_the_time_bound_never_goes_below_min_iterations(device):
    bounded = PROTOCOL.model_copy(update={"iterations": 40, "timed_ms": 10.0, "min_iterations": 8})
    assert run(device, request(protocol=bounded), duration_ms=50.0).cases[0].timing.n == 8


def test_a_kernel_slow_only_in_its_warm_ups_is_still_checked_on_the_launches_it_gets(device):
    """A kernel that slows its warm-ups down to be timed less gains nothing: its checked launches
    are drawn among the fewer timed ones, and wrong answers there are caught."""
    bounded = PROTOCOL.model_copy(update={"iterations": 40, "timed_ms": 10.0, "min_iterations": 5,
                                          "checked_launches": 5})

    def wrong_after_warmups(dev, launch, x, y, n):
        relu(dev, launch, x, y, n)
        if dev.kernels["relu"].launches >= 5:  # after the checks of 3 input sets and the 2 warm-ups
            dev.view(y, np.float32, int(n))[:] = 0

    result = run(device, request(protocol=bounded), body=wrong_after_warmups,
                 duration_ms=lambda k: 5.0 if k < 5 else 0.001)
    bad = next(c for c in result.cases[0].checks if not c.ok)
    assert result.status == "mismatch" and bad.phase == "timed"
    assert result.cases[0].scan.launches_scanned == 2 + 5 and 0 <= bad.launch < 5
