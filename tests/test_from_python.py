"""An experiment built in Python (api.experiment): the files a user would have written, loaded as any
experiment is, its cases and shapes read off the examples, and what cannot be written refused on
one line."""

from __future__ import annotations

import json

import numpy as np
import pytest

from cudaopt import api
from cudaopt.errors import ExperimentError
from tests.conftest import optional

SCALE = 2.0
SIGNATURE = 'extern "C" __global__ void scaled_sum(const float* a, const float* b, float* c, int m, int n)'
LAUNCH = {"grid": ["cdiv(m * n, 256)"], "block": [256]}


def doubled(values):
    return SCALE * values


def scaled_sum(a, b, m, n):
    """Twice the sum of two matrices."""
    return doubled(np.asarray(a) + np.asarray(b))


def example(m: int, n: int) -> dict:
    rng = np.random.default_rng(m * n)
    return {"a": rng.normal(size=(m, n)).astype(np.float32), "b": rng.uniform(0, 4, size=(m, n)).astype(np.float32),
            "m": m, "n": n}


def test_the_files_are_written_and_load_as_any_experiment(tmp_path):
    exp = api.experiment(scaled_sum, [example(31, 17), example(64, 48)], signature=SIGNATURE,
                         launch={"grid": ["cdiv(n, 16)", "cdiv(m, 16)"], "block": [16, 16]}, rtol=1e-5, atol=1e-5,
                         folder=tmp_path / "exp")
    assert exp.args.config == str((tmp_path / "exp" / "experiment.json").resolve())
    assert exp.reference_kind == "py" and exp.description == "Twice the sum of two matrices."
    assert [(c.name, c.role) for c in exp.case_specs] == [("example-0", "performance"), ("example-1", "performance"),
                                                          ("holdout", "holdout")]
    first = exp.case_specs[0]
    assert first.scalars == {"m": 31, "n": 17} and first.inputs["a"].shape == ["m", "n"]
    assert first.outputs["c"].shape == ["m", "n"] and first.outputs["c"].rtol == 1e-5
    assert first.inputs["a"].init.dist == "normal" and first.inputs["b"].init.dist == "uniform"
    assert exp.case_specs[2].seed != first.seed and exp.case_specs[2].scalars == first.scalars
    reference = (tmp_path / "exp" / "reference.py").read_text()
    assert "import numpy as np" in reference and "SCALE = 2.0" in reference and "def doubled(" in reference
    assert not exp.vendors  # a NumPy reference is no PyTorch baseline


def test_a_reference_in_the_cache_is_named_by_its_content():
    one, again, other = (api.experiment(scaled_sum, example(8, n), signature=SIGNATURE, launch=LAUNCH)
                         for n in (4, 4, 6))
    assert one.args.config == again.args.config != other.args.config
    with pytest.raises(ExperimentError, match="launch: missing: how every case launches the kernel"):
        api.experiment(scaled_sum, example(8, 4), signature=SIGNATURE)


def test_tunables_make_a_tune_section_and_the_cases_launch_with_their_first_values(tmp_path):
    kernel = tmp_path / "k.cu"
    kernel.write_text(SIGNATURE + " { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < m * n) "
                                  "c[i] = 2.0f * (a[i] + b[i]); }\n")
    exp = api.experiment(scaled_sum, example(8, 4), signature=SIGNATURE, kernel=kernel,
                         launch={"grid": ["cdiv(m * n, BLOCK)"], "block": ["BLOCK"]}, tunables={"BLOCK": [64, 128]},
                         folder=tmp_path / "exp")
    assert exp.tuning is not None and exp.tuning.space.tunables == {"BLOCK": [64, 128]}
    assert exp.case_specs[0].launch.let == {"BLOCK": 64}
    config = json.loads((tmp_path / "exp" / "experiment.json").read_text())
    assert config["initial_kernel"] == "scaled_sum.cu" and config["tune"]["kernel"] == "scaled_sum.cu"


@pytest.mark.parametrize("inputs, words", [
    ({"a": np.zeros((2, 2), np.float32), "m": 2, "n": 2}, "inputs[0]: b: missing"),
    ({**example(2, 2), "c": np.zeros((2, 2))}, "inputs[0]: c: an output (the reference returns it)"),
    ({**example(2, 2), "m": "two"}, "inputs[0]: m: 'two' is not a number"),
    ([example(2, 3), {**example(4, 5), "a": np.zeros((4, 5, 1), np.float32)}], "inputs: a: has a different number"),
    (3, "inputs: a value of type int is no example"),
    ([example(2, 2), None], "inputs[1]: a value of type NoneType is no example"),
    ({**example(2, 2), "a": [[1.0], [1.0, 2.0]]}, "inputs[0]: a: not an array of numbers (list: setting an array"),
    ({**example(2, 2), "b": np.full((2, 2), np.inf, np.float32)}, "inputs[0]: b: 4 NaN or infinite value(s)"),
])
def test_examples_that_do_not_fit_the_signature_are_refused(inputs, words):
    with pytest.raises(ExperimentError, match=words.replace("[", r"\[").replace("]", r"\]").replace("(", r"\(")
                       .replace(")", r"\)")):
        api.experiment(scaled_sum, inputs, signature=SIGNATURE, launch=LAUNCH)


def test_a_reference_that_cannot_be_written_alone_is_refused():
    with pytest.raises(ExperimentError, match="reference: give a function defined with def"):
        api.experiment(lambda a, b, m, n: a + b, example(2, 2), signature=SIGNATURE, launch=LAUNCH)
    weight = np.ones(3)

    def closure(a, b, m, n):
        return (a + b) * weight[0]

    with pytest.raises(ExperimentError, match="reference: closure: uses variables of an enclosing function"):
        api.experiment(closure, example(2, 2), signature=SIGNATURE, launch=LAUNCH)
    with pytest.raises(ExperimentError, match=r"reference: on inputs\[0\]: TypeError"):
        api.experiment(wrong_parameters, example(2, 2), signature=SIGNATURE, launch=LAUNCH)


def wrong_parameters(x):
    return x


@pytest.mark.parametrize("arguments, words", [
    ({"signature": None}, "signature: a value of type NoneType is no signature"),
    ({"rtol": float("nan")}, "rtol: nan is not a tolerance"),
    ({"atol": -1e-3}, "atol: -0.001 is not a tolerance"),
    ({"description": 3}, "description: a value of type int is not text"),
    ({"kernel": 3}, "kernel: a value of type int is neither a .cu file nor the kernel's source"),
    ({"kernel": "k" * 300 + ".cu"}, "kernel: 'kkkk.*longer than a file name"),
    ({"kernel": SIGNATURE + " {}", "tunables": {"BLOCK": []}}, "tunables: BLOCK: \\[\\]: give the values it takes"),
    ({"kernel": SIGNATURE + " {}", "tunables": ["BLOCK"]}, "tunables: give each tunable's name and its values"),
    ({"kernel": SIGNATURE + " {}", "tunables": {"BLOCK": [None]}}, "tunables: BLOCK\\[0\\]: None should be"),
    ({"kernel": SIGNATURE + " {}", "tunables": {"B": [1, 2]}, "restrictions": "B > 1"},
     "restrictions: give a list of conditions"),
    ({"folder": 3}, "folder: a value of type int is not a path"),
    ({"folder": "/proc/experiment"}, "folder: /proc/experiment: a system folder"),
])
def test_arguments_of_the_wrong_kind_are_refused_naming_them(arguments, words):
    with pytest.raises(ExperimentError, match=words):
        api.experiment(scaled_sum, example(2, 2), **{"signature": SIGNATURE, "launch": LAUNCH, **arguments})


def test_a_kernel_file_that_is_no_text_or_a_folder_that_is_a_file_is_refused(tmp_path):
    binary, taken = tmp_path / "k.cu", tmp_path / "taken"
    binary.write_bytes(b"\xff\xfe\x00")
    taken.write_text("a file where the folder would be")
    with pytest.raises(ExperimentError, match="k.cu: kernel: not a UTF-8 text file"):
        api.experiment(scaled_sum, example(2, 2), signature=SIGNATURE, launch=LAUNCH, kernel=binary)
    with pytest.raises(ExperimentError, match="folder: .*taken exists and is not a folder"):
        api.experiment(scaled_sum, example(2, 2), signature=SIGNATURE, launch=LAUNCH, folder=taken)


@pytest.mark.parametrize("arguments, words", [
    ({"launch": {"grid": ["q"], "block": [32]}}, "launch: grid[0]: case 'example': unknown name 'q'"),
    ({"kernel": 'extern "C" __global__ void other(int x) {}'}, "kernel: entry: no 'extern \"C\" __global__ void "
                                                                "scaled_sum(...)' found"),
])
def test_what_is_wrong_in_the_files_made_from_the_arguments_names_the_argument(arguments, words):
    """The files go to cudaopt's cache, which the caller never sees: the error names the argument,
    and no broken experiment is left there."""
    with pytest.raises(ExperimentError) as caught:
        api.experiment(scaled_sum, example(2, 3), **{"signature": SIGNATURE, "launch": LAUNCH, **arguments})
    assert str(caught.value).startswith(words), str(caught.value)
    assert "cache" not in str(caught.value)


def test_a_folder_holding_another_experiment_is_kept_unless_forced(tmp_path):
    folder = tmp_path / "exp"
    api.experiment(scaled_sum, example(2, 2), signature=SIGNATURE, launch=LAUNCH, folder=folder)
    before = (folder / "input_cases.json").read_text()
    api.experiment(scaled_sum, example(2, 2), signature=SIGNATURE, launch=LAUNCH, folder=folder)  # the same: kept
    with pytest.raises(ExperimentError, match=r"folder: .*exp already holds another experiment's input_cases.json "
                                              r"\(force=True replaces them\)"):
        api.experiment(scaled_sum, example(3, 5), signature=SIGNATURE, launch=LAUNCH, folder=folder)
    assert (folder / "input_cases.json").read_text() == before  # nothing already written is lost
    exp = api.experiment(scaled_sum, example(3, 5), signature=SIGNATURE, launch=LAUNCH, folder=folder, force=True)
    assert (folder / "input_cases.json").read_text() != before and exp.case_specs
    with pytest.raises(ExperimentError, match="folder: an empty path"):
        api.experiment(scaled_sum, example(2, 2), signature=SIGNATURE, launch=LAUNCH, folder="")


def exits(a, b, m, n):
    raise SystemExit(3)


def returns_none(a, b, m, n):
    return None


def test_a_reference_that_exits_or_returns_no_numbers_is_refused_naming_it():
    with pytest.raises(ExperimentError, match=r"reference: on inputs\[0\]: exited \(SystemExit 3\)"):
        api.experiment(exits, example(2, 2), signature=SIGNATURE, launch=LAUNCH)
    with pytest.raises(ExperimentError, match=r"reference: on inputs\[0\]: returned NoneType .* for c, not an array"):
        api.experiment(returns_none, example(2, 2), signature=SIGNATURE, launch=LAUNCH)


def bf16_sum(a, b, m, n):
    return a + b


def test_bfloat16_examples_are_read_as_numbers(tmp_path):
    torch = optional("torch")
    signature = SIGNATURE.replace("float*", "__nv_bfloat16*")
    given = {name: torch.from_numpy(v).to(torch.bfloat16) if isinstance(v, np.ndarray) else v
             for name, v in example(4, 8).items()}
    exp = api.experiment(bf16_sum, given, signature=signature, launch=LAUNCH, folder=tmp_path / "exp")
    assert exp.case_specs[0].inputs["a"].init.dist == "normal" and exp.case_specs[0].outputs["c"].shape == ["m", "n"]
