"""On the GPU: negative controls in the worker. A case that accepts a trivial output is refused before
any kernel is judged (unless its trivial_ok says why); the example's cases and imported KernelBench
problems discriminate, so a copy posing as an activation and zeros on the large case are caught."""

from __future__ import annotations

import json
import shutil

import pytest
from typer.testing import CliRunner

from cudaopt.cli import app
from cudaopt.experiment import load_experiment
from cudaopt.wire.protocol import LaunchSpec
from tests.conftest import ROOT, kernel_source, optional
from tests.gpu.conftest import FAST

pytestmark = pytest.mark.gpu

FIXTURES = ROOT / "tests" / "fixtures" / "kernelbench"
SIGNATURE = 'extern "C" __global__ void relu(const float* x, float* y, int n)'
RELU_CU = ('extern "C" __global__ void relu(const float* x, float* y, int n) {\n'
           '  int i = blockIdx.x * blockDim.x + threadIdx.x;\n'
           '  if (i < n) y[i] = x[i] > 0.f ? x[i] : 0.f;\n}\n')
runner = CliRunner(env={"COLUMNS": "240"})


def relu_experiment(tmp_path, low: float, trivial_ok: str | None = None, reference: str = "relu.cu"):
    """A ReLU whose large case is drawn from [low, 1]: with low 0 a copy of x is its answer."""
    cases = [{"name": "small", "role": "correctness", "scalars": {"n": 1000},
              "inputs": {"x": {"shape": ["n"], "init": {"dist": "uniform", "low": -1, "high": 1}}},
              "outputs": {"y": {"shape": ["n"], "rtol": 1e-3, "atol": 1e-3}}},
             {"name": "big", "role": "performance", "scalars": {"n": 1 << 20},
              "inputs": {"x": {"shape": ["n"], "init": {"dist": "uniform", "low": low, "high": 1}}},
              "outputs": {"y": {"shape": ["n"], "rtol": 1e-3, "atol": 1e-3}}}]
    if trivial_ok:
        cases[1]["trivial_ok"] = trivial_ok
    (tmp_path / "cases.json").write_text(json.dumps({"launch": {"grid": ["cdiv(n, 256)"], "block": [256]},
                                                      "cases": cases}))
    (tmp_path / "relu.cu").write_text(RELU_CU)
    (tmp_path / "relu.py").write_text("import numpy as np\n\ndef relu(x, n):\n    return np.maximum(x, 0)\n")
    config = {"description": "relu", "signature": SIGNATURE, "reference": reference, "input_cases": "cases.json",
              "initial_kernel": "relu.cu"}
    (tmp_path / "experiment.json").write_text(json.dumps(config))
    return tmp_path / "experiment.json"


@pytest.mark.parametrize("reference", ["relu.cu", "relu.py"])
def test_the_worker_refuses_a_non_discriminating_case_before_judging_the_kernel(supervisor, tmp_path, reference):
    exp = load_experiment(relu_experiment(tmp_path, low=0.0, reference=reference))
    result = supervisor.evaluate(exp.request(RELU_CU, protocol=FAST))
    small, big = result.cases
    assert small.status == "ok" and small.controls.discriminating and small.controls.tried > 0
    assert big.status == "non_discriminating" and result.status == "non_discriminating"
    assert big.reason.startswith("case big: output y accepts a copy of input x (max abs err 0"), big.reason
    assert big.controls.accepted[0].trivial == "a copy of input x"
    assert not big.checks and big.timing is None  # refused before the kernel ran on it
    none = supervisor.evaluate(exp.request(None, protocol=FAST))  # the vendor-only path: the same verdict
    assert none.cases[1].status == "non_discriminating"
    unchecked = supervisor.evaluate(exp.request(RELU_CU, protocol=FAST, check=False))  # time-only: no answers
    assert all(c.controls is None and c.status == "ok" for c in unchecked.cases)


def test_trivial_ok_waives_the_controls_and_the_result_keeps_the_reason(supervisor, tmp_path):
    exp = load_experiment(relu_experiment(tmp_path, low=0.0, trivial_ok="the inputs are post-ReLU by design"))
    result = supervisor.evaluate(exp.request(RELU_CU, protocol=FAST))
    assert result.status == "ok", result.reason
    big = result.cases[1]
    assert big.controls.waived == "the inputs are post-ReLU by design" and big.controls.accepted


def test_evaluate_refuses_what_the_gpu_found_on_one_line_exit_2(tmp_path):
    """A .cu reference runs only on the GPU: the worker's verdict becomes the CLI's bad input."""
    config = relu_experiment(tmp_path, low=0.0)
    out = tmp_path / "result.json"
    result = runner.invoke(app, ["evaluate", "--config", str(config), "--iterations", "10", "--warmup", "2",
                                 "--json", str(out)])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert lines[-1].startswith(f"error: {tmp_path / 'cases.json'}: cases[1]: non-discriminating: case big: output y "
                                "accepts a copy of input x"), result.output
    kept = json.loads(out.read_text())["candidate"]  # what was measured is kept
    assert kept["status"] == "non_discriminating" and kept["cases"][1]["controls"]["accepted"]


def test_the_example_sgemm_cases_pass_their_controls(supervisor, sgemm):
    result = supervisor.evaluate(sgemm.request(kernel_source("tiled.cu"), protocol=FAST,
                                               roles={"correctness", "performance", "holdout"}))
    assert result.status == "ok", result.reason
    for case in result.cases:
        assert case.controls is not None and case.controls.discriminating, (case.name, case.controls)
        assert case.phases.get("controls_s") is not None


@pytest.fixture(scope="module")
def kernelbench(tmp_path_factory):
    optional("torch")
    folder = tmp_path_factory.mktemp("kernelbench")
    for stem in ("22_Tanh_small_inputs", "23_Softmax_large"):
        result = runner.invoke(app, ["import", "kernelbench", str(FIXTURES / f"{stem}.py"), "--out",
                                     str(folder / stem)])
        assert result.exit_code == 0, result.output
    return folder


def with_kernelbench_checks(folder, case: str, output=None, inputs=None):
    """The imported experiment with one case put back to KernelBench's own tolerance or draws."""
    exp = load_experiment(folder / "experiment.json")
    kept = exp.kernelbench.cases[case]
    data = json.loads((folder / "input_cases.json").read_text())
    item = next(c for c in data["cases"] if c["name"] == case)
    if output:
        item["outputs"][output].update(rtol=kept.rtol, atol=kept.atol)
    for name in inputs or []:
        item["inputs"][name]["init"] = kept.inputs[name].model_dump(exclude_defaults=True, exclude_none=True)
    (folder / "input_cases.json").write_text(json.dumps(data))
    return load_experiment(folder / "experiment.json")


def test_a_copy_posing_as_an_activation_is_refused_on_the_imported_problem(supervisor, kernelbench, tmp_path):
    exp = load_experiment(kernelbench / "22_Tanh_small_inputs" / "experiment.json")
    honest = supervisor.evaluate(exp.request((FIXTURES / "tanh.cu").read_text(), protocol=FAST))
    assert honest.status == "ok", honest.reason
    copy = supervisor.evaluate(exp.request((FIXTURES / "copy_as_tanh.cu").read_text(), protocol=FAST))
    assert copy.status == "mismatch", copy.reason
    # with KernelBench's own draws the copy would pass: the worker refuses that case instead
    shutil.copytree(kernelbench / "22_Tanh_small_inputs", tmp_path / "own")
    perf = next(c.name for c in exp.case_specs if c.role == "performance")
    own = with_kernelbench_checks(tmp_path / "own", perf, inputs=["x"])
    refused = supervisor.evaluate(own.request((FIXTURES / "copy_as_tanh.cu").read_text(), protocol=FAST))
    assert refused.find(perf).status == "non_discriminating", refused.reason
    assert any(a.trivial == "a copy of input x" for a in refused.find(perf).controls.accepted), refused.reason


def test_zeros_on_the_large_case_are_refused_on_the_imported_problem(supervisor, kernelbench, tmp_path):
    exp = load_experiment(kernelbench / "23_Softmax_large" / "experiment.json")
    launch = LaunchSpec(grid=["batch_size"], block=[256])
    source = (FIXTURES / "zeros_when_large.cu").read_text()
    cheat = supervisor.evaluate(exp.request(source, launch=launch, protocol=FAST))
    perf = next(c.name for c in exp.case_specs if c.role == "performance")
    assert all(c.status == "ok" for c in cheat.cases if c.role == "correctness")
    assert cheat.find(perf).status == "mismatch", cheat.reason
    assert cheat.find(perf).controls.discriminating  # the imported tolerance follows outputs of ~1/dim
    shutil.copytree(kernelbench / "23_Softmax_large", tmp_path / "own")
    own = with_kernelbench_checks(tmp_path / "own", perf, output="out")
    refused = supervisor.evaluate(own.request(source, launch=launch, protocol=FAST))
    assert refused.find(perf).status == "non_discriminating", refused.reason
    assert "output out accepts zeros" in refused.find(perf).reason
