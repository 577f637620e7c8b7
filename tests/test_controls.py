"""Negative controls (worker/controls.py, cpu_controls.py): a case whose check accepts a trivial
output is refused, on the CPU by `cudaopt check` and on the GPU by the worker."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from cudaopt.cli import app
from cudaopt.errors import ExperimentError
from cudaopt.experiment import load_cases, load_experiment
from cudaopt.worker.compare import compare
from cudaopt.worker.controls import ControlSet, judge, negative_controls, stored
from cudaopt.worker.inputs import generate
from cudaopt.wire.protocol import CaseSpec
from cudaopt.wire.signature import parse_signature
from tests.conftest import SGEMM

runner = CliRunner(env={"COLUMNS": "240"})
UNARY = parse_signature('extern "C" __global__ void f(const float* x, float* y, int n)')


def unary_case(n: int = 10000, rtol: float = 1e-2, atol: float = 1e-2, **extra) -> CaseSpec:
    return CaseSpec(name="big", role="performance", scalars={"n": n}, inputs={"x": {"shape": ["n"]}},
                    outputs={"y": {"shape": ["n"], "rtol": rtol, "atol": atol}}, **extra)


def sets_of(fn, draw, count: int = 3, signature=UNARY, dtype: str = "float32") -> list[ControlSet]:
    """Input sets of independent draws and the answers of ``fn`` for them."""
    rng = np.random.default_rng(7)
    out = []
    for _ in range(count):
        inputs = draw(rng)
        answers = fn(**inputs)
        answers = answers if isinstance(answers, dict) else {signature.outputs[0].name: answers}
        out.append(ControlSet({n: (v, dtype if v.dtype.kind == "f" else str(v.dtype)) for n, v in inputs.items()},
                              {n: np.asarray(v, dtype=np.float64) for n, v in answers.items()}))
    return out


def accepted(controls) -> list[tuple[str, str]]:
    return [(a.output, a.trivial) for a in controls.accepted]


def test_a_discriminating_case_passes_every_control():
    case = unary_case()
    sets = sets_of(lambda x: np.maximum(x, 0), lambda rng: {"x": rng.standard_normal(10000).astype(np.float32)})
    controls = negative_controls(case, UNARY, sets)
    assert controls.discriminating and controls.tried >= 3 * 5 and judge(case, controls) is None


def test_a_copy_of_the_input_is_caught_where_an_activation_sees_only_its_identity_region():
    case = unary_case()
    sets = sets_of(lambda x: np.maximum(x, 0), lambda rng: {"x": rng.random(10000).astype(np.float32)})
    controls = negative_controls(case, UNARY, sets)
    assert ("y", "a copy of input x") in accepted(controls)
    line = judge(case, controls)
    assert line.startswith("case big: output y accepts a copy of input x (max abs err 0, within atol 0.01")
    assert "\n" not in line and "trivial_ok" in line


def test_zeros_are_caught_where_the_outputs_are_far_below_the_absolute_tolerance():
    case = unary_case()
    sets = sets_of(lambda x: x * 1e-4, lambda rng: {"x": rng.standard_normal(10000).astype(np.float32)})
    assert accepted(negative_controls(case, UNARY, sets))[0] == ("y", "zeros")


def test_a_reference_that_answers_nan_everywhere_is_refused():
    """NaN agrees with NaN, so a kernel that writes NaN would pass it."""
    case = unary_case()
    sets = sets_of(lambda x: np.full_like(x, np.nan), lambda rng: {"x": rng.standard_normal(10000).astype(np.float32)})
    controls = negative_controls(case, UNARY, sets)
    assert ("y", "all NaN") in accepted(controls) and "accepts all NaN" in judge(case, controls)


def test_nan_where_the_reference_has_it_and_numbers_elsewhere_still_discriminates():
    case = unary_case()
    sets = sets_of(lambda x: np.where(x > 2.5, np.nan, np.maximum(x, 0)),
                   lambda rng: {"x": rng.standard_normal(10000).astype(np.float32)})
    assert negative_controls(case, UNARY, sets).discriminating


def test_a_nearly_constant_output_is_caught_by_another_input_sets_median():
    case = unary_case(rtol=1e-3, atol=1e-3)
    sets = sets_of(lambda x: 1 / (1 + np.exp(-x * 1e-3)),
                   lambda rng: {"x": rng.standard_normal(10000).astype(np.float32)})
    found = accepted(negative_controls(case, UNARY, sets))
    assert found[0] == ("y", "the constant 0.499998 (the median of input set 1's answer)"), found


def test_a_large_answer_learns_its_constant_from_a_sample(monkeypatch):
    """Past STATS_SAMPLE elements the median is a sample's: a nearly constant output is still caught."""
    import cudaopt.worker.controls as controls_module

    monkeypatch.setattr(controls_module, "STATS_SAMPLE", 1000)
    case = unary_case(rtol=1e-3, atol=1e-3)
    sets = sets_of(lambda x: 1 / (1 + np.exp(-x * 1e-3)),
                   lambda rng: {"x": rng.standard_normal(10000).astype(np.float32)})
    found = accepted(negative_controls(case, UNARY, sets))
    assert found[0][0] == "y" and found[0][1].startswith("the constant 0.5") and "median" in found[0][1], found


@pytest.mark.parametrize(("n", "count", "run"), [(16 << 20, 1 << 22, 1 << 16), (10_000, 4096, 16), (5000, 4096, 16),
                                                (4097, 4096, 16), (100, 4096, 16), (1000, 999, 1000)])
def test_a_sample_reads_distinct_sorted_elements_from_the_first_to_the_last(n, count, run):
    """The elements a control samples: each once, in order (the device reads them as runs), from
    both ends of the answer, and as many as asked wherever the runs do not overlap; a large answer's
    sample is drawn fast (a hash-based unique took seconds on 4 M indices, on every new case)."""
    from cudaopt.worker.controls import runs, spread

    index = spread(n, count, run)
    assert (np.diff(index) > 0).all() and index[0] == 0 and index[-1] < n
    assert index.size == min(n, count) or (n > count and index.size <= count)
    if count // min(run, count) >= 2 or n <= count:
        assert index[-1] == n - 1
    if n > count and count % run == 0:
        assert index.size == count and len(runs(index)) <= count // run


def test_a_stale_answer_is_caught_where_every_input_set_gives_the_same_answer():
    sig = parse_signature('extern "C" __global__ void f(const float* x, float* y, int n)')
    case = CaseSpec(name="mean", role="performance", scalars={"n": 100000}, inputs={"x": {"shape": ["n"]}},
                    outputs={"y": {"shape": [1], "rtol": 1e-2, "atol": 1e-2}})
    sets = sets_of(lambda x: np.array([np.abs(x).mean() + 3]),
                   lambda rng: {"x": rng.standard_normal(100000).astype(np.float32)}, signature=sig)
    found = accepted(negative_controls(case, sig, sets))
    assert ("y", "the answer for input set 1") in found
    one = [sets[0]]  # a single input set: no other answer to learn a constant from, nor to be stale
    assert not accepted(negative_controls(case, sig, one))


def test_the_near_duplicate_and_inputs_that_do_not_vary_are_not_stale_answers():
    case = unary_case()
    rng = np.random.default_rng(1)
    x = rng.standard_normal(10000).astype(np.float32)
    near = x.copy()
    near[-1] += 1e-3  # a change within the tolerance
    sets = [ControlSet({"x": (v, "float32")}, {"y": np.maximum(v, 0).astype(np.float64)})
            for v in (x, rng.standard_normal(10000).astype(np.float32), near)]
    assert not accepted(negative_controls(case, UNARY, sets, {frozenset((0, 2))}))
    assert ("y", "the answer for input set 2") in accepted(negative_controls(case, UNARY, sets))
    same = [ControlSet({"x": (x, "float32")}, {"y": np.maximum(x, 0).astype(np.float64)}) for _ in range(2)]
    assert not accepted(negative_controls(case, UNARY, same))  # nothing varies: no other answer to be stale


def test_trivial_ok_waives_the_controls_and_keeps_the_reason():
    case = unary_case(trivial_ok="the inputs are post-ReLU activations by design")
    sets = sets_of(lambda x: np.maximum(x, 0), lambda rng: {"x": rng.random(10000).astype(np.float32)})
    controls = negative_controls(case, UNARY, sets)
    assert judge(case, controls) is None and controls.waived == "the inputs are post-ReLU activations by design"
    assert controls.accepted  # what was accepted is still recorded


@pytest.mark.parametrize("reason", ["", "   "])
def test_an_empty_trivial_ok_is_refused_at_load_naming_the_file_and_field(tmp_path, reason):
    data = json.loads((SGEMM / "input_cases.json").read_text())
    data["cases"][1]["trivial_ok"] = reason
    path = tmp_path / "cases.json"
    path.write_text(json.dumps(data))
    sig = load_experiment(SGEMM / "experiment.json").signature
    with pytest.raises(ExperimentError) as err:
        load_cases(path, sig)
    assert str(err.value).startswith(f"{path}: cases[1].trivial_ok: needs a written reason")
    assert "\n" not in str(err.value)


def test_a_case_without_trivial_ok_is_written_as_before():
    assert "trivial_ok" not in unary_case().to_data()
    assert unary_case(trivial_ok=" why ").to_data()["trivial_ok"] == "why"


def test_multiple_outputs_name_the_one_that_accepts_a_trivial_output():
    sig = parse_signature('extern "C" __global__ void f(const float* x, float* y, float* z, int n)')
    case = CaseSpec(name="two", role="correctness", scalars={"n": 5000}, inputs={"x": {"shape": ["n"]}},
                    outputs={"y": {"shape": ["n"], "rtol": 1e-3, "atol": 1e-3},
                             "z": {"shape": ["n"], "rtol": 1e-3, "atol": 1e-3}})
    sets = sets_of(lambda x: {"y": np.sin(x), "z": x * 1e-5},
                   lambda rng: {"x": rng.standard_normal(5000).astype(np.float32)}, signature=sig)
    controls = negative_controls(case, sig, sets)
    assert {o for o, _ in accepted(controls)} == {"z"} and "output z accepts zeros" in judge(case, controls)


def test_integer_outputs_are_compared_exactly_and_take_only_integer_copies():
    sig = parse_signature('extern "C" __global__ void f(const float* x, const int* k, int* y, int n)')
    case = CaseSpec(name="ints", role="correctness", scalars={"n": 3000},
                    inputs={"x": {"shape": ["n"]}, "k": {"shape": ["n"]}},
                    outputs={"y": {"shape": ["n"], "rtol": 0, "atol": 0}})

    def draw(rng):
        return {"x": rng.standard_normal(3000).astype(np.float32), "k": rng.integers(0, 5, 3000).astype(np.int32)}

    honest = sets_of(lambda x, k: (x > 0).astype(np.int32) * 2 + k, draw, signature=sig, dtype="float32")
    assert not accepted(negative_controls(case, sig, honest))
    copies_k = sets_of(lambda x, k: k, draw, signature=sig, dtype="float32")
    assert accepted(negative_controls(case, sig, copies_k)) == [("y", "a copy of input k")]
    sign = sets_of(lambda x, k: np.zeros(3000, np.int32) + (x > 100), draw, signature=sig, dtype="float32")
    assert accepted(negative_controls(case, sig, sign))[0] == ("y", "zeros")


def test_trivial_outputs_are_rounded_into_the_outputs_type():
    assert stored(np.array([0.1]), "float16")[0] == np.float64(np.float16(0.1))
    assert stored(np.array([2.6, -1e12]), "int32").tolist() == [3.0, float(np.iinfo(np.int32).min)]
    assert stored(np.array([1.0 + 2 ** -10]), "bfloat16")[0] == 1.0


def test_the_controls_use_the_checks_own_element_rule():
    from cudaopt.worker.controls import accepts

    rng = np.random.default_rng(3)
    ref = rng.standard_normal(9000)
    for scale in (1e-4, 1e-2, 1.0):
        out = (ref + rng.standard_normal(9000) * scale).astype(np.float32)
        info = compare("y", out, ref, "float32", 1e-3, 1e-3, 0)
        err = accepts(lambda index: stored(out.reshape(-1) if index is None else out[index], "float32"),
                      ref, "float32", 1e-3, 1e-3)
        assert (err is not None) == info.ok


def test_the_example_sgemm_cases_discriminate():
    """The example's cases (a .cu reference: checked on the GPU) against an exact product, as the
    worker does: three input sets, the third a near duplicate of the first."""
    exp = load_experiment(SGEMM / "experiment.json")
    for case in exp.case_specs:
        if case.scalars["m"] * case.scalars["n"] * case.scalars["k"] > 1 << 31:
            continue  # square-4096: its tolerance is scaled like the others'
        sets = []
        for inputs in generate(case, exp.signature, 3):
            a, b = inputs["a"].as_numbers().astype(np.float64), inputs["b"].as_numbers().astype(np.float64)
            sets.append(ControlSet({n: (t.data, t.dtype) for n, t in inputs.items()}, {"c": a @ b}))
        controls = negative_controls(case, exp.signature, sets, {frozenset((0, 2))})
        assert controls.discriminating, (case.name, accepted(controls))


# --- cudaopt check / evaluate ---------------------------------------------------------------

RELU = "import numpy as np\n\ndef relu(x, n):\n    return np.maximum(x, 0)\n"


def relu_experiment(tmp_path, low: float, trivial_ok: str | None = None, n: str = "4096"):
    cases = [{"name": "small", "role": "correctness", "scalars": {"n": 1000},
              "inputs": {"x": {"shape": ["n"], "init": {"dist": "uniform", "low": -1, "high": 1}}},
              "outputs": {"y": {"shape": ["n"], "rtol": 1e-3, "atol": 1e-3}}},
             {"name": "big", "role": "performance", "scalars": {"n": int(n)},
              "inputs": {"x": {"shape": ["n"], "init": {"dist": "uniform", "low": low, "high": 1}}},
              "outputs": {"y": {"shape": ["n"], "rtol": 1e-3, "atol": 1e-3}}}]
    if trivial_ok:
        cases[1]["trivial_ok"] = trivial_ok
    (tmp_path / "cases.json").write_text(json.dumps({"launch": {"grid": ["cdiv(n, 256)"], "block": [256]},
                                                      "cases": cases}))
    (tmp_path / "relu.py").write_text(RELU)
    (tmp_path / "relu.cu").write_text('extern "C" __global__ void relu(const float* x, float* y, int n) {\n'
                                      '  int i = blockIdx.x * blockDim.x + threadIdx.x;\n'
                                      '  if (i < n) y[i] = x[i] > 0.f ? x[i] : 0.f;\n}\n')
    config = {"description": "relu", "signature": 'extern "C" __global__ void relu(const float* x, float* y, int n)',
              "reference": "relu.py", "input_cases": "cases.json", "initial_kernel": "relu.cu"}
    (tmp_path / "experiment.json").write_text(json.dumps(config))
    return tmp_path / "experiment.json"


@pytest.mark.parametrize("command", ["check", "evaluate"])
def test_check_and_evaluate_refuse_a_non_discriminating_case_on_one_line_exit_2(tmp_path, command):
    config = relu_experiment(tmp_path, low=0.0)
    result = runner.invoke(app, [command, "--config", str(config)])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1, result.output
    assert lines[0].startswith(f"error: {tmp_path / 'cases.json'}: cases[1]: non-discriminating: case big: output y "
                               "accepts a copy of input x"), lines[0]


def test_a_reference_that_prints_does_not_disturb_the_controls(tmp_path):
    """What the user's reference prints (a line that looks like JSON too) is not taken for an answer."""
    config = relu_experiment(tmp_path, low=-1.0)
    (tmp_path / "relu.py").write_text(RELU.replace("    return", "    print('{debug}', n)\n    return"))
    result = runner.invoke(app, ["check", "--config", str(config), "--arch", "sm_90"])
    assert result.exit_code == 0, result.output
    assert "2 case(s) discriminate on the CPU" in result.output


def test_check_shows_the_controls_and_a_waiver_with_its_reason(tmp_path):
    ok = runner.invoke(app, ["check", "--config", str(relu_experiment(tmp_path, low=-1.0)), "--arch", "sm_90"])
    assert ok.exit_code == 0, ok.output
    assert "2 case(s) discriminate on the CPU" in ok.output
    waived = runner.invoke(app, ["check", "--config", str(relu_experiment(tmp_path, 0.0, "inputs are activations "
                                                                          "after a ReLU")), "--arch", "sm_90"])
    assert waived.exit_code == 0, waived.output
    assert "case big: output y accepts a copy of input x; waived (trivial_ok): inputs are activations after a ReLU" \
        in " ".join(waived.output.split())


def test_cases_too_large_for_the_cpu_are_said_to_be_controlled_on_the_gpu(tmp_path, monkeypatch):
    from cudaopt import cpu_controls

    monkeypatch.setattr(cpu_controls, "CPU_ELEMENTS", 5000)
    found = cpu_controls.cpu_controls(load_experiment(relu_experiment(tmp_path, low=0.0)))
    assert list(found.done) == ["small"]
    assert found.on_gpu == {"big": "too large for the CPU (over 5000 elements)"}
    assert "big: too large for the CPU (over 5000 elements); controlled on the GPU at evaluation" in found.lines()
    cu = cpu_controls.cpu_controls(load_experiment(SGEMM / "experiment.json"))
    assert not cu.done and set(cu.on_gpu.values()) == {"a .cu reference runs on the GPU only"}


def test_the_report_shows_each_cases_controls_and_a_waiver_with_its_reason(tmp_path):
    """report.html: the baseline attempt's controls per case, and whose checks a KernelBench run used."""
    import shutil

    from cudaopt.agent.model import ModelSettings
    from cudaopt.optimize import start_or_resume
    from cudaopt.record.runs import Budget, ExperimentArgs
    from tests.fake_openai import FakeOpenAI
    from tests.scripted import ScriptedEvaluator, answer

    with FakeOpenAI([answer("ok 0.5", "register blocking")]) as server:
        run, _ = start_or_resume(ExperimentArgs(config=str(SGEMM / "experiment.json")),
                                 ModelSettings(base_url=server.url), Budget(max_iterations=1), tmp_path / "results",
                                 ScriptedEvaluator())
    copy = tmp_path / "run"
    shutil.copytree(run.path, copy)
    history = json.loads((copy / "history.json").read_text())
    cases = history["attempts"][0]["cases"]
    cases[0]["controls"] = {"tried": 12, "accepted": []}
    cases[1]["controls"] = {"tried": 12, "waived": "inputs are ReLU outputs by design", "accepted": [
        {"output": "c", "trivial": "a copy of input a", "input_set": 0, "max_abs_error": 0.0, "rtol": 1e-4,
         "atol": 1e-4}]}
    (copy / "history.json").write_text(json.dumps(history))
    summary = json.loads((copy / "summary.json").read_text())
    summary["kernelbench"] = {"correct": True, "changes": ["big: output c: atol 3.8e-08 instead of 0.01"]}
    (copy / "summary.json").write_text(json.dumps(summary))
    result = runner.invoke(app, ["report", str(copy)])
    assert result.exit_code == 0, result.output
    html = (copy / "report.html").read_text()
    assert 'id="controls"' in html and "every one refused" in html
    assert "accepts a copy of input a (output c); waived (trivial_ok): inputs are ReLU outputs by design" in html
    assert "Checked more strictly than KernelBench" in html and "big: output c: atol 3.8e-08 instead of 0.01" in html


def _locked_answers(values_per_set):
    """LockedAnswers on the fake device, and the host arrays every download of it handed out."""
    from cudaopt.worker.answers import LockedAnswer
    from tests.fake_device import FakeDevice

    gpu, handed = FakeDevice(), []
    download = gpu.download

    def recorded(ptr, nbytes):
        handed.append(download(ptr, nbytes))
        return handed[-1]

    answers = [{"y": LockedAnswer(gpu, v)} for v in values_per_set]
    gpu.download = recorded
    return answers, handed


def test_the_worker_reads_a_sample_of_each_locked_answer_and_zeroes_every_host_copy(monkeypatch):
    """answers.answer_controls, as the runner calls it (three input sets, the third a near
    duplicate of the first): the controls read a sample of each answer, not all of it, while it is
    opened, and nothing of the answers is left on the host after. (The median's sample made small,
    as it is beside an answer of KernelBench's size.)"""
    import cudaopt.worker.controls as controls_module
    from cudaopt.worker.answers import answer_controls
    from cudaopt.worker.inputs import HostTensor

    monkeypatch.setattr(controls_module, "STATS_SAMPLE", 8192)
    monkeypatch.setattr(controls_module, "STATS_RUN", 1024)

    n = 200_000
    case = unary_case(n=n)
    rng = np.random.default_rng(5)
    x0, x1 = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    near = x0.copy()
    near[-1] = x1[-1]
    host_sets = [{"x": HostTensor("x", "float32", x)} for x in (x0, x1, near)]
    answers, handed = _locked_answers([np.tanh(x).astype(np.float64) for x in (x0, x1, near)])
    controls = answer_controls(case, UNARY, host_sets, answers)
    assert controls.discriminating and controls.tried >= 3 * 5
    read = sum(h.nbytes for h in handed)
    assert 0 < read < 3 * 8 * n // 10, read  # samples: far less than the answers' 4.8 MB
    assert all(not h.any() for h in handed)
    assert all(a["y"].gpu.locked for a in answers)  # every answer closed again


def test_a_locked_answer_is_read_whole_for_a_trivial_output_that_passes_its_sample():
    from cudaopt.worker.answers import answer_controls
    from cudaopt.worker.inputs import HostTensor

    n = 50_000
    case = unary_case(n=n)
    rng = np.random.default_rng(6)
    xs = [rng.random(n).astype(np.float32) for _ in range(3)]
    host_sets = [{"x": HostTensor("x", "float32", x)} for x in xs]
    answers, handed = _locked_answers([np.maximum(x, 0).astype(np.float64) for x in xs])
    controls = answer_controls(case, UNARY, host_sets, answers)
    assert accepted(controls) == [("y", "a copy of input x")]  # not the stale near duplicate
    assert any(h.nbytes == 8 * n for h in handed)  # the whole answer, to confirm the copy passes everywhere
    assert all(not h.any() for h in handed)


def test_optimize_stops_after_a_baseline_with_a_non_discriminating_case_and_records_why(tmp_path):
    """A .cu reference is controlled on the GPU only: the baseline's verdict stops the run (exit 2),
    and the run directory keeps the baseline and the reason."""
    from cudaopt.agent.model import ModelSettings
    from cudaopt.optimize import start_or_resume
    from cudaopt.record.runs import Budget, ExperimentArgs
    from tests.fake_openai import FakeOpenAI
    from tests.scripted import ScriptedEvaluator, answer

    class Undiscriminating(ScriptedEvaluator):
        def _evaluate(self, request, on_event=None):
            result = super()._evaluate(request, on_event)
            case = result.find("square-256")
            case.status, case.reason = "non_discriminating", "case square-256: output c accepts zeros (max abs err 0)"
            case.timing = None
            result.status, result.reason = case.status, case.reason
            return result

    with FakeOpenAI([answer("ok 0.5")]) as server, pytest.raises(ExperimentError) as err:
        start_or_resume(ExperimentArgs(config=str(SGEMM / "experiment.json")), ModelSettings(base_url=server.url),
                        Budget(max_iterations=1), tmp_path / "results", Undiscriminating())
    assert str(err.value) == (f"{SGEMM / 'input_cases.json'}: cases[1]: non-discriminating: case square-256: "
                              "output c accepts zeros (max abs err 0)")
    summary = json.loads((tmp_path / "results" / "run-001" / "summary.json").read_text())
    assert summary["stop_reason"] == "non-discriminating case (negative controls)" and summary["attempts"] == 1
