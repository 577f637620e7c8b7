"""The one door on the GPU: an experiment built in Python from a PyTorch function, evaluated, tuned,
verified and exported through the API, and the command line giving the same verdicts on the same
files."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cudaopt import api
from cudaopt.cli import app

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")

SIGNATURE = 'extern "C" __global__ void relu(const float* x, float* y, int n)'
KERNEL = SIGNATURE + """ {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = fmaxf(x[i], 0.0f);
}
"""


def relu(x, n):
    return torch.relu(x)


@pytest.fixture
def experiment(tmp_path, gpu_to_itself):
    x = torch.randn(1 << 20)
    return api.experiment(relu, {"x": x, "n": x.numel()}, signature=SIGNATURE, kernel=KERNEL,
                          launch={"grid": ["cdiv(n, BLOCK)"], "block": ["BLOCK"]}, tunables={"BLOCK": [128, 256]},
                          folder=tmp_path / "relu")


def test_a_torch_function_becomes_a_checked_and_timed_kernel_by_either_door(experiment, tmp_path):
    result = api.evaluate(experiment, warmup=5, iterations=20)
    case = result.candidate.case("example")
    assert result.candidate.ok and case.timing.median_us > 0
    assert [v.label for v in case.vendors] == ["PyTorch eager", "torch.compile"]
    assert all(v.status == "ok" for v in case.vendors), [v.reason for v in case.vendors]
    out = tmp_path / "cli.json"
    cli = CliRunner().invoke(app, ["evaluate", "--config", experiment.args.config, "--warmup", "5", "--iterations",
                                   "20", "--json", str(out)])
    assert cli.exit_code == 0, cli.output
    by_cli = json.loads(out.read_text())["candidate"]
    assert by_cli["status"] == "ok" and [c["status"] for c in by_cli["cases"]] == [c.status for c in
                                                                                  result.candidate.cases]


def test_tuned_verified_and_exported_as_a_torch_operator(experiment, tmp_path):
    run = api.optimize(experiment, strategy="tune", results=tmp_path / "results")
    assert run.summary.best_attempt is not None and run.model_failure is None
    settings = json.loads((run.path / "settings.json").read_text())  # an experiment in a folder of its own
    assert Path(settings["experiment"]["config"]).resolve() == Path(experiment.args.config).resolve()  # named, not copied
    assert not (run.path / "experiment").exists()
    outcome = api.verify(run.path)
    assert outcome.passed, outcome.reason
    assert "verify" in (run.path / "report.html").read_text()
    (module,) = api.export(run.path, to="torch", out=tmp_path / "ops")
    spec = importlib.util.spec_from_file_location("relu_op", module)
    op = importlib.util.module_from_spec(spec)
    sys.modules["relu_op"] = op
    spec.loader.exec_module(op)
    x = torch.randn(3000, device="cuda")
    torch.testing.assert_close(op.relu(x), torch.relu(x))
