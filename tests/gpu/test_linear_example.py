"""The BF16 linear example on the GPU: the initial kernel and tuned configurations pass every case
(holdouts included) with each of the seven kernels where the launch sends it, the PyTorch vendors
check against the reference, a kernel computing in FP8 is refused before any launch and one that
drops the bias on the large cases fails them, the tune strategy and a scripted model run end to
end, and the exported operator matches F.linear + GELU within the declared tolerance."""

from __future__ import annotations

import importlib.util
import json
import time

import pytest
from typer.testing import CliRunner

from cudaopt.cli import app
from cudaopt.experiment import load_experiment
from cudaopt.record.files import History, Summary
from tests.conftest import KERNELS, ROOT
from tests.fake_openai import FakeOpenAI
from tests.gpu.conftest import FAST

pytestmark = pytest.mark.gpu
LINEAR = ROOT / "examples" / "linear_bf16"
ALL_ROLES = {"correctness", "performance", "holdout"}
runner = CliRunner(env={"COLUMNS": "200", "OPENAI_API_KEY": ""})


@pytest.fixture(scope="module")
def linear():
    return load_experiment(LINEAR / "experiment.json")


def _failures(result):
    return [(c.name, c.status, c.reason[:300]) for c in result.cases if c.status != "ok"]


def _only(request, names):
    request.cases = [c for c in request.cases if c.name in names]
    assert {c.name for c in request.cases} == set(names)
    return request


def test_the_initial_kernel_passes_every_case(supervisor, linear):
    result = supervisor.evaluate(linear.request(linear.initial_kernel_path.read_text(), roles=ALL_ROLES, protocol=FAST))
    assert result.status == "ok", _failures(result)
    assert {c.name for c in result.cases} == {c.name for c in linear.case_specs}


@pytest.mark.parametrize("which", [0, -1])
def test_tuned_configurations_pass_every_case_with_each_kernel(supervisor, linear, which):
    """The first and last configuration of the space: every case ok (holdouts too), each of the
    seven kernels reached where the launch sends it, no spills; the medians printed."""
    tuning = linear.tuning
    config = tuning.space.configurations()[which]
    request = linear.request(tuning.source, launch=tuning.launch, defines=config, roles=ALL_ROLES, protocol=FAST)
    result = supervisor.evaluate(request)
    assert result.status == "ok", (config, _failures(result))
    entries = {c.name: c.launch.entry for c in result.cases}
    assert entries["decode-m1-k4096-n4096"] == entries["decode-m8-k4096-n14336"] == "linear_gelu_bf16_stream8"
    assert entries["decode-m16-k14336-n4096"] == "linear_gelu_bf16_stream16"
    assert entries["decode-m64-k4096-n4096"] == "linear_gelu_bf16_split4"
    assert entries["split2-m40-k264-n9000"] == "linear_gelu_bf16_split2"
    assert entries["mid-m24-k136-n17000"] == "linear_gelu_bf16"
    assert entries["prefill-m512-k4096-n4096"] == entries["gemm-odd-m400-k77-n3201"] == "linear_gelu_bf16_gemm"
    assert entries["prefill-m2048-k4096-n14336"] == entries["wide-odd-m1000-k77-n8501"] == "linear_gelu_bf16_wide"
    for name, info in result.compile.entries.items():
        assert info.spill_stores == 0 and info.local_bytes == 0, (name, info)
    print(config, {c.name: round(c.timing.median_us, 2) for c in result.cases if c.timing})


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="the PyTorch vendors need torch")
def test_the_pytorch_vendors_agree_with_the_reference(supervisor, linear):
    """Eager's and torch.compile's BF16 outputs pass the declared tolerances, so both are timed."""
    names = {"odd-m3-k37-n29", "decode-m1-k4096-n4096", "decode-m64-k4096-n4096", "prefill-m512-k4096-n4096"}
    request = _only(linear.request(linear.initial_kernel_path.read_text(), protocol=FAST, vendor=True), names)
    result = supervisor.evaluate(request)
    assert result.status == "ok", _failures(result)
    for case in result.cases:
        if case.role == "performance":
            assert [(v.label, v.status) for v in case.vendors] == [("PyTorch eager", "ok"), ("torch.compile", "ok")], \
                [(v.label, v.status, v.reason[:300]) for v in case.vendors]


def test_a_kernel_computing_in_fp8_is_refused_before_any_launch(supervisor, linear):
    """The experiment's BF16 signature allows BF16 tensor cores and nothing narrower: a kernel on
    FP8 MMAs (E4M3 operands, converted in registers) is refused from its SASS, before any launch."""
    request = _only(linear.request((KERNELS / "linear_fp8.cu").read_text(), protocol=FAST),
                    {"odd-m3-k37-n29", "decode-m1-k4096-n4096"})
    result = supervisor.evaluate(request)
    assert result.status == "precision", (result.status, result.reason)
    assert "E4M3" in result.reason or "fp8" in result.reason.lower(), result.reason
    assert all(not c.checks and c.timing is None for c in result.cases)


def test_a_kernel_dropping_the_bias_on_the_large_cases_fails_them(supervisor, linear):
    """Right wherever W is small, biasless where it holds 2^24 elements or more: the small cases
    pass, every large one is a mismatch (each case's bias moves its outputs far past the tolerance)."""
    small = {"odd-m3-k37-n29", "gemm-m130-k520-n6350"}
    large = {"decode-m1-k4096-n4096", "decode-m16-k14336-n4096", "prefill-m512-k4096-n4096"}
    request = _only(linear.request((KERNELS / "linear_no_bias_when_large.cu").read_text(), protocol=FAST),
                    small | large)
    result = supervisor.evaluate(request)
    assert result.status == "mismatch", result.reason
    assert {c.name for c in result.cases if c.status == "ok"} == small
    assert {c.name for c in result.cases if c.status == "mismatch"} == large


def test_the_no_key_job_tunes_the_example_end_to_end(tmp_path, gpu_to_itself):
    """The README's command on this example: the tuner over the whole space, every attempt ok, a
    winner faster than the initial kernel; the wall time printed (target: under 90 s)."""
    start = time.perf_counter()
    result = runner.invoke(app, ["optimize", "--config", str(LINEAR / "experiment.json"), "--results-dir",
                                 str(tmp_path)])
    wall = time.perf_counter() - start
    assert result.exit_code == 0, result.output
    assert "strategy: tune (no model:" in result.output
    run = tmp_path / "run-001"
    attempts = History.model_validate_json((run / "history.json").read_text()).attempts
    summary = Summary.model_validate_json((run / "summary.json").read_text())
    assert all(a.status == "ok" for a in attempts), [(a.defines, a.status, a.reason[:200]) for a in attempts]
    assert sum(a.kind == "tune" for a in attempts) == len(load_experiment(LINEAR / "experiment.json")
                                                        .tuning.space.configurations())
    assert summary.best_attempt is not None and summary.speedup > 1
    print(result.output)
    print(f"no-key job: {wall:.1f} s")


def test_a_scripted_model_proposes_a_kernel_end_to_end(tmp_path, gpu_to_itself):
    """The agent strategy with a scripted model (a fake OpenAI server): its proposal, the tunable
    kernel with one configuration written in and its tier table, is checked and timed on the GPU
    and beats the initial kernel."""
    from tests.test_linear_example import proposal

    with FakeOpenAI([proposal()]) as server:
        result = runner.invoke(app, ["optimize", "--config", str(LINEAR / "experiment.json"), "--strategy", "agent",
                                     "--max-iterations", "1", "--base-url", server.url, "--results-dir",
                                     str(tmp_path)], env={"OPENAI_API_KEY": "sk-test", "COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    run = tmp_path / "run-001"
    baseline, first = History.model_validate_json((run / "history.json").read_text()).attempts
    assert baseline.status == "ok" and first.status == "ok", first.reason
    summary = Summary.model_validate_json((run / "summary.json").read_text())
    assert summary.best_attempt == first.id and summary.speedup > 1
    print(result.output)


def test_the_exported_op_matches_linear_and_gelu(tmp_path, linear):
    """``cudaopt export --to torch`` of a tuned configuration: on decode, prefill and odd shapes
    (and an unaligned x, which takes the element loads) the operator's output is within the
    declared tolerance of ``F.gelu(F.linear(x, W, b), approximate="tanh")`` in BF16."""
    torch = pytest.importorskip("torch")
    import torch.nn.functional as F

    from cudaopt.exporter import from_flags, write
    from cudaopt.record.bake import bake, bake_launch

    config = linear.tuning.space.configurations()[-1]
    (tmp_path / "best.cu").write_text(bake(linear.tuning.source, config))
    (tmp_path / "launch.json").write_text(json.dumps(bake_launch(linear.tuning.launch.to_data(), config)))
    src = from_flags(linear, kernel=tmp_path / "best.cu", entry=None, launch=str(tmp_path / "launch.json"),
                     unverified=True)
    (path,) = write(src, "torch", tmp_path / "ops")
    spec = importlib.util.spec_from_file_location("linear_gelu_bf16_export", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    gen = torch.Generator(device="cuda").manual_seed(0)
    for m, k, n in [(1, 4096, 4096), (8, 4096, 14336), (16, 14336, 4096), (64, 4096, 4096), (33, 1000, 300),
                    (512, 4096, 4096), (130, 520, 6350), (5, 37, 29)]:
        x = torch.randn(m, k, device="cuda", generator=gen).bfloat16()
        W = (torch.randn(n, k, device="cuda", generator=gen) / k ** 0.5).bfloat16()
        b = torch.randn(n, device="cuda", generator=gen).bfloat16()
        y = module.linear_gelu_bf16(x, W, b)
        expected = F.gelu(F.linear(x, W, b), approximate="tanh")
        err = (y.double() - expected.double()).abs() - 2 ** -6 * expected.double().abs()
        assert err.max().item() <= 0.02, (m, k, n, err.max().item())
    x = torch.randn(3 * 4096 + 1, device="cuda", generator=gen).bfloat16()[1:].view(3, 4096)  # 2-byte aligned
    W = (torch.randn(256, 4096, device="cuda", generator=gen) / 64).bfloat16()
    b = torch.randn(256, device="cuda", generator=gen).bfloat16()
    expected = F.gelu(F.linear(x, W, b), approximate="tanh")
    err = (module.linear_gelu_bf16(x, W, b).double() - expected.double()).abs() - 2 ** -6 * expected.double().abs()
    assert err.max().item() <= 0.02
