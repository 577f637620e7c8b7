"""End to end on the GPU: a NumPy reference, and `cudaopt evaluate` on the example."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from cudaopt.cli import app
from cudaopt.experiment import load_experiment
from tests.conftest import SGEMM, kernel_source
from tests.gpu.conftest import FAST

pytestmark = pytest.mark.gpu

NUMPY_REFERENCE = """
import numpy as np

def matmul_f32(a, b, m, n, k):
    assert a.shape == (m, k) and b.shape == (k, n)
    return a.astype(np.float64) @ b.astype(np.float64)
"""


@pytest.fixture
def numpy_experiment(tmp_path):
    ref = tmp_path / "reference.py"
    ref.write_text(NUMPY_REFERENCE)
    signature = json.loads((SGEMM / "experiment.json").read_text())["signature"]
    return load_experiment(signature=signature, reference=ref, input_cases=SGEMM / "input_cases.json")


def small(request):
    request.cases = [c for c in request.cases if c.name != "square-4096"]
    return request


def test_numpy_reference_accepts_a_correct_kernel(supervisor, numpy_experiment):
    result = supervisor.evaluate(small(numpy_experiment.request(kernel_source("tiled.cu"), protocol=FAST)))
    assert result.status == "ok", result.reason
    assert all(check.max_abs_error < 1e-4 for case in result.cases for check in case.checks)


def test_numpy_reference_rejects_half_precision_operands(supervisor, numpy_experiment):
    """Refused from its compiled code first (FP16 conversions in an FP32 experiment); where the policy
    allows fp16, the tolerances still catch the error it makes."""
    refused = supervisor.evaluate(small(numpy_experiment.request(kernel_source("half_operands.cu"), protocol=FAST)))
    assert refused.status == "precision" and "(fp16)" in refused.reason and not refused.cases
    request = small(numpy_experiment.request(kernel_source("half_operands.cu"), protocol=FAST))
    request.limits.precision = ["fp16"]
    assert supervisor.evaluate(request).status == "mismatch"


def test_cli_evaluate_on_the_example(tmp_path):
    out = tmp_path / "result.json"
    runner = CliRunner(env={"COLUMNS": "200"})
    result = runner.invoke(app, ["evaluate", "--config", str(SGEMM / "experiment.json"),
                                 "--iterations", "20", "--json", str(out)])
    assert result.exit_code == 0, result.output
    assert "vs reference" in result.output and "square-4096" in result.output
    data = json.loads(out.read_text())
    assert data["candidate"]["status"] == "ok"
    names = [c["name"] for c in data["candidate"]["cases"]]
    assert "holdout-515x261x1031" not in names  # the holdout never runs in evaluate
    assert data["reference_timing"]["cases"][0]["timing"]["n"] == 20


def test_cli_evaluate_reports_a_failing_kernel_with_exit_1(tmp_path):
    runner = CliRunner(env={"COLUMNS": "200"})
    result = runner.invoke(app, ["evaluate", "--config", str(SGEMM / "experiment.json"),
                                 "--kernel", str(tmp_path / ".." / "missing.cu")])
    assert result.exit_code == 2
    bad = tmp_path / "bad.cu"
    bad.write_text(kernel_source("write_past_end.cu"))
    result = runner.invoke(app, ["evaluate", "--config", str(SGEMM / "experiment.json"), "--kernel", str(bad),
                                 "--iterations", "5", "--no-time-reference"])
    assert result.exit_code == 1
    assert "odd-31x37x29: guard_violation: c: wrote" in result.output
