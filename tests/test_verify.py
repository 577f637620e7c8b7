"""`cudaopt verify`: the winner on the holdout (and extra) cases, fresh seeds, check only."""

from __future__ import annotations

import json
import shutil

import pytest

from cudaopt.agent.model import ModelSettings
from cudaopt.errors import ExperimentError
from cudaopt.harness.results import CaseResult, CheckInfo, EvalResult
from cudaopt.optimize import start_or_resume
from cudaopt.record.runs import Budget, ExperimentArgs
from cudaopt.verify import verify
from tests.conftest import SGEMM
from tests.fake_openai import FakeOpenAI
from tests.scripted import ScriptedEvaluator, answer


@pytest.fixture
def run(tmp_path):
    folder = tmp_path / "exp"
    shutil.copytree(SGEMM, folder)
    with FakeOpenAI([answer("ok 0.5", "register blocking")]) as server:
        run, _ = start_or_resume(ExperimentArgs(config=str(folder / "experiment.json")),
                                 ModelSettings(base_url=server.url), Budget(max_iterations=1), tmp_path / "results",
                                 ScriptedEvaluator())
    return run.path, folder


def test_the_winner_is_checked_on_the_holdout_with_fresh_seeds(run):
    run_dir, _ = run
    evaluator = ScriptedEvaluator()
    outcome = verify(run_dir, evaluator, seed=1234)
    (request,) = evaluator.requests
    assert [c.name for c in request.cases] == ["holdout-515x261x1031"]
    assert request.cases[0].seed == 1234  # not the case file's seed (15)
    assert request.time_roles == [] and "RESULT: ok 0.5" in request.kernel.source
    assert outcome.passed and outcome.attempt == 1
    assert json.loads((run_dir / "verify.json").read_text())["seed"] == 1234


def test_extra_cases_are_verified_too(run, tmp_path):
    run_dir, _ = run
    extra = json.loads((SGEMM / "input_cases.json").read_text())
    extra["cases"] = [dict(extra["cases"][0], name="odd-7x5x3", role="holdout", scalars={"m": 7, "n": 5, "k": 3})]
    path = tmp_path / "extra.json"
    path.write_text(json.dumps(extra))
    evaluator = ScriptedEvaluator()
    verify(run_dir, evaluator, extra=path)
    assert [c.name for c in evaluator.requests[0].cases] == ["holdout-515x261x1031", "odd-7x5x3"]


class Failing(ScriptedEvaluator):
    def evaluate(self, request, on_event=None):
        check = CheckInfo(output="c", input_set=2, phase="check", ok=False, elements=10, mismatches=3,
                          max_abs_error=0.5, max_rel_error=0.1)
        cases = [CaseResult(name=c.name, role=c.role, status="mismatch", reason="c: 3/10 wrong", checks=[check]) for c in request.cases]
        return EvalResult(status="mismatch", reason="case holdout: mismatch", cases=cases)


def test_a_failure_is_recorded_and_turns_the_report_verdict(run):
    from cudaopt.report.build import build

    run_dir, _ = run
    outcome = verify(run_dir, Failing())
    assert not outcome.passed and outcome.cases[0].max_abs_error == 0.5
    build(run_dir)
    assert "holdout: verification failed" in (run_dir / "report.html").read_text()


def test_a_changed_reference_is_refused(run):
    run_dir, folder = run
    (folder / "reference.cu").write_text((folder / "reference.cu").read_text() + "\n// changed\n")
    with pytest.raises(ExperimentError, match="lock.json: lock"):
        verify(run_dir, ScriptedEvaluator())


def test_verify_sanitize_without_the_tool_is_bad_input_before_any_gpu_work(run, monkeypatch):
    from typer.testing import CliRunner

    from cudaopt import sanitize
    from cudaopt.cli import app

    run_dir, _ = run
    monkeypatch.setattr(sanitize.shutil, "which", lambda name: None)
    monkeypatch.setattr(sanitize.find_sanitizer, "__defaults__", ((),))  # no toolkit folder either
    result = CliRunner().invoke(app, ["verify", str(run_dir), "--sanitize"])
    assert result.exit_code == 2
    assert "compute-sanitizer not found" in result.output
    assert not (run_dir / "verify.json").exists()


def test_the_sanitizer_summary_of_each_tool_is_parsed():
    from cudaopt.sanitize import error_count

    assert error_count("========= ERROR SUMMARY: 3 errors\n") == 3
    assert error_count("========= RACECHECK SUMMARY: 2 hazards displayed (1 error, 1 warning)\n") == 1
    assert error_count("========= ERROR SUMMARY: 0 errors\n") == 0
    assert error_count("the tool died before its summary") is None  # never read as a pass
