"""`cudaopt import kernelbench`: problems in the KernelBench format become complete experiments (CPU)."""

from __future__ import annotations

import json
import sys

import pytest
from typer.testing import CliRunner

from cudaopt.cli import app
from cudaopt.errors import ExperimentError
from cudaopt.experiment import load_experiment
from tests.conftest import ROOT, optional

torch = optional("torch")

FIXTURES = ROOT / "tests" / "fixtures" / "kernelbench"
runner = CliRunner(env={"COLUMNS": "240"})

SIGNATURES = {
    "19_ReLU": "kb_19_relu(const float* x, float* out, int batch_size, int dim)",
    "23_Softmax": "kb_23_softmax(const float* x, float* out, int batch_size, int dim)",
    "47_Sum_reduction_over_a_dimension": "kb_47_sum_reduction_over_a_dimension(const float* x, float* out, "
                                         "int batch_size, int dim1, int dim2, int out_dim1)",
    "1_Square_matrix_multiplication_": "kb_1_square_matrix_multiplication(const float* A, const float* B, "
                                       "float* out, int N)",
    "63_conv_standard_2D__square_input__square_kernel": "kb_63_conv_standard_2d__square_input__square_kernel("
        "const float* x, const float* conv2d_weight, float* out, int batch_size, int in_channels, int height, "
        "int width, int out_channels, int kernel_size, int out_dim2, int out_dim3)",
    "76_Gemm_Add_ReLU": "kb_76_gemm_add_relu(const float* x, const float* bias, const float* gemm_weight, "
                        "float* out, int batch_size, int in_features, int out_features)",
    "93_masked_cumsum": "kb_93_masked_cumsum(const float* x, const unsigned char* mask, float* out, int batch_size, "
                        "int input_shape_0)",
    "95_CrossEntropyLoss": "kb_95_crossentropyloss(const float* predictions, const long long* targets, float* out, "
                           "int batch_size, int num_classes)",
    # the causal mask is the same for every seed: part of the function, not an input
    "12_Causal_attention_scores": "kb_12_causal_attention_scores(const float* q, const float* k, "
                                  "const float* proj_weight, float* out, int batch_size, int seq_len, int dim)",
    "101_Mean_absolute_error": "kb_101_mean_absolute_error(const float* predictions, const float* targets, float* out, "
                               "int batch_size, int input_shape_0)",
    # the output's length doubles with `length` but is not it at odd lengths: a scalar of its own
    "38_Pool_then_transposed_conv": "kb_38_pool_then_transposed_conv(const float* x, const float* "
                                    "conv_transpose_weight, const float* conv_transpose_bias, float* out, "
                                    "int batch_size, int channels, int length, int conv_transpose_weight_dim2, "
                                    "int out_dim2)",
    # sizes that change only together: dimensions named by tensor; too large to make on the CPU
    "100_Hinge_loss_tied_sizes": "kb_100_hinge_loss_tied_sizes(const float* predictions, const float* targets, "
                                 "float* out, int predictions_dim0, int predictions_dim1, int targets_dim0)",
    # a Python number forward takes is a kernel scalar, after the pointers
    "5_Scale_by_a_number": "kb_5_scale_by_a_number(const float* x, float* out, float factor, int batch_size, int dim)",
}


KERNELS = {"19_ReLU": "relu.cu", "23_Softmax": "softmax.cu", "1_Square_matrix_multiplication_": "matmul.cu",
           "47_Sum_reduction_over_a_dimension": "sum_reduction.cu", "5_Scale_by_a_number": "scale.cu"}  # the GPU tests' hand-written kernels


def imported(tmp_path, stem: str, *extra: str):
    out = tmp_path / stem
    result = runner.invoke(app, ["import", "kernelbench", str(FIXTURES / f"{stem}.py"), "--out", str(out), *extra])
    assert result.exit_code == 0, result.output
    return load_experiment(out / "experiment.json"), out, result.output


@pytest.fixture(scope="module")
def imports(tmp_path_factory):
    """Every translatable fixture imported once: stem -> (experiment, folder, output)."""
    folder = tmp_path_factory.mktemp("imports")
    return {stem: imported(folder, stem) for stem in SIGNATURES}


@pytest.mark.parametrize("stem", sorted(SIGNATURES))
def test_a_problem_becomes_a_complete_experiment_that_checks_on_the_cpu(imports, stem):
    exp, out, output = imports[stem]
    assert str(exp.signature) == f'extern "C" __global__ void {SIGNATURES[stem]}'
    assert exp.reference_kind == "torch" and exp.initial_kernel_path is None
    assert [(v.label, v.pytorch, v.returns, v.arrays) for v in exp.vendors] == [
        ("PyTorch eager", "eager", True, "torch"), ("torch.compile", "compile", True, "torch")]
    roles = [c.role for c in exp.case_specs]
    assert roles.count("performance") == 1 and roles.count("holdout") == 1 and roles[0] == "correctness"
    assert any(c.name.startswith("branches") for c in exp.cases({"correctness"}))  # every branch exercised
    problem = {}
    exec((FIXTURES / f"{stem}.py").read_text(), problem)
    perf = next(c for c in exp.case_specs if c.role == "performance")
    for name, value in perf.scalars.items():  # the problem's own sizes, where a scalar names a constant
        if name in problem:
            assert value == problem[name], name
    for case in exp.cases({"correctness"}):  # smaller, and odd wherever the problem's size is above 4
        for name, value in case.scalars.items():
            assert value <= perf.scalars[name]
            if name in problem and problem[name] > 4 and value != problem[name]:
                assert value % 2 == 1, (case.name, name, value)
    tolerance = problem.get("TASK_CONFIG", {}).get("rtol", 1e-2)  # the problem's own, else KernelBench's
    origin = exp.kernelbench
    assert origin.problem == f"{stem}.py" and set(origin.cases) == {c.name for c in exp.case_specs}
    for case in exp.case_specs:  # KernelBench's recorded; the one used is it, or stricter and said why
        kept = origin.cases[case.name]
        assert kept.rtol == kept.atol == tolerance
        for o in case.outputs.values():
            assert o.rtol <= tolerance and o.atol <= tolerance
            assert (o.rtol, o.atol) == (tolerance, tolerance) or any("output" in c for c in kept.changes)
    assert "next: cudaopt check" in output
    kernel = ["--kernel", str(FIXTURES / KERNELS[stem])] if stem in KERNELS else []
    check = runner.invoke(app, ["check", "--config", str(out / "experiment.json"), "--arch", "sm_90", *kernel])
    assert check.exit_code == 0, check.output
    assert "(PyTorch) ran on case" in check.output and "on the CPU" in check.output
    if kernel:  # the hand-written kernel of the GPU tests keeps the imported signature
        assert f"{KERNELS[stem]} compiles for sm_90" in check.output


def test_work_is_declared_from_the_case_scalars_flops_only_for_matrix_products(imports):
    exp, _, _ = imports["1_Square_matrix_multiplication_"]
    for case in exp.case_specs:
        n = case.scalars["N"]
        assert case.bytes == "4*N*N + 4*N*N + 4*N*N" and case.flops == 2 * n ** 3
    conv, _, _ = imports["63_conv_standard_2D__square_input__square_kernel"]
    assert all(c.flops is None for c in conv.case_specs)  # a convolution's direct flops could reject Winograd
    perf = next(c for c in conv.case_specs if c.role == "performance")
    assert (perf.scalars["out_dim2"], perf.scalars["out_dim3"]) == (254, 254)  # learnt from the output's shape
    gemm, _, _ = imports["76_Gemm_Add_ReLU"]
    perf = next(c for c in gemm.case_specs if c.role == "performance")
    assert perf.flops == 2 * 128 * 1024 * 512


def test_inputs_and_parameters_are_drawn_like_the_problem_makes_them(imports):
    exp, _, _ = imports["76_Gemm_Add_ReLU"]
    perf = next(c for c in exp.case_specs if c.role == "performance")
    x, weight = perf.inputs["x"].init, perf.inputs["gemm_weight"].init
    assert (x.dist, x.mean, x.std) == ("normal", 0.0, 1.0)  # torch.randn
    # nn.Linear's uniform(+-1/sqrt(in_features)), rounded outwards
    assert weight.dist == "uniform" and weight.high == -weight.low and 1 / 32 <= weight.high <= 0.035
    ce, _, _ = imports["95_CrossEntropyLoss"]
    for case in ce.case_specs:  # integer targets over the case's own number of classes
        targets = case.inputs["targets"].init
        assert (targets.dist, targets.low, targets.high) == ("integers", 0, case.scalars["num_classes"])
    masked, _, _ = imports["93_masked_cumsum"]
    mask = masked.case_specs[0].inputs["mask"].init
    assert (mask.dist, mask.low, mask.high) == ("integers", 0, 2)  # bool as one byte, 0 or 1


def test_the_reference_and_the_eager_vendor_compute_the_problem_with_the_kernels_parameters(imports):
    from cudaopt.worker.reference import load_python

    exp, _, _ = imports["76_Gemm_Add_ReLU"]
    case = exp.case_specs[0]
    s = case.scalars
    x = torch.randn(s["batch_size"], s["in_features"])
    weight = torch.randn(s["out_features"], s["in_features"])
    bias = torch.randn(s["out_features"])
    reference = load_python(exp.reference_source, str(exp.reference_path), exp.reference_entry)
    expected = torch.relu(x @ weight.T + bias)
    got = reference(x=x.clone(), bias=bias.clone(), gemm_weight=weight.clone(), **s)
    assert torch.allclose(got, expected, rtol=1e-5, atol=1e-5)
    eager = load_python(exp.vendors[0].source, exp.vendors[0].path, "pytorch_eager")
    returned = eager(x=x, bias=bias, gemm_weight=weight, out=torch.empty(0), **s)
    assert torch.equal(returned, got)
    weight[0, 0] += 1  # the vendor's model holds views of the harness's buffers: it sees the change
    assert not torch.equal(eager(x=x, bias=bias, gemm_weight=weight, out=torch.empty(0), **s), got)


def test_problems_written_for_the_gpu_and_with_unusual_inputs_are_probed_and_noted(imports):
    exp, _, output = imports["12_Causal_attention_scores"]  # get_inputs makes its tensors with device="cuda"
    small = exp.case_specs[0]
    assert small.scalars == {"batch_size": 7, "seq_len": 37, "dim": 31}  # `batch_size, seq_len = 8, 256` scaled
    assert small.outputs["out"].shape == ["batch_size", "seq_len", "seq_len"]
    _, _, output = imports["101_Mean_absolute_error"]
    assert "note: targets: takes 2 values in the problem (-1, 1); drawn from a continuous range" in output
    assert "note: predictions: heavy-tailed" in output  # Pareto-distributed: drawn over its bulk
    mae, _, _ = imports["101_Mean_absolute_error"]
    perf = next(c for c in mae.case_specs if c.role == "performance")
    assert perf.inputs["predictions"].init.high < 10 and perf.launch.grid == [1]  # one output element


def test_derived_constants_follow_the_sizes_a_case_sets(imports):
    """input_shape = (num_classes,): a case with fewer classes gets predictions of that width."""
    from cudaopt.worker.reference import load_python

    exp, _, _ = imports["95_CrossEntropyLoss"]
    reference = load_python(exp.reference_source, str(exp.reference_path), exp.reference_entry)
    small = exp.case_specs[0].scalars
    predictions = torch.randn(small["batch_size"], small["num_classes"])
    targets = torch.randint(0, small["num_classes"], (small["batch_size"],))
    loss = reference(predictions=predictions, targets=targets, **small)
    assert loss.shape == () and torch.allclose(loss, torch.nn.functional.cross_entropy(predictions, targets))


def test_inputs_too_large_to_make_on_the_cpu_at_any_size_get_plain_distributions_said_so(imports):
    exp, _, output = imports["100_Hinge_loss_tied_sizes"]
    perf = next(c for c in exp.case_specs if c.role == "performance")
    assert perf.inputs["predictions"].init.dist == "normal" and perf.inputs["predictions"].init.std == 1.0
    assert "kernelbench: too large to make on the CPU at any size it runs at" in " ".join(output.split())


def test_a_number_forward_takes_is_a_kernel_scalar_the_same_in_every_case(imports):
    from cudaopt.worker.reference import load_python

    exp, _, _ = imports["5_Scale_by_a_number"]
    assert all(c.scalars["factor"] == 0.5 and "factor" not in c.inputs for c in exp.case_specs)
    assert "float factor: a number forward takes, as get_inputs() gives it (the same in every case)" in exp.description
    reference = load_python(exp.reference_source, str(exp.reference_path), exp.reference_entry)
    x = torch.randn(3, 5)
    assert torch.equal(reference(x=x, factor=0.25, batch_size=3, dim=5), x * 0.25)


@pytest.mark.parametrize("stem, field, message", [
    ("returns_a_float", "forward", "returns float, not a tensor or a tuple of tensors"),
    ("data_dependent_shape", "forward", "its output shape depends on the input data"),
    ("string_input", "get_inputs", "item 1 is a str, not a tensor or a number: a kernel takes tensors, their sizes "
                                   "and numbers only"),
    ("dropout", "forward", "gives different outputs for the same inputs"),
    ("too_large_for_the_cpu", "forward", "on torch's meta device, and with 16.0 GiB of inputs it is not run on the CPU"),
])
def test_a_problem_that_cannot_be_a_kernel_is_one_line_and_exit_2(tmp_path, stem, field, message):
    path = FIXTURES / "untranslatable" / f"{stem}.py"
    result = runner.invoke(app, ["import", "kernelbench", str(path), "--out", str(tmp_path / "out")])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"error: {path}: {field}: ") and message in lines[0], lines
    assert not (tmp_path / "out").exists()
    if field == "get_inputs":  # what the problem is on any device: not told as a limit of the meta device
        assert "meta device" not in lines[0]


def test_bad_problem_files_name_what_is_missing(tmp_path):
    empty = tmp_path / "empty.py"
    empty.write_text("import torch\n")
    result = runner.invoke(app, ["import", "kernelbench", str(empty), "--out", str(tmp_path / "out")])
    assert result.exit_code == 2 and "empty.py: Model: missing" in result.output
    broken = tmp_path / "broken.py"
    broken.write_text("def get_inputs(:\n")
    result = runner.invoke(app, ["import", "kernelbench", str(broken), "--out", str(tmp_path / "out")])
    assert result.exit_code == 2 and "broken.py: line 1: not valid Python" in result.output


@pytest.mark.parametrize("edit, field", [
    (lambda text: text + "\nTASK_CONFIG = {'rtol': 'abc'}\n", "TASK_CONFIG.rtol"),
    (lambda text: text + "\nTASK_CONFIG = {'atol': float('nan')}\n", "TASK_CONFIG.atol"),
    (lambda text: text + "\nTASK_CONFIG = {'rtol': -1}\n", "TASK_CONFIG.rtol"),
    (lambda text: text.replace("class Model(nn.Module):", "class Model:").replace(
        "super(Model, self).__init__()", "pass"), "Model"),
])
def test_a_problem_with_a_bad_tolerance_or_a_model_that_is_no_module_is_one_line_and_exit_2(tmp_path, edit, field):
    path = tmp_path / "relu.py"
    path.write_text(edit((FIXTURES / "19_ReLU.py").read_text()))
    result = runner.invoke(app, ["import", "kernelbench", str(path), "--out", str(tmp_path / "out")])
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1 and lines[0].startswith(f"error: {path}: {field}: "), lines


def test_a_problem_whose_experiment_does_not_load_leaves_nothing_and_names_the_problem(tmp_path):
    path = tmp_path / "relu.py"
    path.write_text((FIXTURES / "19_ReLU.py").read_text().replace("batch_size = 16", "batch_size = 0"))
    result = runner.invoke(app, ["import", "kernelbench", str(path), "--out", str(tmp_path / "out")])
    line = " ".join(result.output.split())
    assert result.exit_code == 2 and line.startswith(f"error: {path}: "), line
    assert not any((tmp_path / "out").glob("*.json")) and not any((tmp_path / "out").glob("*.py"))


def test_a_file_name_in_other_letters_makes_an_ascii_kernel_name(tmp_path):
    path = tmp_path / "ünï cødé.py"
    path.write_text((FIXTURES / "19_ReLU.py").read_text())
    result = runner.invoke(app, ["import", "kernelbench", str(path), "--out", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    signature = json.loads((tmp_path / "out" / "experiment.json").read_text())["signature"]
    assert signature.isascii()


def test_an_existing_experiment_is_kept_unless_forced(tmp_path):
    imported(tmp_path, "19_ReLU")
    again = runner.invoke(app, ["import", "kernelbench", str(FIXTURES / "19_ReLU.py"), "--out", str(tmp_path / "19_ReLU")])
    assert again.exit_code == 2 and "already holds experiment.json" in again.output
    exp, _, _ = imported(tmp_path, "19_ReLU", "--force", "--name", "relu", "--rtol", "0.001")
    assert exp.signature.name == "relu" and exp.case_specs[0].outputs["out"].rtol == 0.001


def test_without_torch_the_import_says_what_to_install(tmp_path, monkeypatch):
    from cudaopt.kernelbench.importer import import_problem

    monkeypatch.setitem(sys.modules, "torch", None)  # as if torch were not installed
    with pytest.raises(ExperimentError, match=r"needs PyTorch .*pip install -e '\.\[torch\]' in cudaopt's"):
        import_problem(FIXTURES / "19_ReLU.py", tmp_path / "out")


def test_the_description_carries_the_docstrings_the_contract_and_the_model(imports):
    exp, out, _ = imports["63_conv_standard_2D__square_input__square_kernel"]
    text = exp.description
    assert text.startswith("KernelBench problem 63_conv_standard_2D__square_input__square_kernel.py.")
    assert "Performs a standard 2D convolution" in text and "conv2d_weight = Model.conv2d.weight" in text
    assert "class Model(nn.Module):" in text and "return self.conv2d(x)" in text
    config = json.loads((out / "experiment.json").read_text())
    assert "initial_kernel" not in config and config["reference_kind"] == "torch"


def test_fitted_distributions():
    import numpy as np

    from cudaopt.kernelbench.translate import fit

    rng = np.random.default_rng(0)
    normal, _ = fit(rng.standard_normal(100000) * 2 + 3, "float32")
    assert (normal.dist, normal.mean, normal.std) == ("normal", 3.0, 2.0)
    uniform, _ = fit(rng.random(100000), "float32")
    assert (uniform.dist, uniform.low, uniform.high) == ("uniform", 0.0, 1.0)
    centred, _ = fit(rng.random(100000) * 2 - 1, "float32")
    assert (centred.dist, centred.low, centred.high) == ("uniform", -1.0, 1.0)
    ints, _ = fit(rng.integers(3, 9, 1000).astype(float), "int64")
    assert (ints.dist, ints.low, ints.high) == ("integers", 3, 9)
    constant, note = fit(np.ones(10), "float32")
    assert constant.low < 1 < constant.high and "constant" in note
    _, sparse = fit(np.maximum(rng.standard_normal(1000), 0), "float32")
    assert "structure" in sparse

