"""`cudaopt verify`: the winner on the holdout (and extra) cases with fresh seeds; timed holdout
cases and shape sweeps beside the baseline and the vendor, and regressions."""

from __future__ import annotations

import json
import re
import shutil

import pytest

from cudaopt.agent.model import ModelSettings
from cudaopt.errors import ExperimentError
from cudaopt.wire.results import CaseResult, CheckInfo, EvalResult
from cudaopt.optimize import start_or_resume
from cudaopt.record.runs import Budget, ExperimentArgs
from cudaopt.winner.verify import verify
from tests.conftest import SGEMM
from tests.fake_openai import FakeOpenAI
from tests.scripted import ScriptedEvaluator, answer

HOLDOUTS = ["holdout-515x261x1031", "holdout-96x3072x1536"]


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
    request, *timed = evaluator.requests
    assert [c.name for c in request.cases] == HOLDOUTS
    assert [c.seed for c in request.cases] == [1234, 1235]  # not the case file's seeds (15, 16)
    assert request.time_roles == [] and "RESULT: ok 0.5" in request.kernel.source
    assert outcome.passed and outcome.attempt == 1
    assert json.loads((run_dir / "verify.json").read_text())["seed"] == 1234
    # one holdout declares its work, the other says timed: both timed, winner (vendor beside it)
    # and baseline in turn, 3 times each
    assert len(timed) == 12 and all(r.time_roles == ["holdout"] for r in timed)
    assert ["ok 0.5" in r.kernel.source for r in timed] == [True, False] * 6
    assert [bool(r.vendors) for r in timed] == [True, False] * 6
    assert [c.name for c in outcome.timed] == HOLDOUTS
    for case in outcome.timed:
        assert case.origin == "holdout" and case.speedup_vs_baseline == pytest.approx(2.0)
        assert case.speedup_vs_vendor == pytest.approx(1.2) and not case.regression
    assert outcome.regressions == []


class SlowerOnTheHoldout(ScriptedEvaluator):
    """The winner is 2x faster on the benchmark cases but 1.5x slower than the initial kernel on the holdout."""

    def evaluate(self, request, on_event=None):
        if "ok 0.5" in request.kernel.source and request.time_roles == ["holdout"]:
            request = request.model_copy(deep=True)
            request.kernel.source = request.kernel.source.replace("ok 0.5", "ok 1.5")
        return super().evaluate(request, on_event)


def test_a_holdout_shape_slower_than_the_baseline_is_a_regression_and_fails(run):
    from cudaopt.report.build import build

    run_dir, _ = run
    outcome = verify(run_dir, SlowerOnTheHoldout(), seed=3)
    assert all(c.regression and c.speedup_vs_baseline == pytest.approx(1 / 1.5) for c in outcome.timed)
    assert not outcome.passed and outcome.regressions == HOLDOUTS
    build(run_dir)
    html = (run_dir / "report.html").read_text()
    assert '<div class="verdict">no-go</div>' in html
    assert f"holdout: regression on {', '.join(HOLDOUTS)} (slower than the baseline beyond noise)" in html
    assert 'id="timed"' in html and "regression" in html


def test_verify_exits_1_on_a_regression_and_shows_it(run, monkeypatch):
    from typer.testing import CliRunner

    from cudaopt.cli import app
    from cudaopt.pool import pools

    monkeypatch.setattr(pools, "open_pool", lambda devices, ray=None, log_dir=None: SlowerOnTheHoldout())
    run_dir, _ = run
    result = CliRunner(env={"COLUMNS": "200"}).invoke(app, ["verify", str(run_dir), "--repeats", "2"])
    assert result.exit_code == 1, result.output
    assert f"regressions (slower than the baseline beyond noise): {', '.join(HOLDOUTS)}" in result.output
    assert "worst shapes: holdout-96x3072x1536 0.67× vs baseline; holdout-515x261x1031 0.67×" in result.output


def test_one_slower_repeat_is_noise_not_a_regression(run):
    class OnceSlower(ScriptedEvaluator):
        calls = 0

        def evaluate(self, request, on_event=None):
            if "ok 0.5" in request.kernel.source and request.time_roles == ["holdout"]:
                OnceSlower.calls += 1
                if OnceSlower.calls == 2:
                    request = request.model_copy(deep=True)
                    request.kernel.source = request.kernel.source.replace("ok 0.5", "ok 1.5")
            return super().evaluate(request, on_event)

    run_dir, _ = run
    outcome = verify(run_dir, OnceSlower(), seed=3)
    case = outcome.timed[0]
    assert case.winner_medians_us[1] > case.baseline_medians_us[1] and not case.regression
    assert outcome.passed


def test_a_holdout_that_says_timed_false_is_only_checked(run, tmp_path):
    run_dir, folder = run
    cases = json.loads((folder / "input_cases.json").read_text())
    cases["cases"][-1]["timed"] = False
    (folder / "input_cases.json").write_text(json.dumps(cases))
    with pytest.raises(ExperimentError, match="lock"):  # the input cases are part of the lock
        verify(run_dir, ScriptedEvaluator())


def test_a_shape_sweep_times_every_shape_of_a_grid(run, tmp_path):
    run_dir, _ = run
    shapes = tmp_path / "shapes.json"
    shapes.write_text(json.dumps({"m": [128, 1024], "n": [256], "k": [64, 4096]}))
    evaluator, steps = ScriptedEvaluator(), []
    outcome = verify(run_dir, evaluator, seed=9, shapes=shapes, repeats=2,
                     on_step=lambda what, done, total: steps.append((what, done, total)))
    swept = [c for c in outcome.timed if c.origin == "shapes"]
    assert [c.name for c in swept] == ["m=128,n=256,k=64", "m=128,n=256,k=4096", "m=1024,n=256,k=64",
                                      "m=1024,n=256,k=4096"]
    assert all(c.speedup_vs_baseline == pytest.approx(2.0) for c in swept) and outcome.passed
    assert steps[-1] == ("m=1024,n=256,k=4096", 12, 12)  # (2 holdouts + 4 shapes) x 2 repeats
    sweep_requests = [r for r in evaluator.requests if r.cases[0].name.startswith("m=")]
    assert all(r.protocol.iterations == 30 and r.protocol.input_sets == 1 for r in sweep_requests)
    assert sweep_requests[0].cases[0].inputs["a"].shape == ["m", "k"]  # the template's own expressions
    assert outcome.shapes_file == str(shapes) and [c.name for c in outcome.worst(1)]


@pytest.mark.parametrize("content, field", [
    ('{"m": [64], "q": [2]}', "shapes[0]: q: not a scalar"),
    ('{"template": "nope", "shapes": [{"m": 4}]}', "template: no case named 'nope'"),
    ('{"m": [4294967296]}', "shapes[0].scalars.m: 4294967296 does not fit int m"),
    ('[{"m": 0}]', "shapes[0].inputs.a.shape[0]"),
    ('{"shapes": []}', "shapes: "),
    ("[{", "not valid JSON"),
    ('{"m": [1000000], "n": [1000000], "k": [1000000]}', "shapes[0]: case 'm=1000000,n=1000000,k=1000000' needs"),
])
def test_a_bad_shapes_file_is_bad_input_naming_the_field(run, tmp_path, content, field):
    run_dir, _ = run
    shapes = tmp_path / "shapes.json"
    shapes.write_text(content)
    evaluator = ScriptedEvaluator()
    with pytest.raises(ExperimentError) as err:
        verify(run_dir, evaluator, shapes=shapes)
    assert field in str(err.value) and "\n" not in str(err.value)
    assert evaluator.requests == []  # nothing ran


def test_extra_cases_are_verified_too(run, tmp_path):
    run_dir, _ = run
    extra = json.loads((SGEMM / "input_cases.json").read_text())
    extra["cases"] = [dict(extra["cases"][0], name="odd-7x5x3", role="holdout", scalars={"m": 7, "n": 5, "k": 3})]
    path = tmp_path / "extra.json"
    path.write_text(json.dumps(extra))
    evaluator = ScriptedEvaluator()
    verify(run_dir, evaluator, extra=path)
    assert [c.name for c in evaluator.requests[0].cases] == [*HOLDOUTS, "odd-7x5x3"]


@pytest.mark.parametrize("name, scalars, field", [
    (HOLDOUTS[0], {"m": 7, "n": 5, "k": 3}, "cases[0].name: " + repr(HOLDOUTS[0]) + " is already a holdout case"),
    ("huge", {"m": 1000000, "n": 1000000, "k": 1000000}, "cases[0]: case 'huge' needs about"),
])
def test_extra_cases_get_the_checks_the_experiment_s_own_do(run, tmp_path, name, scalars, field):
    run_dir, _ = run
    extra = json.loads((SGEMM / "input_cases.json").read_text())
    extra["cases"] = [dict(extra["cases"][0], name=name, role="holdout", scalars=scalars)]
    path = tmp_path / "extra.json"
    path.write_text(json.dumps(extra))
    evaluator = ScriptedEvaluator()
    with pytest.raises(ExperimentError, match=re.escape(field)):
        verify(run_dir, evaluator, extra=path)
    assert evaluator.requests == []


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

    from cudaopt.cli import app
    from cudaopt.winner import sanitize

    run_dir, _ = run
    monkeypatch.setattr(sanitize.shutil, "which", lambda name: None)
    monkeypatch.setattr(sanitize.find_sanitizer, "__defaults__", ((),))  # no toolkit folder either
    result = CliRunner().invoke(app, ["verify", str(run_dir), "--sanitize"])
    assert result.exit_code == 2
    assert "compute-sanitizer not found" in result.output
    assert not (run_dir / "verify.json").exists()


def test_the_sanitizer_summary_of_each_tool_is_parsed():
    from cudaopt.winner.sanitize import error_count

    assert error_count("========= ERROR SUMMARY: 3 errors\n") == 3
    assert error_count("========= RACECHECK SUMMARY: 2 hazards displayed (1 error, 1 warning)\n") == 1
    assert error_count("========= ERROR SUMMARY: 0 errors\n") == 0
    assert error_count("the tool died before its summary") is None  # never read as a pass


def test_a_vendor_that_fails_on_a_shape_says_why_and_never_fails_the_winner(tmp_path):
    from cudaopt.cli.render_runs import timed_table, verify_lines
    from cudaopt.report.build import build

    folder = tmp_path / "exp"
    shutil.copytree(SGEMM, folder)
    config = json.loads((folder / "experiment.json").read_text())
    config["vendor"]["label"] = "cuBLAS (broken)"  # the scripted vendor errors on every case
    (folder / "experiment.json").write_text(json.dumps(config))
    with FakeOpenAI([answer("ok 0.5", "register blocking")]) as server:
        run, _ = start_or_resume(ExperimentArgs(config=str(folder / "experiment.json")),
                                 ModelSettings(base_url=server.url), Budget(max_iterations=1), tmp_path / "results",
                                 ScriptedEvaluator())
    outcome = verify(run.path, ScriptedEvaluator(), seed=3)
    assert outcome.passed and [c.name for c in outcome.timed] == HOLDOUTS
    for case in outcome.timed:
        assert case.vendor_us is None and case.speedup_vs_baseline == pytest.approx(2.0)
        assert case.vendor_status == "error" and "no compiler" in case.vendor_reason
    assert "holdout-515x261x1031: vendor error: cuBLAS (broken): RuntimeError: no compiler" in verify_lines(outcome)
    assert "(error)" in list(timed_table(outcome).columns[4].cells)
    build(run.path)
    assert "<td>(error)</td>" in (run.path / "report.html").read_text()


@pytest.mark.parametrize("name", ["sgemm_shapes.json", "sgemm_shapes_extra.json", "sgemm_shapes_splitk.json",
                                  "sgemm_shapes_staged.json"])
def test_the_benchmark_shape_sets_load_against_the_example(name):
    """benchmarks/bench_shapes.py and the documented `verify --shapes` runs read these files."""
    from pathlib import Path

    from cudaopt.experiment import load_experiment
    from cudaopt.winner.shapes import load_shapes

    path = Path(__file__).resolve().parents[1] / "benchmarks" / name
    cases = load_shapes(path, load_experiment(SGEMM / "experiment.json"))
    assert len(cases) == len(json.loads(path.read_text())["shapes"]) and all(c.scalars["k"] >= 1 for c in cases)
