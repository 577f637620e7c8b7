"""`cudaopt export` without a GPU: every target from the example's tuned winner (a scripted run, then
verify) and from an imported KernelBench problem; the refusals; the generated module imports and
checks its inputs without a GPU; the cuda target compiles with nvcc."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys

import pytest

from cudaopt.agent.model import ModelSettings
from cudaopt.errors import ExperimentError
from cudaopt.exporter import files, from_flags, from_run, write
from cudaopt.wire.launch import resolve_launch
from cudaopt.wire.tiers import unknown_name
from cudaopt.optimize import Options, start_or_resume
from cudaopt.record.runs import Budget, ExperimentArgs
from cudaopt.winner.verify import verify
from tests.conftest import SGEMM, optional
from tests.scripted import ScriptedEvaluator

KB = SGEMM.parents[1] / "tests" / "fixtures" / "kernelbench"


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    """A tune run of the example (scripted GPU): its winner has baked tunables and a tiered launch."""
    tmp = tmp_path_factory.mktemp("tuned")
    folder = tmp / "exp"
    shutil.copytree(SGEMM, folder)
    run, summary = start_or_resume(ExperimentArgs(config=str(folder / "experiment.json")), ModelSettings(), Budget(),
                                   tmp / "results", ScriptedEvaluator(), Options(strategy="tune", max_evals=3))
    assert summary.best_attempt is not None
    return run.path


@pytest.fixture(scope="module")
def verified(tuned, tmp_path_factory):
    copy = tmp_path_factory.mktemp("verified") / tuned.name
    shutil.copytree(tuned, copy)
    assert verify(copy, ScriptedEvaluator(), seed=5).passed
    return copy


def _load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_an_unverified_winner_is_refused_unless_asked(tuned):
    with pytest.raises(ExperimentError, match="never verified.*--unverified"):
        from_run(tuned)
    src = from_run(tuned, unverified=True)
    assert "never verified" in src.provenance.verified


def test_a_failed_verify_is_refused(verified, tmp_path):
    copy = tmp_path / "run"
    shutil.copytree(verified, copy)
    data = json.loads((copy / "verify.json").read_text())
    data.update(passed=False, status="mismatch", reason="holdout-515x261x1031: max error 3")
    (copy / "verify.json").write_text(json.dumps(data))
    with pytest.raises(ExperimentError, match="failed verify \\(mismatch: holdout"):
        from_run(copy)


def test_the_torch_module_from_the_winner_imports_without_a_gpu_and_launches_as_recorded(verified, tmp_path):
    torch = optional("torch")

    src = from_run(verified)
    launch = json.loads((verified / "best-launch.json").read_text())
    assert {**src.launch.to_data(), "schema_version": 1} == launch
    assert unknown_name(src.launch, {"m", "n", "k", "num_sms"}) is None  # the tunables are baked in
    (path,) = write(src, "torch", tmp_path)
    text = path.read_text()
    assert "verify: passed" in text and src.provenance.lock["lock"] in text and "Scripted GPU" in text
    assert "cudaopt" not in [line.split()[1] for line in text.splitlines() if line.startswith("import ")]
    module = _load(path, "exported_sgemm")
    assert module.KERNEL_SOURCE == (verified / "best.cu").read_text()
    for m, n, k, sms in [(4096, 4096, 4096, 132), (16, 16, 16, 132), (515, 261, 1031, 132), (96, 3072, 1536, 108)]:
        names = {"m": m, "n": n, "k": k, "num_sms": sms}
        want = resolve_launch(src.launch, names)
        assert module.launch_config(m, n, k, sms) == (want.entry, want.grid, want.block, want.shared_bytes)
    assert module.shapes(3, 5, 4) == {"a": (3, 4), "b": (4, 5), "c": (3, 5)}
    a, b = torch.ones(3, 4), torch.ones(4, 5)
    with pytest.raises(ValueError, match="a is on cpu; the kernel takes CUDA tensors"):
        module.matmul_f32(a, b)
    module._DEVICE_TYPE = "cpu"  # the remaining checks, without a GPU
    with pytest.raises(TypeError, match="a has dtype torch.float64"):
        module._run(a.double(), b, torch.empty(3, 5), 3, 5, 4)
    with pytest.raises(ValueError, match=r"b has shape \(4, 5\), expected \(6, 5\) for m=3, n=5, k=6"):
        module._run(torch.ones(3, 6), b, torch.empty(3, 5), 3, 5, 6)
    with pytest.raises(ValueError, match="scalar k = 4294967296 does not fit"):
        module._run(a, b, torch.empty(3, 5), 3, 5, 2**32)
    with pytest.raises(ValueError, match="a is not contiguous"):
        module._run(torch.ones(4, 3).t(), b, torch.empty(3, 5), 3, 5, 4)
    # the fake implementation gives torch.compile the output without a GPU
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        assert torch.ops.cudaopt.matmul_f32(torch.empty(7, 2), torch.empty(2, 9), 7, 9, 2).shape == (7, 9)
    _load(path, "exported_sgemm_again")  # imported twice: no second registration


@pytest.fixture(scope="module")
def initial_op(tmp_path_factory):
    """The example's initial kernel exported to torch and imported (by name, as torch.compile needs)."""
    torch = optional("torch")
    from cudaopt.experiment import load_experiment

    src = from_flags(load_experiment(SGEMM / "experiment.json"), kernel=None, entry=None, launch=None, unverified=True)
    (path,) = write(src, "torch", tmp_path_factory.mktemp("initial_op"))
    spec = importlib.util.spec_from_file_location("exported_initial_sgemm", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    yield torch, module
    del sys.modules[spec.name]


def _bad_calls(torch):
    a, b, c = torch.ones(3, 4), torch.ones(4, 5), torch.empty(3, 5)
    return {
        "1-D input": (lambda f: f(torch.ones(4), b), ValueError,
                      r"a must be a 2-D tensor of shape \(m, k\), got a 1-D tensor of shape \(4,\)"),
        "list input": (lambda f: f([[1.0] * 4] * 3, b), TypeError, r"a must be a torch.Tensor of shape \(m, k\), got list"),
        "negative size": (lambda f: f(a, b, m=-3), ValueError,
                          r"a would have the shape \(-3, 4\) for m=-3, n=5, k=4: sizes must not be negative"),
        "size beyond int32": (lambda f: f(a, b, n=2**31), ValueError,
                              r"scalar n = 2147483648 does not fit its type \(int32: -2147483648..2147483647\)"),
        "size of any float": (lambda f: f(a, b, n=10**400), ValueError, "scalar n = 1000"),
        "fractional size": (lambda f: f(a, b, n=2.5), ValueError, r"scalar n = 2.5 does not fit"),
        "text size": (lambda f: f(a, b, k="4"), TypeError, r"scalar k must be a number \(int32\), got str"),
        "out not a tensor": (lambda f: f(a, b, out=[1]), TypeError, r"c must be a torch.Tensor of shape \(m, n\), got int"),
        "out of two": (lambda f: f(a, b, out=(c, c)), ValueError, r"out must hold 1 tensor\(s\) \(c\), got 2"),
        "out 1-D": (lambda f: f(a, b, out=c.flatten()), ValueError, "c must be a 2-D tensor"),
        "grad with out": (lambda f: f(a.clone().requires_grad_(), b, out=c), RuntimeError,
                          r"matmul_f32\(\): functions with out=... arguments don't support automatic "
                          r"differentiation, but one of the arguments requires grad \(a\)"),
        "grad into out": (lambda f: f(a, b, out=c.clone().requires_grad_()), RuntimeError, r"requires grad \(c\)"),
    }


@pytest.mark.parametrize("case", ["1-D input", "list input", "negative size", "size beyond int32", "size of any float",
                                  "fractional size", "text size", "out not a tensor", "out of two", "out 1-D",
                                  "grad with out", "grad into out"])
def test_the_exported_op_refuses_bad_arguments_naming_them_before_anything_runs(initial_op, case):
    torch, module = initial_op
    call, error, message = _bad_calls(torch)[case]
    with pytest.raises(error, match=message):
        call(module.check_arguments)
    with pytest.raises(error, match=message):  # the entry point checks first: nothing allocated, no GPU touched
        call(module.matmul_f32)


def test_the_checks_give_the_scalars_read_off_the_shapes_and_the_outputs(initial_op):
    torch, module = initial_op
    a, b, c = torch.ones(3, 4), torch.ones(4, 5), torch.empty(3, 5)
    assert module.check_arguments(a, b) == ((3, 5, 4), None)
    assert module.check_arguments(a, b, k=4, out=c)[1][0] is c
    assert module.check_arguments(a, b, out=[c])[1][0] is c
    with torch.no_grad():  # no gradient is asked: the out= call is allowed
        module.check_arguments(a.clone().requires_grad_(), b, out=c)
    with pytest.raises(ValueError, match="a is on cpu; the kernel takes CUDA tensors"):  # dtype, device, layout:
        module.matmul_f32(a, b, out=c)                                                  # before the launch
    module._DEVICE_TYPE = "cpu"
    try:
        with pytest.raises(TypeError, match="a has dtype torch.float64, the kernel takes torch.float32"):
            module.matmul_f32(a.double(), b, out=c)
        with pytest.raises(ValueError, match=r"a is not contiguous \(row-major\); pass a.contiguous\(\)"):
            module.matmul_f32(torch.ones(4, 3).t(), b, out=c)
        with pytest.raises(ValueError, match=r"a has shape \(3, 4\), expected \(3, 6\) for m=3, n=5, k=6"):
            module.matmul_f32(a, b, k=6, out=c)
    finally:
        module._DEVICE_TYPE = "cuda"


def test_the_checks_trace_under_torch_compile_fullgraph(initial_op):
    """The entry point's checks run on fake tensors as dynamo traces (static and dynamic shapes): one graph
    calling the op, no break; a 1-D input is refused there too."""
    torch, module = initial_op
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return lambda *args: (torch.zeros(3, 5),)

    a, b, c = torch.ones(3, 4), torch.ones(4, 5), torch.empty(3, 5)
    for dynamic in (False, True):
        torch.compile(lambda a, b: module.matmul_f32(a, b) + 1, fullgraph=True, backend=backend, dynamic=dynamic)(a, b)
        torch.compile(lambda a, b, c: module.matmul_f32(a, b, out=c), fullgraph=True, backend=backend,
                      dynamic=dynamic)(a, b, c)
    assert len(graphs) == 4 and "cudaopt.matmul_f32(" in graphs[0].code and "cudaopt.matmul_f32_out(" in graphs[1].code
    with pytest.raises(Exception, match="a must be a 2-D tensor"):
        torch.compile(lambda a, b: module.matmul_f32(a, b), fullgraph=True, backend=backend)(torch.ones(4), b)


def test_the_kernel_source_survives_the_python_literal(verified, tmp_path):
    from cudaopt.exporter.torch_target import _literal

    for text in ["plain", "a '''quoted''' b", "ends with \\", 'back\\slash "q" \\n', "cr\r\nlf"]:
        assert eval(_literal(text)) == text


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="no nvcc")
def test_the_cuda_target_compiles_with_nvcc(verified, tmp_path):
    header, source = write(from_run(verified), "cuda", tmp_path)
    declared = ("cudaError_t launch_matmul_f32(const float* a, const float* b, float* c, int m, int n, int k, "
                "cudaStream_t stream);")
    assert header.name == "matmul_f32.h" and declared in header.read_text()
    text = source.read_text()
    assert (verified / "best.cu").read_text().rstrip() in text and "verify: passed" in text
    assert "matmul_f32_direct" in text.split("cudaError_t launch_matmul_f32", 1)[1]  # the tiers chosen in C
    (tmp_path / "app.cu").write_text('#include "matmul_f32.h"\nint main() { return launch_matmul_f32(0, 0, 0, 0, 0, '
                                     '0, 0) == cudaErrorInvalidConfiguration ? 0 : 1; }\n')
    for file in (source, tmp_path / "app.cu"):
        done = subprocess.run(["nvcc", "-c", "-arch=sm_90", "-Werror", "all-warnings", str(file), "-o",
                               str(file.with_suffix(".o"))], capture_output=True, text=True, cwd=tmp_path)
        assert done.returncode == 0, done.stderr


def test_the_kernelbench_target_needs_an_imported_problem(verified):
    with pytest.raises(ExperimentError, match="needs an imported KernelBench problem"):
        files(from_run(verified), "kernelbench")


def test_flags_need_unverified_and_a_kernel(tmp_path):
    from cudaopt.experiment import load_experiment

    exp = load_experiment(SGEMM / "experiment.json")
    with pytest.raises(ExperimentError, match="has not passed `cudaopt verify`.*--unverified"):
        from_flags(exp, kernel=None, entry=None, launch=None)
    src = from_flags(exp, kernel=None, entry=None, launch=None, unverified=True)
    assert src.launch.grid == ["cdiv(n, 16)", "cdiv(m, 16)"] and "initial.cu" in src.provenance.origin
    with pytest.raises(ExperimentError, match="--launch: grid.0.: case 'odd-31x37x29': unknown name 'BN'"):
        from_flags(exp, kernel=SGEMM / "tunable.cu", entry=None, launch=json.dumps(
            {"grid": ["cdiv(n, BN)"], "block": [256]}), unverified=True)  # checked on every case, as every command


@pytest.fixture(scope="module")
def relu(tmp_path_factory):
    optional("torch")
    from cudaopt.kernelbench.importer import import_problem

    out = tmp_path_factory.mktemp("kb") / "relu"
    imported = import_problem(KB / "19_ReLU.py", out)
    return from_flags(imported.experiment, kernel=KB / "relu.cu", entry=None, launch=None, unverified=True)


def test_the_kernelbench_targets_of_an_imported_problem(relu, tmp_path):
    torch = optional("torch")

    made = {to: write(relu, to, tmp_path / to) for to in ("torch", "cuda", "kernelbench")}
    (model_new,) = made["kernelbench"]
    text = model_new.read_text()
    assert "class Model(nn.Module)" in text and "class ModelNew(torch.nn.Module)" in text
    assert "return kb_19_relu(x.contiguous())" in text
    module = _load(model_new, "kb_relu_model_new")
    assert module.get_init_inputs() == [] and module.get_inputs()[0].shape == (16, 16384)
    net = module.ModelNew(*module.get_init_inputs())
    with pytest.raises(ValueError, match="x is on cpu"):
        net(*module.get_inputs())
    assert module.shapes(3, 4) == {"x": (3, 4), "out": (3, 4)}
    entry, grid, block, _ = module.launch_config(16, 16384, 132)
    assert (entry, grid, block) == ("kb_19_relu", (1024, 1, 1), (256, 1, 1))
    if shutil.which("nvcc"):
        (header, source) = made["cuda"]
        done = subprocess.run(["nvcc", "-c", "-arch=sm_90", str(source), "-o", str(tmp_path / "relu.o")],
                              capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
    assert torch is not None


def test_model_new_passes_the_model_s_parameters_to_the_kernel(tmp_path):
    torch = optional("torch")

    from cudaopt.kernelbench.importer import import_problem

    exp = import_problem(KB / "76_Gemm_Add_ReLU.py", tmp_path / "exp").experiment
    src = from_flags(exp, kernel=KB / "gemm_add_relu.cu", entry=None, launch=None, unverified=True)
    (path,) = write(src, "kernelbench", tmp_path / "kb")
    text = path.read_text()
    assert ("return kb_76_gemm_add_relu(x.contiguous(), _state(self.model, 'bias'), "
            "_state(self.model, 'gemm.weight'))") in text
    module = _load(path, "kb_76_model_new")
    init = module.get_init_inputs()
    torch.manual_seed(42)
    model = module.Model(*init)
    torch.manual_seed(42)
    new = module.ModelNew(*init)
    assert torch.equal(module._state(new.model, "gemm.weight"), model.gemm.weight.detach())
    assert module.shapes(2, 3, 5) == {"x": (2, 3), "bias": (5,), "gemm_weight": (5, 3), "out": (2, 5)}


def test_model_new_passes_a_number_forward_takes_on_to_the_kernel(tmp_path):
    optional("torch")
    from cudaopt.kernelbench.importer import import_problem

    exp = import_problem(KB / "5_Scale_by_a_number.py", tmp_path / "exp").experiment
    src = from_flags(exp, kernel=KB / "scale.cu", entry=None, launch=None, unverified=True)
    (path,) = write(src, "kernelbench", tmp_path / "kb")
    text = path.read_text()
    assert "def forward(self, x, factor):" in text
    assert "return kb_5_scale_by_a_number(x.contiguous(), factor=factor)" in text
    module = _load(path, "kb_5_model_new")
    assert module.shapes(0.5, 2, 3) == {"x": (2, 3), "out": (2, 3)}


def test_existing_files_are_kept_unless_forced(relu, tmp_path):
    write(relu, "torch", tmp_path)
    with pytest.raises(ExperimentError, match="already holds kb_19_relu.py \\(--force replaces them\\)"):
        write(relu, "torch", tmp_path)
    write(relu, "torch", tmp_path, force=True)


def test_the_cli_exports_and_refuses_with_exit_2(verified, tmp_path):
    from typer.testing import CliRunner

    from cudaopt.cli import app

    runner = CliRunner()
    done = runner.invoke(app, ["export", str(verified), "--to", "torch", "--out", str(tmp_path / "t")])
    assert done.exit_code == 0, done.output
    assert (tmp_path / "t" / "matmul_f32.py").is_file() and "matmul_f32.py" in done.output
    done = runner.invoke(app, ["export", str(verified), "--to", "jax", "--out", str(tmp_path / "j")])
    assert done.exit_code == 2 and "'jax' is not one of torch, cuda, kernelbench" in done.output
    done = runner.invoke(app, ["export", "--config", str(SGEMM / "experiment.json"), "--to", "cuda", "--out",
                               str(tmp_path / "c")])
    assert done.exit_code == 2 and "--unverified" in done.output
    done = runner.invoke(app, ["export", str(verified), "--kernel", str(SGEMM / "initial.cu"), "--to", "cuda",
                               "--out", str(tmp_path / "c")])
    assert done.exit_code == 2 and "not both" in done.output
    assert sys.modules.get("cudaopt") is not None


def test_the_launch_goes_to_the_driver_with_the_computed_config_and_arguments(verified, tmp_path, monkeypatch):
    """The driver calls of the torch module, recorded: compiled and loaded once, each kernel looked
    up, then cuLaunchKernel on PyTorch's current stream with the generated launch and the arguments'
    bytes (read back through the parameter array)."""
    import ctypes
    import types

    torch = optional("torch")
    from cuda.bindings import driver

    (path,) = write(from_run(verified), "torch", tmp_path)
    module = _load(path, "exported_sgemm_driver")
    calls = []
    ok = driver.CUresult.CUDA_SUCCESS

    def record(name, result):
        def call(*args):
            calls.append((name, args))
            return result
        return call

    for name, result in {"cuInit": (ok,), "cuDeviceGet": (ok, 0), "cuDevicePrimaryCtxRetain": (ok, 77),
                         "cuCtxSetCurrent": (ok,), "cuModuleLoadData": (ok, "module")}.items():
        monkeypatch.setattr(driver, name, record(name, result))

    def launch(*args):  # the arguments' bytes, read while the parameter array is alive
        params = (ctypes.c_void_p * 6).from_address(args[-2])
        pointers = [ctypes.c_uint64.from_address(params[i]).value for i in range(3)]
        scalars = [ctypes.c_int32.from_address(params[i]).value for i in range(3, 6)]
        calls.append(("cuLaunchKernel", (*args[:-2], pointers, scalars, args[-1])))
        return (ok,)

    monkeypatch.setattr(driver, "cuLaunchKernel", launch)
    monkeypatch.setattr(driver, "cuModuleGetFunction", lambda module_, name: (ok, f"fn:{name.decode()}"))
    monkeypatch.setattr(torch.cuda, "init", lambda: None)
    monkeypatch.setattr(torch.cuda, "get_device_properties",
                        lambda index: types.SimpleNamespace(multi_processor_count=132, major=9, minor=0))
    monkeypatch.setattr(module, "_current_stream", lambda index: 4242)
    compiled = []
    monkeypatch.setattr(module, "compile_cubin", lambda arch, sms: compiled.append((arch, sms)) or b"cubin")
    module._DEVICE_TYPE = "cpu"
    a, b = torch.randn(515, 1031), torch.randn(1031, 261)
    outputs = [torch.empty(515, 261) for _ in range(2)]
    for c in outputs:
        module._run(a, b, c, 515, 261, 1031)
    assert compiled == [("sm_90a", 132)]  # once per device, arch-specific on Hopper
    launches = [args for name, args in calls if name == "cuLaunchKernel"]
    assert len(launches) == 2 and len(module._PLANS) == 1  # the second call reused the checked plan
    assert [args[-3][2] for args in launches] == [c.data_ptr() for c in outputs]  # each call's own output
    with pytest.raises(TypeError, match="c has dtype torch.float64"):  # a reused plan still checks tensors
        module._run(a, b, torch.empty(515, 261, dtype=torch.float64), 515, 261, 1031)
    module._run(a, b, outputs[0], 515, 261, 1031.0)  # an equal scalar of another type: same plan, same bytes
    module._PLANS.clear()
    module._run(a, b, outputs[0], 515, 261, 1031.0)  # planned from a whole float: passed as the int it is
    launches = [args for name, args in calls if name == "cuLaunchKernel"]
    assert len(launches) == 4 and launches[-1][-2] == [515, 261, 1031]
    c, version = outputs[1], outputs[1]._version
    assert module.matmul_f32(a, b, out=c) is c  # eager: launched directly, the write seen by autograd's counter
    assert c._version == version + 1 and len([n for n, _ in calls if n == "cuLaunchKernel"]) == 5
    func, *dims, shared, stream, pointers, scalars, extra = launches[0]
    entry, grid, block, want_shared = module.launch_config(515, 261, 1031, 132)
    assert (func, tuple(dims[:3]), tuple(dims[3:]), shared, stream, extra) == \
        (f"fn:{entry}", grid, block, want_shared, 4242, 0)
    assert scalars == [515, 261, 1031] and pointers[:2] == [a.data_ptr(), b.data_ptr()]


def test_the_torch_module_compiles_as_the_harness_does_host_macros_included(tmp_path):
    """A kernel written for nvcc (INFINITY, uint32_t, <cstdint>) passed the harness through its prelude;
    the exported module compiles it with the same prelude and headers, with NVRTC and no GPU."""
    optional("torch")
    from cudaopt.experiment import load_experiment

    kernel = tmp_path / "nvcc_style.cu"
    kernel.write_text("#include <cstdint>\n" + (SGEMM / "initial.cu").read_text() + """
extern "C" __global__ void uses_host_names(float* out) {
    uint32_t i = threadIdx.x;
    out[i] = i == 0 ? INFINITY : (float)M_PI;
}
""")
    exp = load_experiment(SGEMM / "experiment.json")
    src = from_flags(exp, kernel=kernel, entry=None, launch=None, unverified=True)
    (path,) = write(src, "torch", tmp_path / "out")
    module = _load(path, "export_nvcc_style")
    cubin = module.compile_cubin("sm_90", 132)
    assert cubin[:4] == b"\x7fELF"


def test_a_scalar_the_operator_cannot_pass_is_refused_on_one_line(relu):
    import dataclasses

    from cudaopt.wire.signature import parse_signature

    half = parse_signature('extern "C" __global__ void kb_19_relu(const float* x, float* out, int batch_size, '
                           'int dim, __half scale)')
    with pytest.raises(ExperimentError, match="scalar scale is float16: the operator passes scalars of"):
        files(dataclasses.replace(relu, signature=half), "torch")


def test_a_run_without_its_winner_s_source_is_one_line(verified, tmp_path):
    copy = tmp_path / verified.name
    shutil.copytree(verified, copy)
    (copy / "best.cu").unlink()
    with pytest.raises(ExperimentError) as refused:
        from_run(copy)
    assert refused.value.file == str(copy / "best.cu") and refused.value.message == "not found"
