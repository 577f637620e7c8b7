"""A wrong answer on KernelBench's largest case (4096 x 393216 float32: 6.4 GB of output, 12.9 GB
of answer) is a mismatch with its counts within seconds, never a timeout: the device's comparison
counts the wrong elements and names the first, and nothing the size of the output is copied back;
the launch phase (10 s here: the fixed limits, with the reference's answers cached) holds the
kernel alone. Each cheat runs right after an honest kernel passes the same request, so the case's
inputs and answers are cached in the worker and the time measured is the cheat's own."""

from __future__ import annotations

import time

import pytest

from cudaopt.config import TimeoutPolicy
from cudaopt.experiment import load_experiment
from cudaopt.worker.case_data import case_bytes
from cudaopt.wire.protocol import (
    CaseSpec,
    EvalRequest,
    InitSpec,
    InputSpec,
    KernelSpec,
    LaunchSpec,
    OutputSpec,
    ReferenceSpec,
)
from tests.conftest import ROOT, kernel_source
from tests.gpu.conftest import FAST, needs_memory

ROWS, COLS = 4096, 393216
ELEMENTS = ROWS * COLS
# Both cases are one float32 input and one float32 output of this size: what the worker holds at the peak.
NEED = case_bytes([4 * ELEMENTS], [(ELEMENTS, 4)], FAST.input_sets, FAST.checked_launches, guards=True)

pytestmark = [pytest.mark.gpu, needs_memory(NEED)]
WITHIN_S = 20.0
RELU = 'extern "C" __global__ void relu(const float* x, float* y, int n)'
RELU_CASE = CaseSpec(name="relu-4096x393216", role="performance", seed=7, scalars={"n": ELEMENTS},
                     inputs={"x": InputSpec(shape=["n"], init=InitSpec(dist="uniform", low=-1, high=1))},
                     outputs={"y": OutputSpec(shape=["n"], rtol=1e-6, atol=1e-6)},
                     launch=LaunchSpec(grid=["num_sms * 16"], block=[256]))


def relu_request(kernel: str) -> EvalRequest:
    """ReLU at KernelBench's size, the honest relu.cu as its trusted reference, the fixed limits
    a run starts with (a launch may take 20x the reference's time, at least 10 s)."""
    return EvalRequest(signature=RELU, kernel=KernelSpec(source=kernel_source(kernel), entry="relu"),
                       cases=[RELU_CASE], protocol=FAST, timeouts=TimeoutPolicy().fixed(),
                       reference=ReferenceSpec(kind="cu", source=kernel_source("relu.cu"), entry="relu",
                                               path="relu.cu"))


def softmax_request(source: str) -> EvalRequest:
    softmax = load_experiment(ROOT / "examples" / "softmax" / "experiment.json")
    request = softmax.request(source, roles={"performance"}, protocol=FAST)
    request.cases = [c for c in request.cases if c.name == "kernelbench-4096x393216"]
    assert request.cases and request.timeouts.launch_multiple == 20
    return request


def timed(supervisor, request):
    start = time.monotonic()
    result = supervisor.evaluate(request)
    return result, time.monotonic() - start


def the_mismatch(result):
    assert result.status == "mismatch", (result.status, result.reason[:500])
    (case,) = result.cases
    (bad,) = [c for c in case.checks if not c.ok]
    assert bad.phase == "check" and bad.input_set == 0 and bad.elements == ELEMENTS
    assert bad.first_bad_index is not None and bad.expected is not None and bad.actual is not None
    assert f"{bad.mismatches}/{ELEMENTS} wrong" in result.reason
    return bad


def test_a_float4_copy_posing_as_relu_is_a_mismatch_within_seconds_on_4096x393216(supervisor):
    honest = supervisor.evaluate(relu_request("relu.cu"))
    assert honest.status == "ok", honest.reason[:500]
    result, wall = timed(supervisor, relu_request("relu_float4_copy.cu"))
    bad = the_mismatch(result)
    assert 0.49 * ELEMENTS < bad.mismatches < 0.51 * ELEMENTS  # every negative input
    assert bad.unwritten == 0 and bad.nan_count == 0 and bad.inf_count == 0
    assert bad.actual < 0 and bad.expected == 0.0
    assert wall < WITHIN_S, f"{wall:.1f} s"


def test_a_softmax_writing_zeros_on_long_rows_is_a_mismatch_within_seconds_on_4096x393216(supervisor):
    softmax = ROOT / "examples" / "softmax"
    honest = supervisor.evaluate(softmax_request((softmax / "initial.cu").read_text()))
    assert honest.status == "ok", honest.reason[:500]
    result, wall = timed(supervisor, softmax_request(kernel_source("softmax_zeros_long_rows.cu")))
    bad = the_mismatch(result)
    assert bad.mismatches == ELEMENTS and bad.first_bad_index == [0, 0]
    assert bad.actual == 0.0 and 0 < bad.expected < 1e-3 and bad.unwritten == 0
    assert wall < WITHIN_S, f"{wall:.1f} s"
