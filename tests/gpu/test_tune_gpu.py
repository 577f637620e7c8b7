"""Tuning on the GPU: the example end to end, and a configuration that cannot launch."""

from __future__ import annotations

import json
import shutil

import pytest
from typer.testing import CliRunner

from cudaopt.cli import app
from cudaopt.record.files import History, Summary
from tests.conftest import KERNELS, SGEMM

pytestmark = pytest.mark.gpu
runner = CliRunner(env={"COLUMNS": "200", "OPENAI_API_KEY": ""})


def test_tune_the_example_end_to_end(tmp_path):
    result = runner.invoke(app, ["optimize", "--config", str(SGEMM / "experiment.json"), "--max-evals", "6",
                                 "--results-dir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "strategy: tune (no model:" in result.output
    run = tmp_path / "run-001"
    attempts = History.model_validate_json((run / "history.json").read_text()).attempts
    summary = Summary.model_validate_json((run / "summary.json").read_text())
    assert summary.strategy == "tune" and summary.stop_reason == "evaluation budget exhausted"
    assert sum(a.kind == "tune" for a in attempts) == 6
    assert all(a.status == "ok" for a in attempts), [(a.defines, a.status, a.reason[:100]) for a in attempts]
    assert summary.best_attempt is not None and (run / "best.cu").read_text().startswith(("// tuned", "// Shared"))
    print(result.output)


def test_a_configuration_that_needs_too_much_shared_memory_is_refused_before_any_worker(tmp_path):
    folder = tmp_path / "exp"
    shutil.copytree(SGEMM, folder)
    shutil.copy(KERNELS / "big_smem.cu", folder / "big_smem.cu")
    config = json.loads((folder / "experiment.json").read_text())
    config["tune"] = {"kernel": "big_smem.cu", "tunables": {"SMEM": [300000, 0]},
                      "launch": {"grid": ["cdiv(n, 16)", "cdiv(m, 16)"], "block": [16, 16], "shared_bytes": "SMEM"}}
    (folder / "experiment.json").write_text(json.dumps(config))
    result = runner.invoke(app, ["optimize", "--config", str(folder / "experiment.json"), "--strategy", "tune",
                                 "--results-dir", str(tmp_path / "results")])
    assert result.exit_code == 2, result.output
    assert "tune.launch.shared_bytes" in result.output and "{'SMEM': 300000}" in result.output
    assert not (tmp_path / "results" / "run-001").exists()
