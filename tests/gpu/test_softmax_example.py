"""The softmax example on the GPU: the initial kernel and tuned configurations pass every case
(holdouts included) with each of the five kernels where the launch sends it, the PyTorch vendors
check against the reference, and the tune strategy runs end to end."""

from __future__ import annotations

import importlib.util
import json

import pytest
from typer.testing import CliRunner

from cudaopt.cli import app
from cudaopt.experiment import load_experiment
from cudaopt.preflight import case_memory
from cudaopt.record.files import History, Summary
from tests.conftest import ROOT
from tests.gpu.conftest import FAST, needs_memory

pytestmark = pytest.mark.gpu
SOFTMAX = ROOT / "examples" / "softmax"
_EXAMPLE = load_experiment(SOFTMAX / "experiment.json")
# The example's KernelBench case (4096 x 393216) fits an H200, not an H100.
every_case_fits = needs_memory(max(case_memory(_EXAMPLE, case) for case in _EXAMPLE.case_specs))
ALL_ROLES = {"correctness", "performance", "holdout"}
runner = CliRunner(env={"COLUMNS": "200", "OPENAI_API_KEY": ""})


@pytest.fixture(scope="module")
def softmax():
    return _EXAMPLE


def _failures(result):
    return [(c.name, c.status, c.reason[:300]) for c in result.cases if c.status != "ok"]


@every_case_fits
def test_the_initial_kernel_passes_every_case(supervisor, softmax):
    result = supervisor.evaluate(softmax.request(softmax.initial_kernel_path.read_text(), roles=ALL_ROLES, protocol=FAST))
    assert result.status == "ok", _failures(result)
    assert {c.name for c in result.cases} == {c.name for c in softmax.case_specs}


@every_case_fits
@pytest.mark.parametrize("which", [0, -1])
def test_tuned_configurations_pass_every_case_with_each_kernel(supervisor, softmax, which):
    """The first and last configuration of the space: every case ok, and the cases reach all five
    kernels (the warp kernels for short rows, block, cluster for KernelBench's rows, online beyond)."""
    tuning = softmax.tuning
    config = tuning.space.configurations()[which]
    request = softmax.request(tuning.source, launch=tuning.launch, defines=config, roles=ALL_ROLES, protocol=FAST)
    result = supervisor.evaluate(request)
    assert result.status == "ok", (config, _failures(result))
    entries = {c.name: c.launch.entry for c in result.cases}
    assert entries["kernelbench-4096x393216"] == "softmax_rows_cluster"
    assert entries["rows32-65536x32"] == entries["rows128-32768x128"] == "softmax_rows_warp4"
    assert entries["rows-9x130"] == entries["odd-7x33"] == "softmax_rows_warp"
    assert entries["rows1024-16384x1024"] == entries["rows4096-8192x4096"] == "softmax_rows_block"
    assert entries["online-2x600001"] == "softmax_rows"
    for name in ("softmax_rows_warp", "softmax_rows_warp4", "softmax_rows_block", "softmax_rows_cluster"):
        info = result.compile.entries[name]
        assert info.spill_stores == 0 and info.local_bytes == 0, (name, info)
    big = next(c for c in result.cases if c.name == "kernelbench-4096x393216")
    print(config, {c.name: round(c.timing.median_us, 1) for c in result.cases if c.timing},
          f"KernelBench shape: {big.roofline.achieved_gbps if big.roofline else None} GB/s")


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="the PyTorch vendors need torch")
def test_the_pytorch_vendors_agree_with_the_reference(supervisor, softmax):
    request = softmax.request(softmax.initial_kernel_path.read_text(), protocol=FAST, vendor=True)
    request.cases = [c for c in request.cases if c.name in {"odd-7x33", "rows128-32768x128", "rows4096-8192x4096"}]
    result = supervisor.evaluate(request)
    assert result.status == "ok", _failures(result)
    for case in result.cases:
        if case.role == "performance":
            assert [(v.label, v.status) for v in case.vendors] == [("PyTorch eager", "ok"), ("torch.compile", "ok")], \
                [(v.label, v.status, v.reason[:300]) for v in case.vendors]


@every_case_fits
def test_tune_the_example_with_a_small_budget(tmp_path, gpu_to_itself):
    result = runner.invoke(app, ["optimize", "--config", str(SOFTMAX / "experiment.json"), "--max-evals", "3",
                                 "--results-dir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "strategy: tune (no model:" in result.output
    run = tmp_path / "run-001"
    attempts = History.model_validate_json((run / "history.json").read_text()).attempts
    summary = Summary.model_validate_json((run / "summary.json").read_text())
    assert sum(a.kind == "tune" for a in attempts) == 3
    assert all(a.status == "ok" for a in attempts), [(a.defines, a.status, a.reason[:200]) for a in attempts]
    assert summary.best_attempt is not None and summary.speedup > 1  # over the three-pass initial kernel
    print(result.output)
    print(json.dumps(summary.kernelbench.model_dump() if summary.kernelbench else None))
