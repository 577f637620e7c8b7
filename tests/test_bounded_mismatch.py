"""A wrong answer is a mismatch with its counts, in bounded time, on any output size: the device's
comparison counts the wrong, unwritten, NaN and Inf elements and finds the first wrong one; the
host compares again for the details only where the output is small (answers.HOST_DETAILS_BYTES);
either way the CheckInfo has the same fields. And the launch phase holds the kernel alone, so the
harness's own checking after a launch never makes a wrong answer look like a hang."""

from __future__ import annotations

import numpy as np
import pytest

from cudaopt.worker.answers import HOST_DETAILS_BYTES, DeviceAnswer, LockedAnswer, check_output
from cudaopt.worker.compare import describe, poison_array
from cudaopt.worker.inputs import from_numbers, to_numbers
from cudaopt.worker.runner import Runner
from cudaopt.wire.messages import PhaseStarted
from cudaopt.wire.protocol import OutputSpec
from tests.fake_device import FakeDevice
from tests.test_runner_fake_device import SIZES, case, relu, request

TOLERANCE = OutputSpec(shape=["n"], rtol=1e-2, atol=1e-3)  # bfloat16 rounds within 0.4%


def wrong_output(dtype: str, shape: tuple[int, ...]):
    """A reference and an output that differs from it in every way a check counts: wrong values,
    unwritten (poisoned) elements, NaN where the reference is finite, an infinity where it is not,
    and a NaN and an infinity that match the reference's."""
    rng = np.random.default_rng(5)
    ref = rng.standard_normal(shape) * 3
    flat_ref = ref.reshape(-1)
    flat_ref[50], flat_ref[60] = np.nan, np.inf
    out = from_numbers(ref.astype(np.float32), dtype).reshape(-1)
    out[7] = from_numbers(np.array([flat_ref[7] + 9], dtype=np.float32), dtype)[0]
    out[20:25] = poison_array((5,), dtype)
    out[30] = from_numbers(np.array([np.nan], dtype=np.float32), dtype)[0]
    out[40] = from_numbers(np.array([-np.inf], dtype=np.float32), dtype)[0]
    return ref, out.reshape(shape)


def checked(device: FakeDevice, out: np.ndarray, answer, dtype: str, limit: int):
    buffer = device.alloc(out.nbytes)
    device.upload(int(buffer.handle), out)
    return check_output(device, "y", dtype, int(buffer.handle), out.nbytes, out.shape, TOLERANCE, answer, 1, "timed",
                        launch=4, host_details_bytes=limit)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "float64"])
@pytest.mark.parametrize("held", ["host", "device", "locked"])
def test_a_failure_has_the_same_fields_from_the_device_alone_as_from_the_host(dtype, held):
    device = FakeDevice()
    ref, out = wrong_output(dtype, (12, 10))
    answer = {"host": lambda: ref, "device": lambda: DeviceAnswer.upload(device, ref),
              "locked": lambda: LockedAnswer(device, ref)}[held]()
    from_host = checked(device, out, answer, dtype, limit=HOST_DETAILS_BYTES)
    device.downloads.clear()
    from_device = checked(device, out, answer, dtype, limit=0)
    assert from_device.rel_l2_error == pytest.approx(from_host.rel_l2_error, rel=1e-12)  # sqrt of sums, or norms
    assert from_device.model_copy(update={"rel_l2_error": 0.0}) == from_host.model_copy(update={"rel_l2_error": 0.0})
    assert from_device.mismatches == 8 and from_device.unwritten == 5
    assert from_device.nan_count == 2 and from_device.inf_count == 2  # one of each matches the reference
    assert from_device.first_bad_index == [0, 7] and from_device.launch == 4
    assert from_device.actual == float(to_numbers(out.reshape(-1)[7:8], dtype)[0])
    assert from_device.expected == pytest.approx(ref.reshape(-1)[7])
    assert max(device.downloads) <= 64  # the stats and two elements: never the output
    assert describe(from_device) == describe(from_host)
    assert "5 unwritten, 2 NaN, 2 Inf, first at (0, 7)" in describe(from_device)


def test_a_first_wrong_element_that_is_not_finite_reads_as_none_from_the_device():
    device = FakeDevice()
    ref = np.ones(100)
    out = np.ones(100, dtype=np.float32)
    out[3:] = poison_array((97,), "float32")
    info = checked(device, out, ref, "float32", limit=0)
    assert info.first_bad_index == [3] and info.actual is None and info.expected == 1.0
    assert info.unwritten == 97 and info.mismatches == 97 and info.nan_count == 0


def test_a_passing_output_is_checked_on_the_device_alone():
    device = FakeDevice()
    ref = np.linspace(-1, 1, 1000)
    info = checked(device, ref.astype(np.float32), ref, "float32", limit=HOST_DETAILS_BYTES)
    assert info.ok and info.mismatches == 0 and info.first_bad_index is None
    assert max(device.downloads, default=0) <= 64


def events_of(device: FakeDevice, body, n: int, host_details_bytes: int):
    """Evaluate ``body`` on a case of ``n`` elements; every worker event, every download made after
    the candidate's first launch, and the phase each comparison ran in."""
    events, compared_in, after_launch = [], [], []
    compare = device.compare

    def recorded_compare(*args):
        compared_in.append(next(e.phase for e in reversed(events) if isinstance(e, PhaseStarted)))
        return compare(*args)

    def kernel(dev, launch, *args):
        if not after_launch:
            after_launch.append(len(dev.downloads))
        body(dev, launch, *args)

    device.compare = recorded_compare
    device.kernel("relu", kernel, SIZES, 0.02)
    runner = Runner(device, on_event=events.append)
    runner.host_details_bytes = host_details_bytes
    result = runner.evaluate(request(case(n=n)))
    return result, events, compared_in, device.downloads[after_launch[0]:]


def negated(dev, launch, x, y, n):
    """Wrong on every negative input: a copy posing as ReLU."""
    dev.view(y, np.float32, int(n))[:] = dev.view(x, np.float32, int(n))


@pytest.mark.parametrize("limit", [0, HOST_DETAILS_BYTES])
def test_a_wrong_answer_on_a_large_output_is_a_mismatch_with_counts_without_copying_the_output_back(limit):
    """With the bound at 0 every output is 'large': the mismatch comes from the device's counts and
    nothing the size of the output comes back; under the bound the host's details agree with them."""
    n = 1 << 18
    result, _, _, downloads = events_of(FakeDevice(), negated, n, limit)
    assert result.status == "mismatch"
    (bad,) = [c for c in result.cases[0].checks if not c.ok]
    assert bad.phase == "check" and bad.input_set == 0 and bad.elements == n
    assert 0.45 * n < bad.mismatches < 0.55 * n and bad.unwritten == 0 and bad.nan_count == 0
    assert bad.first_bad_index is not None and bad.actual < 0 and bad.expected == 0.0
    assert f"{bad.mismatches}/{n} wrong, first at ({bad.first_bad_index[0]},)" in result.reason
    copied_back = max(downloads)
    assert (copied_back < 4 * n) if limit == 0 else (copied_back >= 4 * n)


def test_each_checked_launch_is_a_launch_phase_of_its_own_and_its_checks_run_in_the_check_phase():
    """The supervisor's launch limit (a multiple of the reference's time) holds the kernel alone:
    the comparisons after each launch run in a check phase, whose limit is the check phase's."""
    result, events, compared_in, _ = events_of(FakeDevice(), relu, 1000, HOST_DETAILS_BYTES)
    assert result.status == "ok", result.reason
    phases = [e.phase for e in events if isinstance(e, PhaseStarted)]
    assert phases == ["compile", "check", "launch", "check", "launch", "check", "launch", "check", "timing"]
    assert "launch" not in compared_in and compared_in.count("check") >= 3
