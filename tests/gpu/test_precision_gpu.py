"""On the GPU: the precision policy refuses tensor-core kernels from their compiled code before any
launch — on the SGEMM example and on an imported KernelBench FP32 matrix product — and runs them
where the experiment allows their math: the 3xTF32 SGEMM at FP32 tolerances with "tf32", the BF16
tensor-core kernel on a bfloat16 experiment, where an FP8 one is refused."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from cudaopt.cli import app
from cudaopt.experiment import load_experiment
from cudaopt.wire.protocol import LaunchSpec, Limits
from tests.conftest import ROOT, kernel_source
from tests.gpu.conftest import FAST
from tests.test_precision import TF32_KERNELS, kernelbench_matmul

pytestmark = pytest.mark.gpu

WARP_TILES = LaunchSpec(grid=["cdiv(n, 8)", "cdiv(m, 16)"], block=[32])  # one warp per 16 x 8 tile of C
BF16 = ROOT / "tests" / "fixtures" / "bf16_matmul"


@pytest.mark.parametrize("name", TF32_KERNELS)
def test_tf32_sgemms_are_refused_on_the_fp32_example_before_any_launch(supervisor, small_request, name):
    result = supervisor.evaluate(small_request(kernel_source(name), launch=WARP_TILES))
    assert result.status == "precision", result.reason
    assert "HMMA.1688.F32.TF32 in matmul_f32 (tf32)" in result.reason and not result.cases
    assert "tf32" in result.compile.math


def test_3xtf32_runs_and_passes_fp32_tolerances_where_tf32_is_allowed(supervisor, small_request):
    """The kernel is right: only the policy refuses it on the example."""
    request = small_request(kernel_source("sgemm_3xtf32.cu"), launch=WARP_TILES)
    request.limits = Limits(workspace=request.limits.workspace, precision=["tf32"])
    result = supervisor.evaluate(request)
    assert result.status == "ok", result.reason
    assert all(check.ok for case in result.cases for check in case.checks)


def test_tf32_sgemms_are_refused_on_an_imported_kernelbench_fp32_matmul(supervisor, tmp_path):
    pytest.importorskip("torch")
    problem = ROOT / "tests" / "fixtures" / "kernelbench" / "1_Square_matrix_multiplication_.py"
    result = CliRunner().invoke(app, ["import", "kernelbench", str(problem), "--out", str(tmp_path / "kb")])
    assert result.exit_code == 0, result.output
    exp = load_experiment(tmp_path / "kb" / "experiment.json")
    assert exp.limits.precision == []
    launch = LaunchSpec(grid=["cdiv(N, 8)", "cdiv(N, 16)"], block=[32])
    for name in TF32_KERNELS:
        refused = supervisor.evaluate(exp.request(kernelbench_matmul(kernel_source(name)), launch=launch,
                                                  protocol=FAST))
        assert refused.status == "precision", (name, refused.status, refused.reason)
        assert "(tf32)" in refused.reason and not refused.cases


def test_a_bf16_experiment_runs_bf16_tensor_cores_and_refuses_fp8(supervisor):
    exp = load_experiment(BF16 / "experiment.json")
    ok = supervisor.evaluate(exp.request(kernel_source("matmul_bf16_mma.cu"), protocol=FAST))
    assert ok.status == "ok", ok.reason
    assert set(ok.compile.math) == {"bf16"}
    fp8 = supervisor.evaluate(exp.request(kernel_source("matmul_fp8_mma.cu"), protocol=FAST))
    assert fp8.status == "precision" and "(fp8)" in fp8.reason and not fp8.cases
