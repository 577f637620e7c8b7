"""`cudaopt replay`: the winner measured again beside the baseline, interleaved."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from cudaopt.agent.model import ModelSettings
from cudaopt.wire.results import DeviceInfo
from cudaopt.optimize import start_or_resume
from cudaopt.record.runs import Budget, ExperimentArgs
from cudaopt.winner.replay import replay
from tests.conftest import SGEMM
from tests.fake_openai import FakeOpenAI
from tests.scripted import ScriptedEvaluator, answer


@pytest.fixture
def run_dir(tmp_path):
    with FakeOpenAI([answer("ok 0.5", "register blocking")]) as server:
        run, _ = start_or_resume(ExperimentArgs(config=str(SGEMM / "experiment.json")),
                                 ModelSettings(base_url=server.url), Budget(max_iterations=1), tmp_path / "results",
                                 ScriptedEvaluator())
    return run.path


def test_replay_interleaves_winner_and_baseline(run_dir):
    evaluator = ScriptedEvaluator()
    outcome = replay(run_dir, evaluator, repeats=3)
    perf = [r for r in evaluator.requests if r.cases[0].role == "performance"]
    sources = ["ok 0.5" in r.kernel.source for r in perf]
    assert sources[:6] == [True, False, True, False, True, False]  # winner, baseline, ... per case
    assert outcome.passed and outcome.beats_baseline
    big = next(c for c in outcome.cases if c.name == "square-4096")
    assert big.recorded_us == big.now_us == 8500.0 and big.within_noise
    assert big.speedup_vs_baseline == pytest.approx(2.0)
    assert json.loads((run_dir / "replay.json").read_text())["beats_baseline"]
    # the winner's requests carry the vendor (timed beside it in the same request); the baseline's do not
    assert all(r.vendors for r in perf if "ok 0.5" in r.kernel.source)
    assert not any(r.vendors for r in perf if "ok 0.5" not in r.kernel.source)
    assert big.vendor_medians_us == [10200.0] * 3 and big.speedup_vs_vendor == pytest.approx(1.2)


class OtherGpu(ScriptedEvaluator):
    def device_info(self):
        return DeviceInfo(name="Another GPU", arch="sm_80", sm_count=108)


def test_a_different_gpu_is_named_and_fails_the_replay(run_dir):
    outcome = replay(run_dir, OtherGpu(), repeats=1)
    assert not outcome.passed
    assert any("name: recorded 'Scripted GPU', now 'Another GPU'" in d for d in outcome.environment_differences)


class Slower(ScriptedEvaluator):
    def evaluate(self, request, on_event=None):
        if "ok 0.5" in request.kernel.source:
            request.kernel.source = request.kernel.source.replace("ok 0.5", "ok 1.5")
        return super().evaluate(request, on_event)


def test_a_winner_that_no_longer_wins_is_reported(run_dir):
    outcome = replay(run_dir, Slower(), repeats=2)
    assert not outcome.beats_baseline
    big = next(c for c in outcome.cases if c.name == "square-4096")
    assert big.within_noise is False and big.speedup_vs_baseline < 1


class SlowerOnTheSmallCase(ScriptedEvaluator):
    def evaluate(self, request, on_event=None):
        if "ok 0.5" in request.kernel.source and request.cases[0].name == "square-256":
            request.kernel.source = request.kernel.source.replace("ok 0.5", "ok 1.2")
        return super().evaluate(request, on_event)


def test_the_run_beats_the_baseline_on_its_score_and_names_a_slower_case(run_dir):
    outcome = replay(run_dir, SlowerOnTheSmallCase(), repeats=3)
    small = next(c for c in outcome.cases if c.name == "square-256")
    assert not small.beats_baseline and small.speedup_vs_baseline < 1
    assert outcome.beats_baseline  # the geomean over the performance cases still wins in every repeat
    assert outcome.slower_cases == ["square-256"]


def test_replay_cli_without_a_run(tmp_path):
    from cudaopt.cli import app

    result = CliRunner().invoke(app, ["replay", str(tmp_path)])
    assert result.exit_code == 2 and "is not a run directory" in result.output


def test_replay_reads_its_target_once_before_any_gpu_work(run_dir):
    from cudaopt.winner.replay import load_target

    loaded = load_target(run_dir)
    assert loaded.trial.attempt.id == json.loads((run_dir / "summary.json").read_text())["best_attempt"]
    for path in run_dir.glob("best-case-*.json"):
        path.unlink()  # what was read is what is replayed: nothing is read again
    (run_dir / "env.json").unlink()
    outcome = replay(loaded, ScriptedEvaluator(), repeats=1)
    assert outcome.passed and {c.name for c in outcome.cases} == {c.cases[0].name for c in loaded.cases}


def test_an_edited_request_in_a_run_is_refused_before_any_gpu_work(run_dir):
    """A run's best-case-N.json is checked as a request file given alone is."""
    from cudaopt.cli import app

    path = run_dir / "best-case-0.json"
    request = json.loads(path.read_text())
    request["launch"]["block"] = [-1]
    path.write_text(json.dumps(request))
    result = CliRunner().invoke(app, ["replay", str(run_dir)])
    assert result.exit_code == 2 and "best-case-0.json" in result.output and "block" in result.output, result.output
