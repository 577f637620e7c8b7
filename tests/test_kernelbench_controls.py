"""`cudaopt import kernelbench` writes cases that discriminate (negative controls at import, CPU):
inputs widened out of an activation's identity region, tolerances that follow the outputs' scale,
a case for every branch, and KernelBench's own distributions and tolerances recorded beside."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from cudaopt.cli import app
from cudaopt.cpu_controls import cpu_controls
from cudaopt.experiment import load_experiment
from tests.conftest import ROOT, optional

torch = optional("torch")

FIXTURES = ROOT / "tests" / "fixtures" / "kernelbench"
runner = CliRunner(env={"COLUMNS": "240"})


def imported(tmp_path, stem: str, fixture=None):
    out = tmp_path / stem
    result = runner.invoke(app, ["import", "kernelbench", str(fixture or FIXTURES / f"{stem}.py"), "--out", str(out)])
    assert result.exit_code == 0, result.output
    return load_experiment(out / "experiment.json"), out, result.output


def test_an_activation_fed_only_its_identity_region_gets_wider_inputs(tmp_path):
    exp, out, _ = imported(tmp_path, "22_Tanh_small_inputs")
    perf = next(c for c in exp.case_specs if c.role == "performance")
    assert perf.scalars == {"batch_size": 16, "dim": 16384}  # KernelBench's shapes kept
    x = perf.inputs["x"].init
    assert (x.dist, x.mean, x.std) == ("normal", 0.0, 1.0)
    kept = exp.kernelbench.cases[perf.name]
    assert (kept.inputs["x"].dist, kept.inputs["x"].low, kept.inputs["x"].high) == ("uniform", 0.0, 0.01)
    assert kept.changes == ["input x drawn from normal(0, 1) instead of uniform(0, 0.01): a copy of x passed its check"]
    assert "Inputs and tolerances differ from KernelBench's" in exp.description
    assert "input x drawn from normal(0, 1) instead of uniform(0, 0.01)" in exp.description
    written = json.loads((out / "experiment.json").read_text())["kernelbench"]
    assert written["cases"][perf.name]["inputs"]["x"]["high"] == 0.01  # typed, in the experiment file
    found = cpu_controls(exp)
    assert not found.on_gpu and all(c.discriminating for c in found.done.values())


def test_tolerances_follow_outputs_far_below_kernelbench_s_and_a_large_case_is_shrunk_for_the_cpu(tmp_path):
    exp, _, output = imported(tmp_path, "23_Softmax_large")
    assert "stricter than KernelBench, so that the case discriminates: kernelbench-64x262144: output out: atol" \
        in output
    perf = next(c for c in exp.case_specs if c.role == "performance")
    assert perf.scalars == {"batch_size": 64, "dim": 262144}
    out = perf.outputs["out"]
    assert out.rtol == 0.01 and 1e-8 < out.atol < 1e-7  # 1% of the outputs' ~1/dim, not 1e-2
    change = exp.kernelbench.cases[perf.name].changes[0]
    assert change.startswith("output out: atol 3.8e-08 instead of 0.01") and "on the CPU at batch_size=" in change
    found = cpu_controls(exp)  # `cudaopt check` runs the large case with its batch shrunk, and says so
    assert not found.on_gpu and found.shrunk == {perf.name: "batch_size=16"}
    assert all(c.discriminating for c in found.done.values())
    assert (f"{perf.name}: discriminates on the CPU at batch_size=16 (its batch shrunk); the GPU controls it at its "
            "own sizes at evaluation") in found.lines()


@pytest.fixture(scope="module")
def imports_mae(tmp_path_factory):
    exp, _, _ = imported(tmp_path_factory.mktemp("mae"), "101_Mean_absolute_error")
    return exp


def test_a_mean_over_many_draws_gets_a_tolerance_below_what_separates_input_sets(imports_mae):
    exp = imports_mae
    for case in exp.case_specs:
        if case.role == "performance":
            assert case.outputs["out"].rtol < 1e-3
            assert any("the median of input set 1's answer" in c and "passed with larger ones" in c
                       for c in exp.kernelbench.cases[case.name].changes)


def test_every_problem_gets_a_case_that_exercises_every_branch(imports_mae, tmp_path):
    branches = next(c for c in imports_mae.case_specs if c.name.startswith("branches"))
    assert branches.role == "correctness" and imports_mae.kernelbench.cases[branches.name].added
    for init in (branches.inputs["predictions"].init, branches.inputs["targets"].init):
        assert init.dist == "normal" and init.mean == 0 and init.std >= 10  # negative values, large magnitudes
    exp, _, _ = imported(tmp_path, "19_ReLU")
    names = [c.name for c in exp.case_specs]
    assert names.index("branches-13x37") < names.index("kernelbench-16x16384")  # among the correctness cases


def test_a_case_that_cannot_discriminate_is_written_with_its_reason_and_said(tmp_path):
    problem = tmp_path / "zero_output.py"
    problem.write_text((FIXTURES / "19_ReLU.py").read_text().replace("return torch.relu(x)", "return x * 0"))
    exp, _, output = imported(tmp_path, "zero_output", problem)
    for case in exp.case_specs:
        assert case.trivial_ok and "accepts zeros" in case.trivial_ok, case.name
    assert "warning: odd-13x37: imported from KernelBench: output out accepts zeros" in output
    check = runner.invoke(app, ["check", "--config", str(tmp_path / "zero_output" / "experiment.json"),
                                "--arch", "sm_90"])
    assert check.exit_code == 0, check.output
    assert "waived (trivial_ok): imported from KernelBench" in " ".join(check.output.split())


def test_widened_distributions_and_rounded_tolerances():
    from cudaopt.kernelbench.discriminate import shown, two_digits, wide
    from cudaopt.wire.protocol import InitSpec

    assert shown(wide(InitSpec(dist="uniform", low=0, high=0.01), 1.0)) == "normal(0, 1)"
    assert shown(wide(InitSpec(dist="normal", mean=2, std=3), 10.0)) == "normal(0, 50)"
    assert not wide(InitSpec(dist="uniform", vary=False), 1.0).vary
    assert [two_digits(v) for v in (0.00015625, 6.1e-05 * 0.01, 0.0)] == [0.00015, 6.1e-07, 0.0]
