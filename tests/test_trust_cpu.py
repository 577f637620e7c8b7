"""Trust rules whose logic needs no GPU: global state in the cubin, tunable names, the launch plan,
the guard patterns."""

from __future__ import annotations

import json

import numpy as np
import pytest

from cudaopt.worker.buffers import guard_pattern
from cudaopt.compilekit.compiler import compile_kernel
from cudaopt.compilekit.cubin import inspect_cubin
from cudaopt.worker.timing import draw_plan
from cudaopt.wire.launch import tunable_clashes
from cudaopt.wire.protocol import KernelSpec, TimingProtocol
from cudaopt.wire.signature import parse_signature
from tests.conftest import SGEMM, kernel_source

SIG = parse_signature('extern "C" __global__ void matmul_f32(const float* a, const float* b, float* c, int m, int n, int k)')


def global_state(name: str):
    return compile_kernel(KernelSpec(source=kernel_source(name), entry="matmul_f32")).info


def test_the_cubin_reports_mutable_global_memory_and_device_malloc():
    assert global_state("naive.cu").global_bytes == 0
    memo = global_state("memo_multislot.cu")
    assert memo.global_bytes >= 4 * 384 * 320 * 4 and not memo.device_malloc
    assert global_state("work_on_few_launches.cu").global_bytes == 20
    assert global_state("device_malloc.cu").device_malloc


def test_constant_memory_counts_as_module_variables():
    """A kernel can write __constant__ memory through a generic address: it is restored, and counted."""
    source = '__constant__ float table[4096];\nextern "C" __global__ void k(float* c) { c[0] = table[3]; }'
    compiled = compile_kernel(KernelSpec(source=source, entry="k"))
    assert inspect_cubin(bytes(compiled.cubin.code)).global_bytes == 4 * 4096


def test_a_non_elf_blob_is_refused():
    with pytest.raises(ValueError):
        inspect_cubin(b"not an elf")


@pytest.mark.parametrize("name, why", [
    ("m", "shadows the case scalar"), ("c", "shadows the signature argument"), ("cdiv", "expression function"),
    ("float", "C keyword"), ("2x", "not a valid macro name"),
])
def test_a_tunable_may_not_rename_the_problem(name, why):
    (problem,) = tunable_clashes([name], SIG, {"m", "n", "k", "batch"})
    assert why in problem
    assert tunable_clashes(["BM", "TILE_K", "batch_tile"], SIG, {"m", "n", "k"}) == []


def test_an_experiment_tune_space_that_shadows_a_scalar_is_refused(tmp_path):
    from cudaopt.errors import ExperimentError
    from cudaopt.experiment import load_experiment

    config = json.loads((SGEMM / "experiment.json").read_text())
    for key in ("reference", "input_cases", "initial_kernel"):
        config[key] = str((SGEMM / config[key]).resolve())
    config["vendor"]["file"] = str((SGEMM / config["vendor"]["file"]).resolve())
    config["tune"]["kernel"] = str((SGEMM / config["tune"]["kernel"]).resolve())
    config["tune"]["tunables"] = {"k": [8, 16]}
    config["tune"]["restrictions"] = []  # they name the example's tunables
    config["tune"]["launch"] = {"grid": ["cdiv(n, 16)", "cdiv(m, 16)"], "block": [16, 16]}
    path = tmp_path / "experiment.json"
    path.write_text(json.dumps(config))
    with pytest.raises(ExperimentError, match=r"tune\.tunables.*shadows the case scalar 'k'"):
        load_experiment(path)


def test_a_proposal_whose_tunable_shadows_a_scalar_is_rejected(sgemm):
    from cudaopt.agent.proposal import ProposalError, parse

    answer = ("```cuda\n" + kernel_source("shadow_scalar.cu") + "```\n```json\n"
              '{"launch": {"grid": ["cdiv(n, 16)", "cdiv(m, 16)"], "block": [16, 16]}, "tunables": {"m": [16]}}\n```')
    with pytest.raises(ProposalError, match="shadows the case scalar 'm'"):
        parse(answer, sgemm.signature, sgemm.cases(), allow_tunables=True)


def test_checked_launches_are_spread_over_the_run_and_depend_on_the_seed():
    proto = TimingProtocol(warmup=10, iterations=100, checked_launches=3)
    plans = [draw_plan(seed, "square-256", proto) for seed in range(200)]
    assert all(len(p.checked) == 3 and len(set(p.checked)) == 3 for p in plans)
    assert all(0 <= i < 100 for p in plans for i in p.checked)
    positions = np.array([i for p in plans for i in p.checked])
    assert positions.min() < 5 and positions.max() > 95  # anywhere in the run, the first and last too
    assert len({p.checked for p in plans}) > 190  # not predictable across requests
    assert draw_plan(7, "square-256", proto) == draw_plan(7, "square-256", proto)  # reproducible
    assert draw_plan(7, "square-256", proto) != draw_plan(7, "rect", proto)
    assert draw_plan(7, "x", proto).launch_number(0) == 10  # warm-ups come first


@pytest.mark.parametrize("dtype, numpy_type", [("float32", np.float32), ("float64", np.float64),
                                                ("float16", np.float16)])
def test_guard_bands_of_floating_buffers_read_as_nan(dtype, numpy_type):
    pattern = guard_pattern(dtype)
    band = np.frombuffer(pattern * 64, dtype=np.uint8).view(numpy_type)
    assert np.isnan(band).all()


def test_guard_bands_of_bfloat16_read_as_nan():
    bits = np.frombuffer(guard_pattern("bfloat16") * 8, dtype=np.uint16).astype(np.uint32) << 16
    assert np.isnan(bits.view(np.float32)).all()


def test_the_guard_differs_from_the_output_poison():
    from cudaopt.wire.signature import DTYPES

    for dtype in ("float32", "float64", "float16", "bfloat16"):
        assert guard_pattern(dtype) != DTYPES[dtype].poison[:len(guard_pattern(dtype))]


class FakeGpu:
    """Just enough of worker.gpu.Gpu for the launcher: whether the context still answers."""

    def __init__(self, alive: bool):
        self.alive = alive

    def context_alive(self) -> bool:
        return self.alive


@pytest.mark.parametrize("message, alive, status, dead", [
    ("cuLaunchKernel: CUDA_ERROR_ILLEGAL_ADDRESS: an illegal memory access", True, "crashed", True),
    ("cuMemcpyDtoDAsync: CUDA_ERROR_INVALID_VALUE: invalid argument", True, "launch_error", False),
    ("cuMemsetD32Async: CUDA_ERROR_INVALID_VALUE: invalid argument", False, "crashed", True),
])
def test_every_cuda_error_becomes_an_outcome_and_a_lost_context_retires_the_worker(message, alive, status, dead):
    from cudaopt.worker.gpu import CudaCallError
    from cudaopt.worker.launcher import Launcher, is_cuda_error

    launcher = Launcher(FakeGpu(alive))
    error = CudaCallError(message)
    assert is_cuda_error(error) and not is_cuda_error(ValueError("a harness bug"))
    failure = launcher.failure(error, "launch_error")
    assert (failure.status, launcher.dead) == (status, dead)
    assert failure.reason == message


def test_a_result_that_says_nothing_about_the_kernel_is_never_cached(tmp_path):
    from cudaopt.record.cache import ResultCache
    from cudaopt.wire.results import DeviceInfo, EvalResult

    cache = ResultCache(tmp_path, DeviceInfo(name="H200"))
    request = type("R", (), {})()
    for status in ("internal_error", "crashed", "timeout"):
        cache.put(request, EvalResult(status=status))
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("name", ["num_sms", "CUDAOPT_NUM_SMS", "CUDAOPT_ANYTHING"])
def test_a_tunable_may_not_take_the_name_of_a_gpu_fact(name):
    (problem,) = tunable_clashes([name], SIG, {"m", "n", "k"})
    assert "reserved for the GPU's facts" in problem


def test_a_case_scalar_may_not_be_called_num_sms(example):
    from cudaopt.errors import ExperimentError
    from cudaopt.experiment import load_experiment

    folder, edit = example

    def rename(data):
        data["cases"][0]["scalars"]["num_sms"] = 3

    edit("input_cases.json", rename)
    with pytest.raises(ExperimentError, match=r"cases\[0\]\.scalars\.num_sms: 'num_sms' is reserved"):
        load_experiment(folder / "experiment.json")


def test_launch_expressions_may_size_the_grid_in_waves_of_the_gpus_sms(sgemm):
    from cudaopt.agent.proposal import parse

    answer = ('```cuda\nextern "C" __global__ void matmul_f32(const float* a, const float* b, float* c, int m, int n, '
              'int k) { }\n```\n```json\n{"launch": {"grid": ["min(cdiv(m * n, 256), 4 * num_sms)"], "block": [256]}}\n```')
    proposal = parse(answer, sgemm.signature, sgemm.cases(), device={"num_sms": 78})
    assert proposal.launch.grid == ["min(cdiv(m * n, 256), 4 * num_sms)"]
    from cudaopt.wire.launch import candidate_names, resolve_launch

    big = next(c for c in sgemm.cases() if c.name == "square-4096")
    assert resolve_launch(proposal.launch, candidate_names(big.scalars, {}, {"num_sms": 78})).grid == (312, 1, 1)


def test_kernels_compiled_before_the_gpu_see_the_nominal_sm_count(tmp_path, sgemm):
    from cudaopt.preflight import _compile

    source = ('#if CUDAOPT_NUM_SMS != 132\n#error "no SM count"\n#endif\n'
              'extern "C" __global__ void k(float* c) { c[0] = CUDAOPT_NUM_SMS; }')
    assert _compile(tmp_path / "k.cu", source, "k", {}, "sm_90").registers is not None


def test_a_tune_launch_may_only_name_kernels_declared_with_the_signatures_parameters(tmp_path):
    """Caught when the experiment loads: a kernel missing from the source or with other parameters."""
    from cudaopt.errors import ExperimentError
    from cudaopt.experiment import load_experiment

    config = json.loads((SGEMM / "experiment.json").read_text())
    for key in ("reference", "input_cases", "initial_kernel"):
        config[key] = str((SGEMM / config[key]).resolve())
    config["vendor"]["file"] = str((SGEMM / config["vendor"]["file"]).resolve())
    kernel = tmp_path / "two.cu"
    kernel.write_text(kernel_source("entry_other_params.cu"))
    config["tune"] = {"kernel": str(kernel), "tunables": {"B": [16]},
                      "launch": {"grid": ["cdiv(n, B)", "cdiv(m, B)"], "block": ["B", "B"]}}
    path = tmp_path / "experiment.json"
    for entry, words in (("'matmul_f32_nope' if m > 64 else 'matmul_f32'", "does not declare"),
                         ("matmul_f32_short", "takes the signature's parameters")):
        config["tune"]["launch"]["entry"] = entry
        path.write_text(json.dumps(config))
        with pytest.raises(ExperimentError, match=rf"tune\.launch\.entry.*{words}"):
            load_experiment(path)
    config["tune"]["launch"]["entry"] = "'matmul_f32' if m > 64 else matmul_f32"  # a bare name in a branch
    path.write_text(json.dumps(config))
    with pytest.raises(ExperimentError, match=r"tune\.launch"):
        load_experiment(path)


def test_a_proposal_may_only_launch_kernels_it_declares_with_the_signatures_parameters(sgemm):
    from cudaopt.agent.proposal import ProposalError, parse

    def answer(entry):
        launch = {"grid": ["cdiv(n, 16)", "cdiv(m, 16)"], "block": [16, 16], "entry": entry}
        return "```cuda\n" + kernel_source("entry_other_params.cu") + "```\n```json\n" + json.dumps({"launch": launch}) + "\n```"

    with pytest.raises(ProposalError, match="for case 'square-256'.*matmul_f32_short is declared as"):
        parse(answer("'matmul_f32_short' if m > 64 else 'matmul_f32'"), sgemm.signature, sgemm.cases())
    with pytest.raises(ProposalError, match="does not declare"):
        parse(answer("matmul_f32_hidden"), sgemm.signature, sgemm.cases())
    with pytest.raises(ProposalError, match="bad field .launch.*not a quoted kernel name"):
        parse(answer("'two words'"), sgemm.signature, sgemm.cases())
    two = "```cuda\n" + kernel_source("entry_by_shape.cu") + "```\n```json\n" + json.dumps(
        {"launch": {"grid": ["m"], "block": [128], "entry": "matmul_f32_rows"}}) + "\n```"
    assert parse(two, sgemm.signature, sgemm.cases()).launch.entry == "matmul_f32_rows"


def test_a_launch_without_an_entry_is_written_as_before():
    """Files written before launches could name a kernel read and write the same: no "entry": null."""
    from cudaopt.wire.protocol import LaunchSpec
    from cudaopt.wire.results import ResolvedLaunch

    plain = LaunchSpec(grid=["cdiv(n, 16)"], block=[16])
    assert "entry" not in plain.to_data() and "entry" not in plain.to_json()
    assert "entry" not in ResolvedLaunch(grid=(1, 1, 1), block=(16, 1, 1)).to_json()
    named = LaunchSpec(grid=[1], block=[16], entry="'a' if n > 1 else 'b'")
    assert LaunchSpec.model_validate_json(named.to_json()) == named
