"""On the GPU: the torch export of the example's tuned SGEMM and of imported KernelBench problems matches
the reference on every case (holdout included), eagerly, under torch.compile(fullgraph=True) and in a
captured CUDA graph; KernelBench's ModelNew passes its contract; the cuda target's launcher, built
with nvcc, computes the same."""

from __future__ import annotations

import ctypes
import importlib.util
import json
import shutil
import subprocess
import sys

import pytest

from cudaopt.experiment import load_experiment
from cudaopt.exporter import from_flags, write
from cudaopt.record.bake import bake, bake_launch
from cudaopt.wire import expr
from tests.conftest import ROOT, SGEMM, optional

pytestmark = pytest.mark.gpu
torch = optional("torch")

KB = ROOT / "tests" / "fixtures" / "kernelbench"
TUNED = {"BM": 128, "BN": 256, "BK": 8, "TM": 8, "TN": 16, "MINB": 1, "ST": 16, "SK": 64}  # the H200's winner


def _load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # as an import does: torch.compile looks the module up by name
    spec.loader.exec_module(module)
    return module


def _draw(spec, shape, generator):
    init = spec.init
    if init.dist == "normal":
        t = torch.randn(shape, generator=generator, device="cuda") * init.std + init.mean
    else:
        t = torch.rand(shape, generator=generator, device="cuda") * (init.high - init.low) + init.low
    return t.float()


def _inputs(case, generator):
    shapes = {name: [expr.evaluate_int(d, case.scalars) for d in spec.shape] for name, spec in case.inputs.items()}
    return {name: _draw(spec, shapes[name], generator) for name, spec in case.inputs.items()}


def _close(got, want, spec):
    torch.testing.assert_close(got, want.to(got.dtype), rtol=spec.rtol, atol=spec.atol)


@pytest.fixture(scope="module")
def sgemm(tmp_path_factory):
    """The example's tunable kernel with the H200 winner's values baked in, exported to torch."""
    tmp = tmp_path_factory.mktemp("sgemm")
    exp = load_experiment(SGEMM / "experiment.json")
    (tmp / "best.cu").write_text(bake(exp.tuning.source, TUNED))
    (tmp / "launch.json").write_text(json.dumps(bake_launch(exp.tuning.launch.to_data(), TUNED)))
    src = from_flags(exp, kernel=tmp / "best.cu", entry=None, launch=str(tmp / "launch.json"), unverified=True)
    (path,) = write(src, "torch", tmp / "out")
    return exp, src, _load(path, "gpu_export_sgemm"), tmp


def test_the_sgemm_export_matches_the_reference_on_every_case(sgemm):
    exp, _, module, _ = sgemm
    generator = torch.Generator(device="cuda").manual_seed(1)
    entries = set()
    assert {c.role for c in exp.case_specs} == {"correctness", "performance", "holdout"}
    for case in exp.case_specs:
        x = _inputs(case, generator)
        c = module.matmul_f32(x["a"], x["b"])
        _close(c, x["a"].double() @ x["b"].double(), case.outputs["c"])
        entries.add(module.launch_config(*(case.scalars[s] for s in "mnk"), module.loaded(0).num_sms)[0])
        out = torch.full_like(c, float("nan"))
        assert module.matmul_f32(x["a"], x["b"], out=out) is out  # the mutating op writes every element
        assert torch.equal(out, c)
    assert len(entries) >= 3  # several tiers, chosen by the generated launch arithmetic


def test_the_sgemm_export_under_torch_compile_and_in_a_cuda_graph(sgemm):
    _, _, module, _ = sgemm
    a, b = torch.randn(515, 1031, device="cuda"), torch.randn(1031, 261, device="cuda")
    want = (a.double() @ b.double()).float()
    compiled = torch.compile(lambda a, b: torch.relu(module.matmul_f32(a, b)) * 2, fullgraph=True)
    torch.testing.assert_close(compiled(a, b), torch.relu(want) * 2, rtol=1e-4, atol=2e-3)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):  # warm-up: loaded before the capture
        module.matmul_f32(a, b)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = module.matmul_f32(a, b)
    a.copy_(torch.randn_like(a))
    b.copy_(torch.randn_like(b))
    graph.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(captured, (a.double() @ b.double()).float(), rtol=1e-4, atol=2e-3)


def test_bad_inputs_are_clear_errors_on_the_gpu(sgemm):
    _, _, module, _ = sgemm
    a, b = torch.randn(8, 4, device="cuda"), torch.randn(5, 3, device="cuda")
    with pytest.raises(ValueError, match=r"b has shape \(5, 3\), expected \(4, 3\)"):
        module.matmul_f32(a, b)
    with pytest.raises(ValueError, match="a is not contiguous"):
        module.matmul_f32(torch.randn(4, 8, device="cuda").t(), torch.randn(4, 3, device="cuda"))
    with pytest.raises(TypeError, match="dtype torch.float16"):
        module.matmul_f32(a.half(), torch.randn(4, 3, device="cuda"))
    b = torch.randn(4, 3, device="cuda")
    with pytest.raises(ValueError, match=r"a must be a 2-D tensor of shape \(m, k\), got a 1-D tensor"):
        module.matmul_f32(a.flatten(), b)
    with pytest.raises(TypeError, match="a must be a torch.Tensor of shape \\(m, k\\), got list"):
        module.matmul_f32(a.tolist(), b)
    with pytest.raises(ValueError, match="sizes must not be negative"):
        module.matmul_f32(a, b, m=-8)
    before = torch.cuda.memory_allocated()
    with pytest.raises(ValueError, match=r"scalar m = 2147483648 does not fit its type \(int32"):
        module.matmul_f32(a, b, m=2**31)
    assert torch.cuda.memory_allocated() == before  # refused before the output was allocated
    with pytest.raises(ValueError, match="a is on cpu; the kernel takes CUDA tensors"):
        module.matmul_f32(a.cpu(), b)


def test_gradients_the_op_cannot_give_are_refused(sgemm):
    """out= with an argument that requires grad is refused as torch.matmul(out=) refuses it; without out=
    the forward runs and backward says the op has no autograd formula."""
    _, _, module, _ = sgemm
    a, b = torch.randn(8, 4, device="cuda", requires_grad=True), torch.randn(4, 3, device="cuda")
    out = torch.empty(8, 3, device="cuda")
    with pytest.raises(RuntimeError, match=r"matmul_f32\(\): functions with out=... arguments don't support "
                                           r"automatic differentiation.*\(a\)"):
        module.matmul_f32(a, b, out=out)
    with torch.no_grad():
        assert module.matmul_f32(a, b, out=out) is out
    torch.testing.assert_close(out, a.detach() @ b, rtol=1e-4, atol=1e-4)
    c = module.matmul_f32(a, b)
    torch.testing.assert_close(c.detach(), out)
    with pytest.raises(RuntimeError, match="no autograd formula"):
        c.sum().backward()


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="no nvcc")
def test_the_cuda_launcher_built_with_nvcc_computes_the_same(sgemm):
    _, src, _, tmp = sgemm
    header, source = write(src, "cuda", tmp / "cuda")
    lib = tmp / "cuda" / "libmatmul.so"
    subprocess.run(["nvcc", "-shared", "-Xcompiler", "-fPIC", "-arch=native", "-o", str(lib), str(source)], check=True)
    launcher = ctypes.CDLL(str(lib)).launch_matmul_f32
    launcher.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_int] * 3 + [ctypes.c_void_p]
    for m, n, k in [(31, 37, 29), (4096, 4096, 4096), (96, 3072, 1536), (16, 16, 16)]:
        a, b = torch.randn(m, k, device="cuda"), torch.randn(k, n, device="cuda")
        c = torch.full((m, n), float("nan"), device="cuda")
        err = launcher(a.data_ptr(), b.data_ptr(), c.data_ptr(), m, n, k, torch.cuda.current_stream().cuda_stream)
        assert err == 0
        torch.cuda.synchronize()
        torch.testing.assert_close(c, (a.double() @ b.double()).float(), rtol=1e-4, atol=2e-3)
    assert launcher(0, 0, 0, 0, 0, 0, None) != 0  # an empty problem has no launch: an error, nothing launched


# --- KernelBench ----------------------------------------------------------------------------

PROBLEMS = {"19_ReLU": "relu.cu", "76_Gemm_Add_ReLU": "gemm_add_relu.cu"}


@pytest.fixture(scope="module", params=sorted(PROBLEMS))
def problem(request, tmp_path_factory):
    from cudaopt.kernelbench.importer import import_problem

    tmp = tmp_path_factory.mktemp(request.param)
    exp = import_problem(KB / f"{request.param}.py", tmp / "exp").experiment
    src = from_flags(exp, kernel=KB / PROBLEMS[request.param], entry=None, launch=None, unverified=True)
    (op,) = write(src, "torch", tmp / "torch")
    (model_new,) = write(src, "kernelbench", tmp / "kb")
    reference = _load(exp.reference_path, f"{request.param}_reference")
    return exp, _load(op, f"{request.param}_op"), _load(model_new, f"{request.param}_model_new"), reference


def test_the_imported_problem_export_matches_the_reference_on_every_case(problem):
    exp, op, _, reference = problem
    generator = torch.Generator(device="cuda").manual_seed(2)
    sig = exp.signature
    for case in exp.case_specs:
        x = _inputs(case, generator)
        scalars = {a.name: case.scalars[a.name] for a in sig.scalars}
        args = [x[a.name] for a in sig.inputs]
        got = getattr(op, sig.name)(*args)
        want = getattr(reference, exp.reference_entry)(*args, **scalars)
        (out,) = sig.outputs
        _close(got, want, case.outputs[out.name])
        compiled = torch.compile(lambda *t: getattr(op, sig.name)(*t), fullgraph=True)
        _close(compiled(*args), want, case.outputs[out.name])


def test_the_imported_problem_export_in_a_cuda_graph(problem):
    exp, op, _, reference = problem
    case = next(c for c in exp.case_specs if c.role == "performance")
    x = _inputs(case, torch.Generator(device="cuda").manual_seed(3))
    args = [x[a.name] for a in exp.signature.inputs]
    getattr(op, exp.signature.name)(*args)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        got = getattr(op, exp.signature.name)(*args)
    for t in args:
        t.copy_(torch.randn_like(t))
    graph.replay()
    torch.cuda.synchronize()
    scalars = {a.name: case.scalars[a.name] for a in exp.signature.scalars}
    _close(got, getattr(reference, exp.reference_entry)(*args, **scalars), case.outputs[exp.signature.outputs[0].name])


def test_model_new_passes_kernelbench_s_contract(problem):
    """As KernelBench evaluates: both models built under the same seed from get_init_inputs(), on
    get_inputs() moved to the GPU, outputs within 1e-2."""
    _, _, kb, _ = problem
    init = kb.get_init_inputs()
    torch.manual_seed(42)
    model = kb.Model(*init).cuda()
    torch.manual_seed(42)
    new = kb.ModelNew(*init).cuda()
    for trial in range(3):
        torch.manual_seed(trial)
        inputs = [t.cuda() if isinstance(t, torch.Tensor) else t for t in kb.get_inputs()]
        with torch.no_grad():
            want, got = model(*inputs), new(*inputs)
        assert got.shape == want.shape and got.dtype == want.dtype
        torch.testing.assert_close(got, want, atol=1e-2, rtol=1e-2)
