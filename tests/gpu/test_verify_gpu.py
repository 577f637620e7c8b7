"""`cudaopt verify` on the GPU: a tuned winner on the holdout case, fresh seeds."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from cudaopt.cli import app
from tests.conftest import SGEMM

pytestmark = pytest.mark.gpu


def test_verify_a_tuned_winner_on_the_holdout(tmp_path):
    runner = CliRunner(env={"COLUMNS": "200", "OPENAI_API_KEY": ""})
    result = runner.invoke(app, ["optimize", "--config", str(SGEMM / "experiment.json"), "--strategy", "tune",
                                 "--max-evals", "2", "--results-dir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    run = tmp_path / "run-001"
    result = runner.invoke(app, ["verify", str(run), "--seed", "99"])
    assert result.exit_code == 0, result.output
    outcome = json.loads((run / "verify.json").read_text())
    assert outcome["passed"] and outcome["seed"] == 99
    (case,) = outcome["cases"]
    assert case["name"] == "holdout-515x261x1031" and case["input_sets_checked"] == 3
    assert "holdout: passed" in (run / "report.html").read_text()


def test_replay_a_run_beside_its_baseline(tmp_path):
    runner = CliRunner(env={"COLUMNS": "200", "OPENAI_API_KEY": ""})
    result = runner.invoke(app, ["optimize", "--config", str(SGEMM / "experiment.json"), "--strategy", "tune",
                                 "--max-evals", "2", "--results-dir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    run = tmp_path / "run-001"
    result = runner.invoke(app, ["replay", str(run), "--repeats", "2"])
    assert result.exit_code == 0, result.output
    outcome = json.loads((run / "replay.json").read_text())
    assert outcome["passed"] and outcome["environment_differences"] == []
    timed = [c for c in outcome["cases"] if c["role"] == "performance"]
    assert len(timed) == 3 and all(c["now_us"] and len(c["baseline_medians_us"]) == 2 for c in timed)
