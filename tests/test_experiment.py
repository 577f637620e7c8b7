"""Loading experiments: every bad input gets one line naming the file and the field."""

import json

import pytest

from cudaopt.errors import ExperimentError
from cudaopt.experiment import load_experiment
from cudaopt.reading import load_launch
from tests.conftest import SGEMM


def test_example_loads(sgemm):
    assert sgemm.signature.name == "matmul_f32"
    assert [c.role for c in sgemm.case_specs].count("performance") == 3
    assert sgemm.cases({"holdout"})[0].name.startswith("holdout")
    assert sgemm.reference_kind == "cu" and sgemm.max_iterations == 7
    assert sgemm.case_specs[0].launch.block == [16, 16]  # from the file's default launch


def test_flags_override_the_config(example, tmp_path):
    folder, _ = example
    other = tmp_path / "other.cu"
    other.write_text((folder / "initial.cu").read_text())
    exp = load_experiment(folder / "experiment.json", initial_kernel=other, description="mine", max_iterations=3)
    assert exp.initial_kernel_path == other and exp.description == "mine" and exp.max_iterations == 3


def test_seed_style_flags_without_a_config():
    sig = json.loads((SGEMM / "experiment.json").read_text())["signature"]
    exp = load_experiment(signature=sig, reference=SGEMM / "reference.cu", input_cases=SGEMM / "input_cases.json")
    assert exp.initial_kernel_path is None and len(exp.case_specs) == 6


def test_lock_changes_when_the_reference_changes(example):
    folder, _ = example
    before = load_experiment(folder / "experiment.json").lock()
    (folder / "reference.cu").write_text((folder / "reference.cu").read_text() + "\n// edited\n")
    after = load_experiment(folder / "experiment.json").lock()
    assert before.lock != after.lock and before.input_cases == after.input_cases


def expect_error(folder, field_part, message_part, **kwargs):
    with pytest.raises(ExperimentError) as err:
        load_experiment(folder / "experiment.json", **kwargs)
    text = str(err.value)
    assert field_part in text and message_part in text, text
    assert "\n" not in text
    return text


def test_missing_config_file(tmp_path):
    with pytest.raises(ExperimentError, match="config file not found"):
        load_experiment(tmp_path / "nope.json")


def test_malformed_json_names_the_line(example):
    folder, _ = example
    (folder / "input_cases.json").write_text('{"cases": [\n{"name": }]}')
    text = expect_error(folder, "input_cases.json: line 2", "not valid JSON")
    assert text.startswith(str(folder))


@pytest.mark.parametrize(
    "change,field,message",
    [
        (lambda d: d["cases"][0].update(role="fastest"), "cases[0].role", "Input should be"),
        (lambda d: d["cases"][1]["inputs"].pop("b"), "cases[1].inputs", "missing input 'b'"),
        (lambda d: d["cases"][1]["outputs"].update(d={"shape": [1]}), "cases[1].outputs.d", "not an argument"),
        (lambda d: d["cases"][2]["scalars"].pop("k"), "cases[2].scalars", "missing scalar 'k'"),
        (lambda d: d["cases"][0]["inputs"]["a"].update(shape=["m", "__import__('os')"]), "cases[0].inputs.a.shape", "unknown function"),
        (lambda d: d["cases"][0]["inputs"]["a"].update(shape=["m", "q"]), "cases[0].inputs.a.shape", "unknown name 'q'"),
        (lambda d: d["cases"][0]["inputs"]["a"]["init"].update(low=2, high=1), "cases[0].inputs.a.init", "must be below"),
        (lambda d: d["cases"][3].update(name=d["cases"][2]["name"]), "cases[3].name", "duplicate case name"),
        (lambda d: d["cases"][0]["inputs"]["a"].update(init={"file": "missing.npy"}), "cases[0].inputs.a.init.file", "not found"),
        (lambda d: (d.pop("launch"), d["cases"][0].pop("launch", None)), "cases[0].launch", "no launch configuration"),
        (lambda d: d["cases"][0]["outputs"]["c"].update(rtol=-1), "cases[0].outputs.c.rtol", "greater than or equal"),
        (lambda d: d["cases"][0]["outputs"]["c"].update(atol=float("inf")), "cases[0].outputs.c.atol", "finite"),
        (lambda d: d["cases"][0]["inputs"]["b"]["init"].update(std=float("inf")), "cases[0].inputs.b.init.std", "finite"),
        (lambda d: d["cases"][1]["scalars"].update(m=2**40), "cases[1].scalars.m", "does not fit int m"),
        (lambda d: d["cases"][1]["scalars"].update(m=2.5), "cases[1].scalars.m", "not an integer"),
        (lambda d: d["cases"][1]["scalars"].update(n=0), "cases[1].inputs.b.shape[1]", "gives 0: every dimension"),
        (lambda d: d["cases"][1].update(flops="sqrt(-1)"), "cases[1].flops", "sqrt() failed"),
        (lambda d: d["cases"][1].update(bytes="m*q"), "cases[1].bytes", "unknown name 'q'"),
        (lambda d: d["cases"][1].update(launch={"grid": [1], "block": [64, 64]}), "cases[1].launch.block", "4096 threads"),
        (lambda d: d["cases"][1].update(launch={"grid": [-1], "block": [32]}), "cases[1].launch.grid[0]", "at least 1"),
        (lambda d: d["cases"][1].update(launch={"grid": [1, 70000], "block": [32]}), "cases[1].launch.grid[1]", "above the 65535"),
    ],
)
def test_bad_input_cases_name_file_and_field(example, change, field, message):
    folder, edit = example
    edit("input_cases.json", change)
    text = expect_error(folder, field, message)
    assert "input_cases.json" in text


def test_bad_signature(example):
    folder, edit = example
    edit("experiment.json", lambda d: d.update(signature="void matmul(float* a)"))
    expect_error(folder, "signature", "expected a declaration")


def test_reference_with_another_signature(example):
    folder, _ = example
    (folder / "reference.cu").write_text('extern "C" __global__ void matmul_f32(const float* a, float* c, int n) {}')
    expect_error(folder, "reference.cu: signature", "does not match")


def test_missing_reference_file(example):
    folder, edit = example
    edit("experiment.json", lambda d: d.update(reference="gone.cu"))
    expect_error(folder, "reference", "not found")


def test_unknown_config_field(example):
    folder, edit = example
    edit("experiment.json", lambda d: d.update(max_iteration=3))
    text = expect_error(folder, "experiment.json: max_iteration", "not a known key: did you mean 'max_iterations'?")
    assert "Extra inputs" not in text


@pytest.mark.parametrize("change, field, closest", [
    (lambda d: d["roi"].update(cas="square-256"), "roi.cas", "case"),
    (lambda d: d["tune"]["launch"]["tiers"][0].update(entri="x"), "tune.launch.tiers[0].entri", "entry"),
    (lambda d: d["tune"].update(restriction=[]), "tune.restriction", "restrictions"),
    (lambda d: d.update(vendor={**d["vendor"], "lable": "x"}), "vendor.lable", "label"),
])
def test_an_unknown_key_deep_in_the_config_names_the_closest_known_one(example, change, field, closest):
    folder, edit = example
    edit("experiment.json", change)
    expect_error(folder, f"experiment.json: {field}", f"did you mean {closest!r}?")


@pytest.mark.parametrize("change, field, closest", [
    (lambda c: c["cases"][0]["inputs"]["a"].update(shapee=["m", "k"]), "cases[0].inputs.a.shapee", "shape"),
    (lambda c: c["cases"][1]["outputs"]["c"].update(rtoll=1e-3), "cases[1].outputs.c.rtoll", "rtol"),
    (lambda c: c["cases"][2].update(rol="performance"), "cases[2].rol", "role"),
    (lambda c: c["cases"][0]["inputs"]["b"]["init"].update(sdt=1), "cases[0].inputs.b.init.sdt", "std"),
    (lambda c: c.update(lauch=c["launch"]), "lauch", "launch"),
])
def test_an_unknown_key_in_the_input_cases_names_the_closest_known_one(example, change, field, closest):
    folder, edit = example
    edit("input_cases.json", change)
    expect_error(folder, f"input_cases.json: {field}", f"not a known key: did you mean {closest!r}?")


@pytest.mark.parametrize("change, field, closest", [
    (lambda c: c["cases"][0]["inputs"]["a"].update(shapee=c["cases"][0]["inputs"]["a"].pop("shape")),
     "cases[0].inputs.a.shapee", "shape"),
    (lambda c: c["cases"][1].update(rol=c["cases"][1].pop("role")), "cases[1].rol", "role"),
])
def test_a_misspelt_key_is_said_before_the_key_it_leaves_missing(example, change, field, closest):
    """A key typed wrong is also a required key left out: the line names the typo and the key it
    meant, not "Field required", and does not count the missing key as another problem."""
    folder, edit = example
    edit("input_cases.json", change)
    text = expect_error(folder, f"input_cases.json: {field}", f"not a known key: did you mean {closest!r}?")
    assert "Field required" not in text and "more problem" not in text


def test_an_unknown_key_like_no_known_one_lists_the_known_keys(example):
    folder, edit = example
    edit("input_cases.json", lambda c: c["cases"][0]["outputs"]["c"].update(zzzz=1))
    text = expect_error(folder, "cases[0].outputs.c.zzzz", "not a known key (known: ")
    assert "rtol" in text and "atol" in text


def test_the_example_runs_on_other_cases_than_its_roi_case(example, tmp_path):
    """roi.case names square-4096; cases without it are taken, and the report says which case stands in."""
    folder, _ = example
    cases = json.loads((folder / "input_cases.json").read_text())
    cases["cases"] = [c for c in cases["cases"] if c["name"] != "square-4096"]
    other = tmp_path / "other.json"
    other.write_text(json.dumps(cases))
    exp = load_experiment(folder / "experiment.json", input_cases=other)
    assert exp.roi.case == "square-4096" and "square-4096" not in [c.name for c in exp.case_specs]


def test_the_example_declares_cublas_through_cupy(sgemm):
    (vendor,) = sgemm.vendors
    assert (vendor.entry, vendor.label, vendor.arrays, vendor.allow_tf32) == ("sgemm", "cuBLAS SGEMM (cupy)", "cupy", False)
    assert (vendor.returns, vendor.pytorch) == (False, None)
    assert "cupy.matmul(a, b, out=c)" in vendor.source
    assert sgemm.request("x").vendors == []  # only requests that ask for it time the vendor
    assert sgemm.request("x", vendor=True).vendors == [vendor]
    assert sgemm.request("x", vendor=True, check=False).vendors == []  # timing the reference: no vendor


def test_vendor_defaults(example):
    folder, edit = example
    (folder / "lib.py").write_text("def matmul_f32(**arrays):\n    pass\n")
    edit("experiment.json", lambda d: d.update(vendor={"file": "lib.py"}))
    (vendor,) = load_experiment(folder / "experiment.json").vendors
    assert (vendor.entry, vendor.label, vendor.arrays, vendor.allow_tf32) == ("matmul_f32", "lib.py:matmul_f32", "cupy", False)


@pytest.mark.parametrize(
    "vendor,source,where,message",
    [
        ({"file": "gone.py", "function": "f"}, None, "experiment.json: vendor.file", "not found"),
        ({"file": "lib.cu", "function": "f"}, None, "experiment.json: vendor.file", "must be a .py file"),
        ({"function": "f"}, None, "experiment.json: vendor.file", "Field required"),
        ({"file": "lib.py", "function": "f", "arrays": "jax"}, "", "experiment.json: vendor.arrays", "'cupy' or 'torch'"),
        ({"file": "lib.py", "function": "f", "allow_tf32": "maybe"}, "", "vendor.allow_tf32", "valid boolean"),
        ({"file": "lib.py", "function": "f", "speed": 1}, "", "vendor.speed", "not a known key (known: allow_tf32, arrays"),
        ({"file": "lib.py", "function": "f"}, "def g(): pass\n", "lib.py: vendor.function", "no function named 'f'"),
        ({"file": "lib.py", "function": "f"}, "def f(:\n", "lib.py: line 1", "not valid Python"),
        ({"file": "lib.py", "function": "f"}, "def f(a, b, c):\n    pass\n", "lib.py: vendor.function",
         "f() must accept m, n, k: every signature argument is passed by name (a, b, c, m, n, k)"),
        ({"file": "lib.py", "function": "f"}, "def f(a, b, c, *, m, n, k, alpha):\n    pass\n",
         "lib.py: vendor.function", "f() requires alpha, which the signature does not have"),
    ],
)
def test_bad_vendor_section_names_file_and_field(example, vendor, source, where, message):
    folder, edit = example
    if source is not None:
        (folder / "lib.py").write_text(source)
    edit("experiment.json", lambda d: d.update(vendor=vendor))
    expect_error(folder, where, message)


def test_load_launch_from_json_or_file(tmp_path):
    spec = load_launch('{"grid": ["cdiv(n, 128)"], "block": 128}')
    assert spec.grid == ["cdiv(n, 128)"] and spec.block == [128] and spec.shared_bytes == 0
    path = tmp_path / "launch.json"
    path.write_text('{"grid": [1], "block": [1], "shared": 4}')
    with pytest.raises(ExperimentError, match="launch.json: shared"):
        load_launch(str(path))


def test_an_npy_input_of_the_wrong_shape_or_not_npy_is_named(example):
    import numpy as np

    folder, edit = example
    np.save(folder / "a.npy", np.zeros((3, 3), np.float32))
    (folder / "b.npy").write_text("not an array")
    edit("input_cases.json", lambda d: d["cases"][0]["inputs"]["a"].update(init={"file": "a.npy"}))
    expect_error(folder, "cases[0].inputs.a.init.file", "a.npy has shape [3, 3], the case says [31, 29]")
    edit("input_cases.json", lambda d: d["cases"][0]["inputs"]["a"].update(init={"file": "b.npy"}))
    expect_error(folder, "cases[0].inputs.a.init.file", "b.npy is not a .npy array")


def test_an_initial_kernel_with_another_entry_or_signature_is_refused_at_load(example):
    folder, _ = example
    source = (folder / "initial.cu").read_text()
    (folder / "initial.cu").write_text(source.replace("matmul_f32", "sgemm"))
    expect_error(folder, "initial.cu: entry", "no 'extern \"C\" __global__ void matmul_f32(...)' found")
    (folder / "initial.cu").write_text(source.replace("int k", "float k"))
    expect_error(folder, "initial.cu: signature", "does not match")


def test_binary_sources_are_bad_input_naming_the_file(example):
    folder, _ = example
    (folder / "initial.cu").write_bytes(b"\xff\xfe\x00binary")
    expect_error(folder, "initial.cu: initial_kernel", "not a UTF-8 text file")


@pytest.mark.parametrize("source, field, message", [
    ("def matmul_f32(a, b, *, m, n, k)\n    return a @ b\n", "reference.py: line 1", "not valid Python"),
    ("def other(a, b, m, n, k):\n    return a @ b\n", "reference_entry", "no function named 'matmul_f32'"),
    ("def matmul_f32(a, b):\n    return a @ b\n", "reference_entry", "must accept m, n, k"),
])
def test_a_numpy_reference_is_checked_at_load(example, source, field, message):
    folder, edit = example
    (folder / "reference.py").write_text(source)
    edit("experiment.json", lambda d: d.update(reference="reference.py"))
    expect_error(folder, field, message)
