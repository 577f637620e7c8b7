"""`cudaopt optimize` without a model: it says exactly what to set and exits non-zero."""

import pytest
from typer.testing import CliRunner

from cudaopt.cli import app
from tests.conftest import SGEMM, gpu_present

runner = CliRunner(env={"COLUMNS": "200"})


def test_missing_credentials_say_what_to_set(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    result = runner.invoke(app, ["optimize", "--config", str(SGEMM / "experiment.json"), "--strategy", "agent"])
    assert result.exit_code == 2
    assert "model openai:gpt-5-mini needs OPENAI_API_KEY: export OPENAI_API_KEY=..." in result.output


@pytest.mark.skipif(gpu_present(), reason="needs a machine without a GPU")
def test_auto_without_credentials_tunes_and_says_why(monkeypatch, tmp_path):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    result = runner.invoke(app, ["optimize", "--config", str(SGEMM / "experiment.json"),
                                 "--results-dir", str(tmp_path)])
    assert "strategy: tune (no model: model openai:gpt-5-mini needs OPENAI_API_KEY" in result.output
    assert result.exit_code == 3  # no GPU here; on a GPU machine it tunes


def test_missing_provider_package_is_named(monkeypatch):
    result = runner.invoke(app, ["optimize", "--config", str(SGEMM / "experiment.json"),
                                 "--model", "someprovider:some-model", "--strategy", "agent"])
    assert result.exit_code == 2
    assert "pip install langchain-someprovider" in result.output


def test_bad_experiment_is_one_line_before_anything_starts(monkeypatch, tmp_path):
    monkeypatch.setenv("OPENAI_API_KEY", "x")
    result = runner.invoke(app, ["optimize", "--config", str(tmp_path / "missing.json")])
    assert result.exit_code == 2
    assert result.output.strip() == f"error: {tmp_path / 'missing.json'}: config file not found"


def test_resume_of_something_that_is_not_a_run(monkeypatch, tmp_path):
    monkeypatch.setenv("OPENAI_API_KEY", "x")
    result = runner.invoke(app, ["optimize", "--resume", str(tmp_path)])
    assert result.exit_code == 2
    assert "is not a run directory (no history.json)" in result.output


def test_help_lists_the_budget_flags():
    result = runner.invoke(app, ["optimize", "--help"])
    for flag in ("--max-iterations", "--model", "--reasoning-effort", "--base-url", "--results-dir",
                 "--max-model-calls", "--max-cost-usd", "--time-limit", "--resume"):
        assert flag in result.output


@pytest.mark.skipif(gpu_present(), reason="needs a machine without a GPU")
def test_no_gpu_leaves_no_run_directory(monkeypatch, tmp_path):
    monkeypatch.setenv("OPENAI_API_KEY", "x")
    result = runner.invoke(app, ["optimize", "--config", str(SGEMM / "experiment.json"),
                                 "--results-dir", str(tmp_path / "results")])
    assert result.exit_code == 3 and "did not start" in result.output
    assert not (tmp_path / "results").exists() or not any((tmp_path / "results").iterdir())


def test_verify_of_something_that_is_not_a_run(tmp_path):
    result = runner.invoke(app, ["verify", str(tmp_path)])
    assert result.exit_code == 2 and "is not a run directory" in result.output


def test_a_model_failure_stops_the_run_with_exit_5(monkeypatch, tmp_path):
    """Refused credentials: the run stops at once, the summary says why, the command exits 5."""
    from cudaopt.pool import pools
    from tests.fake_openai import FakeOpenAI
    from tests.scripted import ScriptedEvaluator

    monkeypatch.setattr(pools, "open_pool", lambda devices, ray=None, log_dir=None: ScriptedEvaluator())
    monkeypatch.setenv("OPENAI_API_KEY", "sk-wrong")
    with FakeOpenAI([{"status": 401, "message": "Incorrect API key provided"}]) as server:
        result = runner.invoke(app, ["optimize", "--config", str(SGEMM / "experiment.json"), "--strategy", "agent",
                                     "--base-url", server.url, "--results-dir", str(tmp_path)])
    assert result.exit_code == 5, result.output
    last = [line for line in result.output.splitlines() if line.strip()][-1]
    assert last.startswith("error: the run stopped on a model failure:") and "Incorrect API key" in last
    summary = (tmp_path / "run-001" / "summary.json").read_text()
    assert "model failure" in summary and "sk-wrong" not in summary


def test_a_model_that_cannot_be_built_is_bad_input_before_anything_starts(monkeypatch, tmp_path):
    monkeypatch.setenv("OPENAI_API_KEY", "x")
    for model, message in (("nonsense", "--model nonsense: Unable to infer model provider"),
                           (":x", "model :x needs the package")):
        result = runner.invoke(app, ["optimize", "--config", str(SGEMM / "experiment.json"), "--model", model,
                                     "--strategy", "agent", "--results-dir", str(tmp_path / "results")])
        assert result.exit_code == 2, result.output
        assert message in result.output and "Traceback" not in result.output
    assert not (tmp_path / "results").exists()  # no half-made run directory


def test_auto_without_a_key_on_an_experiment_without_tune_is_bad_input_before_the_gpu(monkeypatch, tmp_path):
    import json
    import shutil

    folder = tmp_path / "exp"
    shutil.copytree(SGEMM, folder)
    config = json.loads((folder / "experiment.json").read_text())
    config.pop("tune")
    (folder / "experiment.json").write_text(json.dumps(config))
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    result = runner.invoke(app, ["optimize", "--config", str(folder / "experiment.json"),
                                 "--results-dir", str(tmp_path / "results")])
    assert result.exit_code == 2, result.output
    assert "need a 'tune' section" in result.output and not (tmp_path / "results").exists()
