"""The precision policy (``limits.precision``) held to the compiled code before any launch: declared or
defaulted from the signature, refused by ``cudaopt check``, by the worker (the runner over the fake
device, with kernels NVRTC compiles) and by ``cudaopt evaluate``, declared by KernelBench imports, and
shown where a kernel's figures are. No GPU needed."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from typer.testing import CliRunner

from cudaopt.cli import app
from cudaopt.compilekit import math_units
from cudaopt.worker.runner import Runner
from cudaopt.wire.precision import allowed_math, math_text, policy_text
from cudaopt.wire.protocol import (
    CaseSpec,
    EvalRequest,
    InitSpec,
    InputSpec,
    KernelSpec,
    LaunchSpec,
    Limits,
    OutputSpec,
    ReferenceSpec,
    TimingProtocol,
)
from cudaopt.wire.results import CompileInfo, MathUse
from cudaopt.wire.signature import parse_signature
from tests.conftest import KERNELS, ROOT, SGEMM, kernel_source
from tests.fake_device import FakeDevice

runner = CliRunner(env={"COLUMNS": "240"})
BF16 = ROOT / "tests" / "fixtures" / "bf16_matmul"
SGEMM_SIGNATURE = 'extern "C" __global__ void matmul_f32(const float* a, const float* b, float* c, int m, int n, int k)'
TF32_KERNELS = ["sgemm_3xtf32.cu", "sgemm_tf32_large_n.cu"]
REFUSED_TF32 = ("the kernel uses math outside the precision policy: HMMA.1688.F32.TF32 in matmul_f32 (tf32). "
                'limits.precision allows [] (the default for a signature of float32 pointers); "tf32" would allow it')


def one_line(output: str) -> str:
    lines = [line for line in output.splitlines() if line.strip()]
    assert len(lines) == 1, output
    return lines[0]


# --- the policy ----------------------------------------------------------------------------


@pytest.mark.parametrize(("pointers", "expected"), [
    ("const float* a, float* c", set()),
    ("const double* a, double* c", set()),
    ("const __half* a, float* c", {"fp16"}),
    ("const __nv_bfloat16* a, __nv_bfloat16* c", {"bf16"}),
    ("const int8_t* a, int* c", {"int8"}),
    ("const unsigned char* a, float* c", {"int8"}),
    ("const __half* a, const __nv_bfloat16* b, float* c", {"fp16", "bf16"}),
])
def test_without_a_declared_list_the_pointer_types_decide(pointers, expected):
    signature = parse_signature(f'extern "C" __global__ void f({pointers}, int n)')
    assert allowed_math(Limits(), signature) == expected


def test_allow_tf32_adds_tf32_and_a_declared_list_replaces_the_default():
    half = parse_signature('extern "C" __global__ void f(const __half* a, float* c, int n)')
    assert allowed_math(Limits(allow_tf32=True), half) == {"fp16", "tf32"}
    assert allowed_math(Limits(precision=[]), half) == set()  # stricter than the data
    assert allowed_math(Limits(precision=["bf16", "approx"]), half) == {"bf16", "approx"}
    assert allowed_math(Limits(precision=["bf16"], allow_tf32=True), half) == {"bf16", "tf32"}
    assert policy_text(Limits(), half) == 'limits.precision allows ["fp16"] (the default for a signature of float16, ' \
                                          'float32 pointers)'
    assert policy_text(Limits(precision=["tf32"]), half) == 'limits.precision allows ["tf32"] (as the experiment ' \
                                                            'declares)'


@pytest.mark.parametrize(("precision", "field", "message"), [
    (["tf32", "fp4"], "limits.precision[1]", "Input should be 'tf32', 'fp16', 'bf16', 'int8', 'fp8' or 'approx'"),
    ("tf32", "limits.precision", "Input should be a valid list"),
    (["fp16", "fp16"], "limits.precision", "'fp16' is given more than once"),
])
def test_a_bad_policy_is_one_line_naming_the_file_the_field_and_the_names(example, precision, field, message):
    folder, edit = example
    edit("experiment.json", lambda data: data["limits"].update(precision=precision))
    result = runner.invoke(app, ["check", "--config", str(folder / "experiment.json"), "--arch", "sm_90"])
    assert result.exit_code == 2, result.output
    assert one_line(result.output) == f"error: {folder / 'experiment.json'}: {field}: {message}"


# --- cudaopt check -------------------------------------------------------------------------


@pytest.mark.parametrize("name", TF32_KERNELS)
def test_check_refuses_tensor_core_sgemms_on_the_fp32_example_on_one_line_exit_2(name):
    """The 3xTF32 kernel passes FP32 tolerances and the size-switching one uses TF32 only above
    n = 128: both are refused from their SASS alone, before any GPU."""
    result = runner.invoke(app, ["check", "--config", str(SGEMM / "experiment.json"), "--kernel", str(KERNELS / name),
                                 "--arch", "sm_90"])
    assert result.exit_code == 2, result.output
    assert one_line(result.output) == f"error: {KERNELS / name}: limits.precision: {REFUSED_TF32}"


def test_check_accepts_3xtf32_where_the_experiment_allows_tf32_and_says_what_it_uses(example):
    folder, edit = example
    edit("experiment.json", lambda data: data["limits"].update(precision=["tf32"]))
    result = runner.invoke(app, ["check", "--config", str(folder / "experiment.json"), "--kernel",
                                 str(KERNELS / "sgemm_3xtf32.cu"), "--arch", "sm_90"])
    assert result.exit_code == 0, result.output
    assert "sgemm_3xtf32.cu compiles for sm_90" in result.output and "math: TF32 tensor cores (HMMA), FP32" in \
        result.output
    plain = runner.invoke(app, ["check", "--config", str(SGEMM / "experiment.json"), "--arch", "sm_90"])
    assert plain.exit_code == 0, plain.output
    assert "initial.cu compiles for sm_90: 32 registers, 0 B spilled; math: FP32 CUDA cores" in plain.output
    assert "the first compiles; a workspace of 8388608 bytes, poisoned before every launch; math: FP32 CUDA cores" \
        in " ".join(plain.output.split())


def test_a_bf16_experiment_accepts_bf16_tensor_cores_and_refuses_fp8(tmp_path):
    ok = runner.invoke(app, ["check", "--config", str(BF16 / "experiment.json"), "--kernel",
                             str(KERNELS / "matmul_bf16_mma.cu"), "--arch", "sm_90"])
    assert ok.exit_code == 0, ok.output
    assert "math: BF16 tensor cores (HMMA)" in ok.output
    fp8 = runner.invoke(app, ["check", "--config", str(BF16 / "experiment.json"), "--kernel",
                              str(KERNELS / "matmul_fp8_mma.cu"), "--arch", "sm_90"])
    assert fp8.exit_code == 2, fp8.output
    line = one_line(fp8.output)
    assert line.startswith(f"error: {KERNELS / 'matmul_fp8_mma.cu'}: limits.precision: the kernel uses math outside "
                           "the precision policy: HMMA.16816.F32 in matmul_bf16 (fp16); F2FP."), line
    assert line.endswith('limits.precision allows ["bf16"] (the default for a signature of bfloat16, float32 '
                         'pointers); ["fp16", "fp8"] would allow it'), line
    for name in ("experiment.json", "input_cases.json", "reference.py"):
        shutil.copy(BF16 / name, tmp_path / name)
    config = json.loads((tmp_path / "experiment.json").read_text())
    (tmp_path / "experiment.json").write_text(json.dumps({**config, "limits": {"precision": []}}))
    strict = runner.invoke(app, ["check", "--config", str(tmp_path / "experiment.json"), "--kernel",
                                 str(KERNELS / "matmul_bf16_mma.cu"), "--arch", "sm_90"])
    assert strict.exit_code == 2 and "HMMA.16816.F32.BF16 in matmul_bf16 (bf16)" in strict.output, strict.output


def test_fast_math_options_are_approx_math():
    from cudaopt.compilekit.compiler import compile_kernel

    signature = parse_signature(SGEMM_SIGNATURE)
    info = compile_kernel(KernelSpec(source=(SGEMM / "initial.cu").read_text(), entry="matmul_f32",
                                     fast_math=True)).info
    assert math_units.precision_refusal(info, Limits(), signature) == (
        "uses math outside the precision policy: compile option --use_fast_math (approx). limits.precision allows [] "
        '(the default for a signature of float32 pointers); "approx" would allow it')
    assert math_units.precision_refusal(info, Limits(precision=["approx"]), signature) is None


def test_without_nvdisasm_check_refuses_rather_than_passes(monkeypatch):
    monkeypatch.setattr(math_units, "find_tool", lambda name: None)
    result = runner.invoke(app, ["check", "--config", str(SGEMM / "experiment.json"), "--arch", "sm_90"])
    assert result.exit_code == 2, result.output
    assert "the kernel cannot be held to the precision policy: its math units could not be read from the compiled " \
           "code (nvdisasm was not found" in " ".join(result.output.split())


# --- the worker ----------------------------------------------------------------------------


def matmul(dev, launch, a, b, c, m, n, k):
    """The honest product, in float64, for the fake device."""
    m, n, k = int(m), int(n), int(k)
    av = dev.view(a, np.float32, m * k).reshape(m, k).astype(np.float64)
    bv = dev.view(b, np.float32, k * n).reshape(k, n).astype(np.float64)
    dev.view(c, np.float32, m * n)[:] = (av @ bv).astype(np.float32).reshape(-1)


REFERENCE = "import numpy as np\n\n\ndef matmul_f32(a, b, m, n, k):\n    return a.astype(np.float64) @ b.astype(np.float64)\n"


def sgemm_request(source: str, limits: Limits | None = None) -> EvalRequest:
    shape = {"m": 33, "n": 160, "k": 24}  # n > 128: the size-switching kernel's TF32 side
    case = CaseSpec(name="c", role="performance", seed=5, scalars=shape,
                    inputs={"a": InputSpec(shape=["m", "k"], init=InitSpec(dist="uniform", low=-1, high=1)),
                            "b": InputSpec(shape=["k", "n"], init=InitSpec(dist="uniform", low=-1, high=1))},
                    outputs={"c": OutputSpec(shape=["m", "n"], rtol=1e-4, atol=1e-4)},
                    launch=LaunchSpec(grid=["cdiv(n, 8)", "cdiv(m, 16)"], block=[32]))
    return EvalRequest(signature=SGEMM_SIGNATURE, kernel=KernelSpec(source=source, entry="matmul_f32"), cases=[case],
                       protocol=TimingProtocol(warmup=1, iterations=4, chunk=2, checked_launches=1, seed=3),
                       reference=ReferenceSpec(kind="py", source=REFERENCE, entry="matmul_f32", path="reference.py"),
                       limits=limits or Limits())


@pytest.mark.parametrize("name", TF32_KERNELS)
def test_the_worker_refuses_tf32_before_any_launch(name):
    device = FakeDevice()
    kernel = device.kernel("matmul_f32", matmul, [8, 8, 8, 4, 4, 4])
    result = Runner(device).evaluate(sgemm_request(kernel_source(name)))
    assert result.status == "precision" and result.reason == REFUSED_TF32
    assert kernel.launches == 0 and result.cases == []
    assert result.compile.math["tf32"].opcodes == {"HMMA": result.compile.math["tf32"].count}


def test_the_worker_runs_3xtf32_where_the_experiment_allows_tf32():
    device = FakeDevice()
    kernel = device.kernel("matmul_f32", matmul, [8, 8, 8, 4, 4, 4])
    result = Runner(device).evaluate(sgemm_request(kernel_source("sgemm_3xtf32.cu"), Limits(precision=["tf32"])))
    assert result.status == "ok", result.reason
    assert kernel.launches > 0 and math_text(result.compile) == "TF32 tensor cores (HMMA), FP32"


def test_the_worker_refuses_a_kernel_whose_math_it_cannot_read(monkeypatch):
    monkeypatch.setattr(math_units, "find_tool", lambda name: None)
    device = FakeDevice()
    kernel = device.kernel("matmul_f32", matmul, [8, 8, 8, 4, 4, 4])
    result = Runner(device).evaluate(sgemm_request((SGEMM / "initial.cu").read_text()))
    assert result.status == "precision" and kernel.launches == 0
    assert result.reason == ("the kernel cannot be held to the precision policy: its math units could not be read "
                             "from the compiled code (nvdisasm was not found: pip install nvidia-cuda-nvdisasm, a "
                             "dependency of cudaopt)")


def test_the_trusted_reference_timed_on_its_own_is_not_held_to_the_policy():
    """A request that does not check (the .cu reference timed for the speed-up column) runs."""
    device = FakeDevice()
    device.kernel("matmul_f32", matmul, [8, 8, 8, 4, 4, 4])
    request = sgemm_request(kernel_source("sgemm_3xtf32.cu"))
    request.check = False
    assert Runner(device).evaluate(request).status == "ok"


# --- cudaopt evaluate ----------------------------------------------------------------------


def test_evaluate_exits_2_on_one_line_when_the_worker_refuses_the_precision(tmp_path, monkeypatch):
    from cudaopt.pool import pools
    from tests.scripted import ScriptedEvaluator, kernel

    monkeypatch.setattr(pools, "open_pool", lambda devices, ray=None, log_dir=None: ScriptedEvaluator())
    path = tmp_path / "tf32.cu"
    path.write_text(kernel("precision"))
    out = tmp_path / "result.json"
    result = runner.invoke(app, ["evaluate", "--config", str(SGEMM / "experiment.json"), "--kernel", str(path),
                                 "--json", str(out)])
    assert result.exit_code == 2, result.output
    assert one_line(result.output) == f"error: {path}: limits.precision: {REFUSED_TF32}"
    assert json.loads(out.read_text())["candidate"]["status"] == "precision"  # what the worker said is kept


def test_evaluate_says_which_math_units_the_kernel_uses():
    from cudaopt.cli.render_experiments import evaluation_table
    from cudaopt.evaluate import Evaluation
    from cudaopt.wire.results import EvalResult

    info = CompileInfo(ok=True, log="", math={"bf16": MathUse(count=4, opcodes={"HMMA": 4}, example="HMMA", function="k"),
                                              "fp32": MathUse(count=9, opcodes={"FADD": 9}, example="FADD", function="k")})
    table = evaluation_table(Evaluation(candidate=EvalResult(status="ok", compile=info)))
    assert table.caption == "math: BF16 tensor cores (HMMA), FP32"


# --- what is shown -------------------------------------------------------------------------


def use(*opcodes: str) -> MathUse:
    return MathUse(count=len(opcodes), opcodes={op: 1 for op in opcodes}, example=opcodes[0], function="k")


@pytest.mark.parametrize(("math", "fast", "text"), [
    ({"fp32": use("FFMA")}, [], "FP32 CUDA cores"),
    ({"fp32": use("FFMA"), "bf16": use("HMMA")}, [], "BF16 tensor cores (HMMA), FP32"),
    ({"fp16": use("HADD2", "F2FP"), "fp32": use("FADD")}, [], "FP16 (F2FP, HADD2), FP32"),
    ({"approx": use("MUFU.SIN"), "fp32": use("FMUL")}, ["--use_fast_math"],
     "approximate (MUFU.SIN), FP32, fast-math options (--use_fast_math)"),
    ({"fp64": use("DMMA", "DFMA")}, [], "FP64 tensor cores (DMMA)"),
    ({}, [], "no floating-point math"),
])
def test_the_math_units_in_words(math, fast, text):
    assert math_text(CompileInfo(ok=True, log="", math=math, fast_math=fast)) == text


def test_unread_math_is_said_so():
    assert math_text(CompileInfo(ok=True, log="", math_error="nvdisasm was not found")) == \
        "not read (nvdisasm was not found)"
    assert math_text(None) == "not read"


def test_summary_json_and_the_optimize_lines_name_the_winners_math_units():
    from cudaopt.cli.render_experiments import summary_lines
    from cudaopt.engine.summary import RunFacts, summarise
    from tests.test_engine import CASES, attempt

    best = attempt(1, 2, 5)
    best.compile = CompileInfo(ok=True, log="", math={"fp32": use("FFMA")})
    facts = RunFacts(run="run-001", strategy="tune", description="d", signature="s", cases=CASES)
    summary = summarise(facts, [attempt(0, 40, 10, kind="baseline"), best], [])
    assert summary.best_attempt == 1 and summary.best_math == "FP32 CUDA cores"
    assert "best math: FP32 CUDA cores" in summary_lines(summary)


def test_the_model_is_told_the_policy_and_what_to_do_when_refused():
    from cudaopt.agent import prompts
    from cudaopt.record.files import Attempt

    strict = prompts.system_prompt(SGEMM_SIGNATURE, [], limits=Limits())
    assert "- Precision: FP32, FP64 and integer arithmetic, and beyond them nothing." in strict
    bf16 = prompts.system_prompt('extern "C" __global__ void f(const __nv_bfloat16* a, float* c, int n)', [])
    assert "beyond them BF16 (bfloat16 tensor-core MMAs" in bf16
    refused = Attempt(id=3, parent=0, kind="proposal", status="precision", reason=REFUSED_TF32,
                      compile=CompileInfo(ok=True, log="", registers=40), started_at="t", finished_at="t")
    text = prompts.attempt_text(refused, None, None)
    assert "HMMA.1688.F32.TF32 in matmul_f32 (tf32)" in text and "Nothing was launched" in text


# --- KernelBench -----------------------------------------------------------------------------


HALF_RELU = '''import torch
import torch.nn as nn


class Model(nn.Module):
    """ReLU on half-precision activations."""
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)


batch_size = 4
dim = 256


def get_inputs():
    return [torch.randn(batch_size, dim).half()]


def get_init_inputs():
    return []
'''


def kernelbench_matmul(source: str) -> str:
    """An SGEMM kernel of tests/kernels as the entry of KernelBench's square matrix product."""
    body = source.replace('extern "C" __global__ void matmul_f32(', "__device__ __forceinline__ void matmul_body(")
    return body + ('\nextern "C" __global__ void kb_1_square_matrix_multiplication(const float* A, const float* B, '
                   "float* out, int N)\n{\n    matmul_body(A, B, out, N, N, N);\n}\n")


def test_kernelbench_imports_declare_the_policy_of_their_tensor_types(tmp_path):
    pytest.importorskip("torch")
    fixtures = ROOT / "tests" / "fixtures" / "kernelbench"
    half = tmp_path / "relu_half.py"
    half.write_text(HALF_RELU)
    done = {}
    for problem in (fixtures / "1_Square_matrix_multiplication_.py", half):
        out = tmp_path / problem.stem
        result = runner.invoke(app, ["import", "kernelbench", str(problem), "--out", str(out)])
        assert result.exit_code == 0, result.output
        done[problem.stem] = out
    config = json.loads((done["1_Square_matrix_multiplication_"] / "experiment.json").read_text())
    assert config["limits"] == {"precision": []}  # FP32: strict, and said so in the file
    assert json.loads((done["relu_half"] / "experiment.json").read_text())["limits"] == {"precision": ["fp16"]}
    for name in TF32_KERNELS:
        kernel = tmp_path / f"kb_{name}"
        kernel.write_text(kernelbench_matmul(kernel_source(name)))
        result = runner.invoke(app, ["check", "--config", str(done["1_Square_matrix_multiplication_"] /
                                                               "experiment.json"),
                                     "--kernel", str(kernel), "--arch", "sm_90"])
        assert result.exit_code == 2, result.output
        assert "HMMA.1688.F32.TF32 in kb_1_square_matrix_multiplication (tf32)" in result.output
        assert 'limits.precision allows [] (as the experiment declares); "tf32" would allow it' in result.output
