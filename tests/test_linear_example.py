"""The BF16 linear example without a GPU: it loads and checks, its tolerances admit BF16's own
roundings (the kernel's, PyTorch's) and refuse wrong arithmetic (no bias, FP8 operands, no GELU),
every kernel of every configuration compiles to BF16 tensor-core code without spills, the launch
picks the intended kernel for each shape and covers it, and a scripted model's proposal for it
goes through the agent loop."""

from __future__ import annotations

import functools
import importlib.util
import json
import math
import random
import re

import numpy as np
import pytest

from tests.conftest import ROOT, optional

LINEAR = ROOT / "examples" / "linear_bf16"
ENTRIES = ("linear_gelu_bf16_stream8", "linear_gelu_bf16_stream16", "linear_gelu_bf16_split4",
           "linear_gelu_bf16_split2", "linear_gelu_bf16", "linear_gelu_bf16_gemm", "linear_gelu_bf16_wide")
TILES = {"linear_gelu_bf16_gemm": (128, 128), "linear_gelu_bf16_wide": (128, 256)}  # the others: 64 x 128
WGMMA_N = {"linear_gelu_bf16_gemm": 128, "linear_gelu_bf16_wide": 256}  # the others: two warpgroups of n64
SHARED_OPTIN = 232448  # bytes of shared memory a block may have on sm_90 (static and dynamic)


@functools.cache
def _experiment():
    from cudaopt.experiment import load_experiment

    return load_experiment(LINEAR / "experiment.json")


@functools.cache
def _source() -> str:
    return (LINEAR / "tunable.cu").read_text()


def _launch(m: int, n: int, k: int, config: dict, sms: int = 132):
    from cudaopt.wire.launch import candidate_names, resolve_launch

    return resolve_launch(_experiment().tuning.launch, candidate_names({"m": m, "n": n, "k": k}, config,
                                                                        {"num_sms": sms}))


def test_the_example_loads_with_bf16_arguments_both_pytorch_vendors_and_every_role():
    exp = _experiment()
    sig = exp.signature
    assert sig.name == "linear_gelu_bf16" and exp.reference_kind == "torch"
    assert [(a.name, a.dtype) for a in sig.inputs] == [("x", "bfloat16"), ("W", "bfloat16"), ("b", "bfloat16")]
    assert [(a.name, a.dtype) for a in sig.outputs] == [("y", "bfloat16")]
    assert [(v.label, v.arrays, v.returns, v.pytorch) for v in exp.vendors] == [
        ("PyTorch eager", "torch", True, "eager"), ("torch.compile", "torch", True, "compile")]
    perf = [c.scalars for c in exp.case_specs if c.role == "performance"]
    assert {s["m"] for s in perf} == {1, 8, 16, 64, 512, 2048}
    assert {(s["k"], s["n"]) for s in perf if s["m"] <= 64} >= {(4096, 4096), (4096, 14336), (14336, 4096),
                                                                (8192, 28672)}
    roles = [c.role for c in exp.case_specs]
    assert roles.count("holdout") >= 2 and roles.count("correctness") >= 10
    for case in exp.case_specs:
        assert case.outputs["y"].rtol == 2 ** -6, case.name
        if case.role != "correctness":
            assert (case.flops, case.bytes) == ("2*m*n*k", "2*(m*k + n*k + n + m*n)")
    assert len(exp.tuning.space.configurations()) == 4


def test_check_says_ready():
    from typer.testing import CliRunner

    from cudaopt.cli import app

    result = CliRunner(env={"COLUMNS": "200"}).invoke(app, ["check", "--config", str(LINEAR / "experiment.json")])
    assert result.exit_code == 0, result.output
    assert "ready" in result.output and "4 configurations" in result.output
    if importlib.util.find_spec("torch") is None:
        # the reference is read, not run, and the controls are left to the GPU worker, said so
        assert "not run: torch is not installed here" in result.output
        assert "controlled on the GPU at evaluation" in result.output
    else:
        assert "discriminate on the CPU" in result.output and "reference.py (PyTorch) ran" in result.output


# ---- tolerances -----------------------------------------------------------------------------------

def _bf16(values: np.ndarray) -> np.ndarray:
    from cudaopt.worker.inputs import from_numbers, to_numbers

    return to_numbers(from_numbers(np.asarray(values, dtype=np.float32), "bfloat16"), "bfloat16").astype(np.float64)


def _e4m3(values: np.ndarray) -> np.ndarray:
    """FP8 E4M3 rounding (to nearest, saturating at 448), as an FP8 kernel would see its operands."""
    v = np.asarray(values, dtype=np.float64)
    exponent = np.floor(np.log2(np.maximum(np.abs(v), 2.0 ** -9)))
    quantum = 2.0 ** (np.maximum(exponent, -6) - 3)
    return np.clip(np.round(v / quantum) * quantum, -448, 448)


def _gelu32(z: np.ndarray) -> np.ndarray:
    z = np.asarray(z, dtype=np.float32)
    u = np.float32(0.7978845608028654) * (z + np.float32(0.044715) * z * z * z)
    return (np.float32(0.5) * z * (np.float32(1) + np.tanh(u))).astype(np.float64)


@functools.cache
def _reference():
    spec = importlib.util.spec_from_file_location("linear_reference", LINEAR / "reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _outputs(x: np.ndarray, W: np.ndarray, b: np.ndarray) -> dict[str, np.ndarray]:
    """What the reference, the roundings a caller may make, and wrong arithmetic give (float64)."""
    torch = optional("torch")

    reference = _reference()
    tx, tW, tb = (torch.from_numpy(a.astype(np.float32)).to(torch.bfloat16) for a in (x, W, b))
    m, k = x.shape
    ref = reference.linear_gelu_bf16(tx, tW, tb, m=m, n=W.shape[0], k=k).double().numpy()
    product = x @ W.T  # exact enough: float64 sums of BF16 products
    return {
        "ref": ref,
        # a kernel: FP32 sums in its own order, the bias and GELU in FP32, rounded once
        "kernel": _bf16(_gelu32((product.astype(np.float32) + b.astype(np.float32)))),
        # PyTorch eager in BF16: the pre-activation rounded to BF16, then the GELU
        "eager": _bf16(_gelu32(_bf16(product + b))),
        # the product rounded to BF16 before the bias is added, then the GELU in FP32
        "product_rounded": _bf16(_gelu32(_bf16(product) + b)),
        "no_bias": _bf16(_gelu32(product)),
        "fp8": _bf16(_gelu32(_e4m3(x) @ _e4m3(W).T + b)),
        "no_gelu": _bf16(product + b),
    }


def _passes(out: np.ndarray, ref: np.ndarray, tol) -> bool:
    return bool((np.abs(out - ref) <= tol.atol + tol.rtol * np.abs(ref)).all())


def _case_inputs(case, rows: int | None = None, tokens: int | None = None):
    """The case's inputs as the harness draws them (CPU-sized cases), or, for the large ones, its
    distributions drawn here on ``tokens`` x k and ``rows`` x k: the slice a CPU can hold."""
    from cudaopt.worker.inputs import generate

    if rows is None:
        drawn = generate(case, _experiment().signature, 1)[0]
        return tuple(drawn[name].as_numbers().astype(np.float64).reshape(drawn[name].data.shape)
                     for name in ("x", "W", "b"))
    rng = np.random.default_rng(case.seed)
    k = case.scalars["k"]

    def draw(name, shape):
        init = case.inputs[name].init
        if init.dist == "normal":
            return _bf16(rng.normal(init.mean, init.std, size=shape))
        return _bf16(rng.uniform(init.low, init.high, size=shape))

    return draw("x", (tokens, k)), draw("W", (rows, k)), draw("b", (rows,))


def test_the_tolerances_admit_bf16_roundings_and_refuse_wrong_arithmetic():
    """On every case (the CPU-sized ones as drawn, the large ones on a slice of their rows): a
    kernel's FP32 sums, PyTorch eager's BF16 pre-activation and a product rounded to BF16 before
    the bias all pass the declared tolerances; dropping the bias, FP8 operands or a missing GELU
    fail every case."""
    checked = 0
    for case in _experiment().case_specs:
        m, n, k = (case.scalars[s] for s in "mnk")
        large = m * n * k > 5e8 or n * k > 8e6
        x, W, b = _case_inputs(case, rows=256, tokens=min(m, 64)) if large else _case_inputs(case)
        outs = _outputs(x, W, b)
        tol = case.outputs["y"]
        for name in ("kernel", "eager", "product_rounded"):
            assert _passes(outs[name], outs["ref"], tol), (case.name, name)
        for name in ("no_bias", "fp8", "no_gelu"):
            assert not _passes(outs[name], outs["ref"], tol), (case.name, name)
        checked += 1
    assert checked == len(_experiment().case_specs)


def _spread(init) -> float:
    return init.std if init.dist == "normal" else (init.high - init.low) / math.sqrt(12)


def test_each_case_declares_the_bf16_tolerances_of_its_own_scale():
    """rtol is 2^-6 everywhere; atol is 0.02 times the case's typical |x W^T| (sqrt(k) times the
    spreads of x and W: 1 for the standard draws, hundreds for the large-magnitude cases), the
    bound that a BF16 rounding of the product puts on an output; and a kernel's FP32 result is
    never more than one BF16 step from the reference (give or take 1e-6 in GELU's negative tail,
    where 0.5 z (1 + tanh(u)) cancels and FP32 evaluations of it differ by ~1e-7)."""
    for case in _experiment().case_specs:
        k = case.scalars["k"]
        scale = math.sqrt(k) * _spread(case.inputs["x"].init) * _spread(case.inputs["W"].init)
        tol = case.outputs["y"]
        assert tol.rtol == 2 ** -6 and 0.0199 * scale <= tol.atol <= 0.021 * scale, (case.name, scale, tol)
    case = next(c for c in _experiment().case_specs if c.name == "gelu-branches-m16-k2048-n512")
    outs = _outputs(*_case_inputs(case))
    step = np.spacing(np.abs(outs["ref"]).astype(np.float32)) * 2.0 ** 16  # one BF16 step at each reference value
    assert (np.abs(outs["kernel"] - outs["ref"]) <= step + 1e-6).all()


# ---- compiled code --------------------------------------------------------------------------------

def _bounds(config: dict) -> dict[str, int]:
    from cudaopt.wire.expr import evaluate_int

    found = re.findall(r'extern "C" __global__ void __launch_bounds__\(([^)]+)\)\s*(\w+)\(', _source())
    return {name: evaluate_int(bound.split(",")[0].strip(), config) for bound, name in found}


def _sass_by_function(cubin: bytes) -> dict[str, str]:
    from cudaopt.compilekit.math_units import disassemble

    sass = disassemble(cubin)
    assert sass
    parts = re.split(r"\.section\s+\.text\.(\w+),", sass)
    return {parts[i]: parts[i + 1] for i in range(1, len(parts) - 1, 2)}


def test_every_kernel_of_every_configuration_compiles_to_bf16_tensor_core_code_without_spills():
    """Each configuration's kernels, for sm_90a (what the harness targets on Hopper): no spills and no
    stack, registers within the launch bounds, no approximate transcendental units; the stream
    kernels multiply on the BF16 mma.sync (HMMA.16816.F32.BF16), reading W with 16-byte loads that
    skip L1; the tile kernels copy with cp.async and multiply on the BF16 warpgroup MMA (HGMMA) and
    no other MMA kind. For sm_90 (no wgmma) the tile kernels fall back to mma.sync with ldmatrix."""
    from cudaopt.compilekit.compiler import compile_kernel, parse_ptxas
    from cudaopt.wire.protocol import KernelSpec

    configs = _experiment().tuning.space.configurations()
    for config, arch in [*((c, "sm_90a") for c in configs), (configs[0], "sm_90")]:
        spec = KernelSpec(source=_source(), entry="linear_gelu_bf16", defines={**config, "CUDAOPT_NUM_SMS": 132})
        compiled = compile_kernel(spec, arch)
        usage = parse_ptxas(compiled.info.log)
        sass = _sass_by_function(bytes(compiled.cubin.code))
        assert set(sass) == set(ENTRIES), sorted(sass)
        for name in ENTRIES:
            used = usage[name]
            assert used["spill_stores"] == 0 and used["spill_loads"] == 0 and used["stack_bytes"] == 0, (config, name)
            assert used["registers"] * _bounds(config)[name] <= 65536, (config, name, used)
            code = sass[name]
            mma = set(re.findall(r"\b([A-Z]*MMA[A-Za-z0-9.]*)", code))
            assert not re.search(r"MUFU\.(TANH|SIN|COS)", code), name
            if "stream" in name:
                assert mma == {"HMMA.16816.F32.BF16"}, (name, mma)
                assert "LDG.E.NA.LTC256B.128.CONSTANT" in code, name
            elif arch == "sm_90a":
                assert mma == {f"HGMMA.64x{WGMMA_N.get(name, 64)}x16.F32.BF16"}, (name, mma)
                assert "LDGSTS.E.BYPASS.128" in code and "WARPGROUP.ARRIVE" in code, name
            else:
                assert mma == {"HMMA.16816.F32.BF16"}, (name, mma)
                assert "LDGSTS.E.BYPASS.128" in code and "LDSM.16.M88.4" in code, name
    info = compile_kernel(KernelSpec(source=(LINEAR / "initial.cu").read_text(), entry="linear_gelu_bf16")).info
    assert info.ok and info.spill_stores == 0


def test_the_split_kernels_are_clusters_of_their_grid_depth():
    from cudaopt.compilekit.compiler import compile_ptx
    from cudaopt.wire.protocol import KernelSpec

    ptx = compile_ptx(KernelSpec(source=_source(), entry="linear_gelu_bf16", defines={"CUDAOPT_NUM_SMS": 132}))
    for name, size in (("linear_gelu_bf16_split4", 4), ("linear_gelu_bf16_split2", 2)):
        entry = ptx[ptx.index(f".entry {name}("):]
        assert f".reqnctapercluster 1, 1, {size}" in entry[:entry.index("{")], name
    plain = ptx[ptx.index(".entry linear_gelu_bf16("):]
    assert ".reqnctapercluster" not in plain[:plain.index("{")]


def test_the_adversaries_compile_and_the_fp8_one_shows_fp8_in_its_sass():
    """The GPU tests' adversaries (tests/kernels): both compile for sm_90; the FP8 kernel's SASS
    converts to E4M3 and multiplies on no BF16 MMA, which is what a precision policy that allows
    BF16 reads and refuses."""
    from cudaopt.compilekit.compiler import compile_kernel
    from cudaopt.wire.protocol import KernelSpec
    from tests.conftest import KERNELS

    for name in ("linear_fp8.cu", "linear_no_bias_when_large.cu"):
        compiled = compile_kernel(KernelSpec(source=(KERNELS / name).read_text(), entry="linear_gelu_bf16"))
        assert compiled.info.ok, name
        if name == "linear_fp8.cu":
            (code,) = _sass_by_function(bytes(compiled.cubin.code)).values()
            assert re.search(r"F2FP\.[A-Z.]*E4M3", code)
            mma = set(re.findall(r"\b([A-Z]*MMA\.[A-Z0-9.]*)", code))
            assert mma and "HMMA.16816.F32.BF16" not in mma, mma


# ---- the launch -----------------------------------------------------------------------------------

def _shapes(count: int, seed: int) -> list[tuple[int, int, int]]:
    rng = random.Random(seed)
    edges = [1, 2, 7, 8, 9, 15, 16, 17, 63, 64, 65, 127, 128, 129, 511, 512, 2048, 4097]
    shapes = [(m, rng.choice([1, 33, 128, 4096, 14336, 28672]), rng.choice([8, 37, 4096, 14336])) for m in edges]
    shapes += [(int(math.exp(rng.uniform(0, math.log(8192)))), int(math.exp(rng.uniform(0, math.log(65536)))),
                int(math.exp(rng.uniform(0, math.log(32768))))) for _ in range(count)]
    return shapes


def test_each_shape_gets_a_kernel_whose_launch_covers_it():
    """On thousands of shapes, every configuration and GPUs of 108, 114 and 132 SMs: the launch
    names a kernel of the source within its launch bounds, its grid covers the m x n outputs (the
    stream kernels' 16 rows of W per block, the tiles' 64 or 128 tokens by 128 or 256 rows), a split
    kernel's grid depth is its cluster size, and the shared memory asked for is what the kernel
    uses and fits the GPU."""
    declared = {name: int(size) for name, size in
                re.findall(r"(\w+)\([^)]*\)\s*__cluster_dims__\(1, 1, (\d+)\);", _source())}
    seen = set()
    for config in _experiment().tuning.space.configurations():
        bounds = _bounds(config)
        for m, n, k in _shapes(2000, 11):
            for sms in (108, 114, 132):
                launch = _launch(m, n, k, config, sms)
                seen.add(launch.entry)
                assert launch.block[0] <= bounds[launch.entry] and launch.block[0] % 32 == 0
                gx, gy, gz = launch.grid
                assert gz == declared.get(launch.entry, 1), (m, n, k, launch)
                if "stream" in launch.entry:
                    assert m <= (8 if launch.entry.endswith("8") else 16) and (gx, gy) == (-(-n // 16), 1)
                    assert launch.block[0] == 32 * config["KW"] and launch.shared_bytes == 0
                else:
                    bm, bn = TILES.get(launch.entry, (64, 128))
                    assert m > 16 and (gx, gy) == (-(-m // bm), -(-n // bn)), (m, n, k, launch)
                    stages = {"linear_gelu_bf16_gemm": 5, "linear_gelu_bf16_wide": 4}.get(launch.entry, config["MS"])
                    assert launch.shared_bytes == stages * (bm + bn) * 128 + 1024  # + 1024: aligning the ring
                    assert launch.shared_bytes <= SHARED_OPTIN
    assert seen == set(ENTRIES)


def test_the_performance_shapes_take_the_kernel_meant_for_them():
    config = _experiment().tuning.space.configurations()[0]
    picked = {c.name: _launch(**c.scalars, config=config).entry for c in _experiment().case_specs}
    for name, entry in picked.items():
        m = int(re.search(r"-m(\d+)-", name).group(1))
        if m <= 8:
            assert entry == "linear_gelu_bf16_stream8", name
        elif m <= 16:
            assert entry == "linear_gelu_bf16_stream16", name
    assert picked["decode-m64-k4096-n4096"] == "linear_gelu_bf16_split4"  # 32 tiles: 4 blocks each
    assert picked["prefill-m512-k4096-n4096"] == "linear_gelu_bf16_gemm"  # 128 tiles of 128 x 128
    assert picked["prefill-m2048-k4096-n14336"] == "linear_gelu_bf16_wide"  # 896 tiles of 128 x 256
    assert {picked[c] for c in picked if c.startswith(("split", "mid", "gemm", "wide"))} == set(ENTRIES[2:])


# ---- a scripted model -----------------------------------------------------------------------------

def proposal() -> str:
    """A model's answer for the example: the tunable kernel with one configuration written in, and
    its tier table as the launch."""
    from cudaopt.record.bake import bake, bake_launch

    config = _experiment().tuning.space.configurations()[-1]
    launch = bake_launch(_experiment().tuning.launch.to_data(), config)
    return (f"Tensor cores for every shape, W streamed once for decode.\n```cuda\n{bake(_source(), config)}```\n"
            f"```json\n{json.dumps({'launch': launch, 'rationale': 'stream W into mma.sync fragments'})}\n```\n")


def test_a_scripted_model_proposes_a_kernel_for_it_end_to_end(tmp_path, monkeypatch):
    """Through the real agent loop (a fake OpenAI server, a scripted GPU): the model is shown the
    BF16 signature and the description, its proposal is accepted, and the attempt records each
    case's tier from the proposed table."""
    from cudaopt.agent.model import ModelSettings
    from cudaopt.optimize import start_or_resume
    from cudaopt.record.files import History
    from cudaopt.record.runs import Budget, ExperimentArgs
    from tests.fake_openai import FakeOpenAI
    from tests.scripted import ScriptedEvaluator

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    with FakeOpenAI([proposal()]) as server:
        settings = ModelSettings(model="openai:gpt-5-mini", base_url=server.url, max_retries=1, retry_base_s=0.01)
        evaluator = ScriptedEvaluator()
        run, summary = start_or_resume(ExperimentArgs(config=str(LINEAR / "experiment.json")), settings,
                                       Budget(max_iterations=1), tmp_path / "results", evaluator)
    first = json.dumps(server.requests[0]["messages"])
    assert "__nv_bfloat16" in first and "FP32" in first and "tanh" in first
    attempts = History.model_validate(run.read_json("history.json")).attempts
    assert [a.status for a in attempts] == ["ok", "ok"], [(a.status, a.reason[:200]) for a in attempts]
    proposed = [r for r in evaluator.requests if r.kernel and "linear_gelu_bf16_stream8" in r.kernel.source]
    assert proposed and proposed[0].launch.tiers  # the proposal, before the finalists' rounds and the audit
    assert summary.best_attempt is not None
