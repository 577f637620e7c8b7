"""Runs on several GPUs, without a GPU: scripted GPUs behind the real dispatcher. Sweeps and rounds
of proposals use every GPU, attempts are recorded in a fixed order and name their GPU, only one
GPU model is compared, finalists (measured on different GPUs, or recorded within noise of the
best) are measured again on one, and replay, verify and evaluate share their work out so that
every comparison stays on one GPU."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from cudaopt.agent.model import ModelSettings
from cudaopt.cli.render_experiments import summary_lines
from cudaopt.evaluate import evaluate_kernel
from cudaopt.experiment import load_experiment
from cudaopt.optimize import Options, start_or_resume
from cudaopt.record.runs import Budget, ExperimentArgs, RunSettings
from cudaopt.record.files import Environment, History, ModelCall, Summary
from cudaopt.winner.replay import replay
from cudaopt.winner.verify import verify
from tests.conftest import SGEMM
from tests.fake_openai import FakeOpenAI
from tests.scripted import ScriptedEvaluator, ScriptedPool, answer, stats

TILES = {"BM": [16, 32, 64, 128]}  # the scripted tuner: the bigger the tile, the faster


@pytest.fixture
def experiment(tmp_path):
    folder = tmp_path / "exp"
    shutil.copytree(SGEMM, folder)
    config = json.loads((folder / "experiment.json").read_text())
    config["tune"].update(tunables=TILES, restrictions=[],
                          launch={"grid": ["cdiv(n, BM)", "cdiv(m, BM)"], "block": [256]})
    (folder / "experiment.json").write_text(json.dumps(config))
    return ExperimentArgs(config=str(folder / "experiment.json"))


def tune(tmp_path, args, evaluator, **options):
    return start_or_resume(args, ModelSettings(), Budget(), tmp_path / "results", evaluator,
                           Options(strategy="tune", use_cache=False, **options))


def attempts(run):
    return History.model_validate(run.read_json("history.json")).attempts


def test_a_sweep_on_two_gpus_is_recorded_in_the_order_of_the_space_whichever_gpu_is_quicker(tmp_path, experiment):
    run, summary = tune(tmp_path / "a", experiment, ScriptedPool(2, delays={0: 0.15}))
    tuned = [a for a in attempts(run) if a.kind == "tune"]
    assert [a.defines["BM"] for a in tuned] == [16, 32, 64, 128]
    assert [a.id for a in tuned] == [1, 2, 3, 4] and all(a.parent == 0 for a in tuned)
    assert {a.gpu.index for a in tuned} == {0, 1} and all(a.gpu.name == "Scripted GPU" for a in tuned)
    env = Environment.model_validate(run.read_json("env.json"))
    assert [g.label for g in env.pool] == ["GPU 0", "GPU 1"] and env.backend == "local"
    alone, _ = tune(tmp_path / "b", experiment, ScriptedEvaluator())
    assert [(a.kind, a.defines, a.score_us) for a in attempts(alone)] == [
        (a.kind, a.defines, a.score_us) for a in attempts(run)]  # one GPU or two: the same record


def test_each_gpu_compiles_ahead_the_share_of_the_sweep_it_will_be_handed(tmp_path, experiment):
    """Before the baseline, each lane is asked to compile the configurations the dispatcher later
    gives it, so a sweep's compilation runs beside the baseline on every GPU and none twice. (In
    lockstep: a lane that finishes its share early takes another's, which would make this a race.)"""
    pool = ScriptedPool(2, lockstep=True)
    run, _ = tune(tmp_path, experiment, pool)
    ahead, batch = ([lane.prefetched[0] for lane in pool.lanes], [lane.prefetched[1] for lane in pool.lanes])
    assert ahead == batch == [[{"BM": 16}, {"BM": 64}], [{"BM": 32}, {"BM": 128}]]
    assert all(a.gpu.index == (0 if a.defines["BM"] in (16, 64) else 1) for a in attempts(run) if a.kind == "tune")


def test_a_run_on_two_gpus_sums_its_steps_over_them_and_leaves_no_remainder(tmp_path, experiment):
    """Two GPUs work side by side: their steps' sum may pass the wall time, so no remainder is told."""
    from cudaopt.cli.render_experiments import time_line

    _, summary = tune(tmp_path, experiment, ScriptedPool(2))
    spent = summary.time
    assert spent.gpus == 2 and spent.other_s is None
    line = time_line(spent)
    assert "checks (on 2 GPUs, summed)" in line and "host and compile waits" not in line


def test_finalists_measured_on_different_gpus_are_measured_again_on_one_before_a_winner(tmp_path, experiment):
    # GPU 0 reports every time twice as fast: BM=64 (on GPU 0) looks best, BM=128 (on GPU 1) is
    run, summary = tune(tmp_path, experiment, ScriptedPool(2, delays={0: 0.05, 1: 0.05}, speeds={0: 0.5}, lockstep=True))
    by_tile = {a.defines.get("BM"): a for a in attempts(run)}
    assert by_tile[64].gpu.index == 0 and by_tile[128].gpu.index == 1
    assert by_tile[64].score_us < by_tile[128].score_us  # as recorded, on two GPUs
    finalists = summary.finalists
    assert finalists is not None and finalists.gpu.index == 0 and finalists.repeats == 3
    assert [f.attempt for f in finalists.finalists] == [by_tile[64].id, by_tile[128].id, by_tile[16].id]
    assert all(f.status == "ok" for f in finalists.finalists)
    # side by side, BM=64 and BM=16 are far slower than BM=128 in the first round: dropped, measured no more
    assert [(len(f.scores_us), f.dropped) for f in finalists.finalists] == [(1, True), (3, False), (1, True)]
    assert finalists.winner == by_tile[128].id == summary.best_attempt
    assert "#define BM 128" in run.file("best.cu").read_text()
    again = Summary.model_validate(run.read_json("summary.json"))
    assert again.finalists == finalists and "finalists measured again on GPU 0" in run.file("run.log").read_text()
    report = run.file("report.html").read_text()
    assert 'id="finalists"' in report and f"#{by_tile[128].id} (winner)" in report and "— GPU 1" in report
    (line,) = [x for x in summary_lines(summary) if x.startswith("finalists")]
    assert line.startswith("finalists measured again on GPU 0 (3×): #") and line.endswith(f"winner #{by_tile[128].id}")
    assert f"#{by_tile[64].id} " in line and line.count("(dropped after one round)") == 2
    # the winner's three rounds checked 9 timed launches per case; the audit's own evaluation the 2 more that make 11
    (line,) = [x for x in summary_lines(summary) if x.startswith("crowning audit")]
    assert line == (f"crowning audit: #{by_tile[128].id} passed, 11+ checked timed launches per performance case; "
                    f"one wrong on half a case's timed launches passes with p ≤ 0.044% (run: 0.044%)")
    assert 'id="crowning-audit"' in report and f"#{by_tile[128].id} (winner)" in report


class LuckyOnce(ScriptedEvaluator):
    """One GPU on which the sweep's BM=64 measurement caught a lucky moment (3% fast); measured
    again it is its own speed, and BM=65 (scripted 1.25% faster) is the faster kernel."""

    def _evaluate(self, request, on_event=None):
        result = super()._evaluate(request, on_event)
        if request.kernel and request.kernel.defines.get("BM") == 64 and not request.id.startswith("finalist-"):
            for case in result.cases:
                if case.timing:
                    case.timing = stats(case.timing.median_us * 0.97)
        return result


def test_on_one_gpu_attempts_recorded_within_noise_of_the_best_are_measured_again_side_by_side(tmp_path, experiment):
    path = Path(experiment.config)
    config = json.loads(path.read_text())
    config["tune"]["tunables"] = {"BM": [16, 64, 65]}
    path.write_text(json.dumps(config))
    evaluator = LuckyOnce()
    run, summary = tune(tmp_path, experiment, evaluator)
    by_tile = {a.defines.get("BM"): a for a in attempts(run)}
    assert by_tile[64].score_us < by_tile[65].score_us  # as recorded: the lucky moment ranks first
    finalists = summary.finalists
    assert finalists is not None and [f.attempt for f in finalists.finalists] == [by_tile[64].id, by_tile[65].id]
    assert finalists.winner == by_tile[65].id == summary.best_attempt  # BM=16 is far slower: no finalist
    assert "#define BM 65" in run.file("best.cu").read_text()
    again = [r.kernel.defines["BM"] for r in evaluator.requests if r.id.startswith("finalist-")]
    assert again == [64, 65, 65, 64, 64, 65]  # interleaved, neither always first


def test_a_best_beyond_noise_is_measured_again_alone_and_audited_even_with_cached_results(tmp_path, experiment):
    path = Path(experiment.config)
    config = json.loads(path.read_text())
    config["tune"]["tunables"] = {"BM": [16, 32]}
    path.write_text(json.dumps(config))
    start_or_resume(experiment, ModelSettings(), Budget(), tmp_path / "results", ScriptedEvaluator(),
                    Options(strategy="tune"))
    config["tune"]["tunables"] = TILES
    path.write_text(json.dumps(config))
    run, summary = start_or_resume(experiment, ModelSettings(), Budget(), tmp_path / "results", ScriptedEvaluator(),
                                   Options(strategy="tune"))
    assert [a.cached for a in attempts(run)] == [True, True, True, False, False]
    # each tile is far faster than the last (the cached ones were measured here too): the best has no rival, but
    # it is measured again all the same, alone, and audited before it is crowned
    assert [f.attempt for f in summary.finalists.finalists] == [summary.best_attempt] == [attempts(run)[-1].id]
    assert summary.audit.winner == summary.best_attempt and summary.audit.audits[0].rounds == 3


class FailsWhenMeasuredAgain(ScriptedPool):
    def evaluate_all(self, requests, **options):
        for r in requests:
            if r.id.startswith("finalist-") and r.kernel.defines.get("BM") == 128:
                r.kernel.source = r.kernel.source.replace("// RESULT: ok", "// RESULT: compile_error")
        return super().evaluate_all(requests, **options)


def test_a_finalist_that_fails_when_measured_again_cannot_win(tmp_path, experiment):
    source = (SGEMM / "tunable.cu").read_text()
    folder = tmp_path / "exp"
    (folder / "tunable.cu").write_text("// RESULT: ok 1.0\n" + source)
    _, summary = tune(tmp_path, experiment, FailsWhenMeasuredAgain(2, delays={0: 0.05, 1: 0.05}))
    failed = {f.attempt: f for f in summary.finalists.finalists}
    tiles = {a.id: a.defines["BM"] for a in attempts(_run_dir(tmp_path)) if a.kind == "tune"}
    loser = next(i for i, bm in tiles.items() if bm == 128)
    assert failed[loser].status == "compile_error" and failed[loser].score_us is None
    assert summary.best_attempt != loser and summary.finalists.winner == summary.best_attempt


def _run_dir(tmp_path):
    from cudaopt.record.rundir import RunDir

    return RunDir.open(tmp_path / "results" / "run-001")


def run_agent(tmp_path, script, evaluator, budget, proposals=1, resume=None):
    with FakeOpenAI(script) as server:
        settings = ModelSettings(model="openai:gpt-5-mini", base_url=server.url, max_retries=0, retry_base_s=0.01)
        run, summary = start_or_resume(ExperimentArgs(config=str(SGEMM / "experiment.json")), settings, budget,
                                       tmp_path / "results", evaluator, Options(strategy="agent", proposals=proposals),
                                       resume=resume)
    return run, summary, server


def test_rounds_of_proposals_are_asked_together_evaluated_together_and_counted_one_iteration_each(
        tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    script = [answer("ok 0.5"), answer("compile_error"), answer("ok 0.4"), answer("ok 0.45"), "no code at all"]
    run, summary, server = run_agent(tmp_path, script, ScriptedPool(2), Budget(max_iterations=5), proposals=2)
    history = attempts(run)
    assert summary.stop_reason == "iterations exhausted" and summary.totals.model_calls == 5
    assert sum(a.kind == "proposal" for a in history) == 5  # rounds of 2, 2 and 1: one iteration per proposal
    first = history[1:3]  # round 1: two candidates, in turn order
    assert sorted(a.status for a in first) == ["compile_error", "ok"]
    failed = next(a for a in first if a.status == "compile_error")
    passed = next(a for a in first if a.status == "ok")
    second = history[3:5]  # round 2: turn i repairs turn i's failure, or improves the best
    assert sorted(a.parent for a in second) == sorted([failed.id, passed.id])
    assert {a.gpu.index for a in first} == {0, 1}
    assert history[5].status == "rejected"  # round 3: one proposal left
    calls = sorted((ModelCall.model_validate_json(p.read_text()) for p in run.path.glob("model-*.json")),
                   key=lambda c: c.id)
    assert [c.attempt for c in calls] and all(history[c.attempt].model_calls == [c.id] for c in calls)
    prompts = [m["content"] for body in server.requests for m in body["messages"] if m["role"] == "user"]
    assert sum("This round asks for 2 proposals" in p for p in prompts) == 4
    assert not any("round asks" in p for p in prompts[4:])
    settings = RunSettings.model_validate(run.read_json("settings.json"))
    assert settings.proposals == 2


def test_a_round_asks_for_no_more_proposals_than_model_calls_are_left(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    script = [answer("ok 0.5"), answer("ok 0.6"), answer("ok 0.7"), answer("ok 0.8")]
    _, summary, server = run_agent(tmp_path, script, ScriptedPool(2),
                                   Budget(max_iterations=10, max_model_calls=3), proposals=2)
    assert summary.stop_reason == "model-call budget exhausted" and summary.totals.model_calls == 3
    assert len(server.requests) == 3


class OtherModel(ScriptedEvaluator):
    def device_info(self):
        return super().device_info().model_copy(update={"name": "Another GPU"})


def test_attempts_measured_on_another_gpu_model_are_recorded_but_never_compared(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    run, _, _ = run_agent(tmp_path, [answer("ok 0.8")], ScriptedEvaluator(), Budget(max_iterations=1))
    _, summary, _ = run_agent(tmp_path, [answer("ok 0.1")], OtherModel(), Budget(max_iterations=2), resume=run.path)
    history = attempts(run)
    assert history[2].gpu.name == "Another GPU" and history[2].score_us < history[1].score_us
    assert summary.best_attempt == 1  # the faster figure is from another kind of GPU


def test_old_history_files_without_gpus_are_read(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    run, _, _ = run_agent(tmp_path, [answer("ok 0.8")], ScriptedEvaluator(), Budget(max_iterations=1))
    data = run.read_json("history.json")
    data["schema_version"] = 2
    for attempt in data["attempts"]:
        del attempt["gpu"]
    old = History.model_validate(data)
    assert old.attempts[1].gpu is None and old.attempts[1].score_us


@pytest.fixture
def finished(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    run, _, _ = run_agent(tmp_path, [answer("ok 0.5")], ScriptedEvaluator(), Budget(max_iterations=1))
    return run.path


def test_replay_on_two_gpus_keeps_each_cases_pairs_on_one_gpu(finished):
    pool = ScriptedPool(2)
    outcome = replay(finished, pool, repeats=3)
    assert outcome.passed and outcome.beats_baseline
    for lane in pool.lanes:
        names = {r.cases[0].name for r in lane.requests}
        other = {r.cases[0].name for r in pool.lanes[1 - lane.index].requests}
        assert not names & other  # no case measured on both GPUs
        for name in names:
            mine = ["ok 0.5" in r.kernel.source for r in lane.requests if r.cases[0].name == name]
            if len(mine) > 1:
                assert mine == [True, False] * 3  # winner, baseline, ... interleaved on that GPU
    assert {c.gpu.index for c in outcome.cases} == {0, 1}


def test_verify_on_two_gpus_shares_the_cases_out_and_keeps_their_order(finished, tmp_path):
    extra = json.loads((SGEMM / "input_cases.json").read_text())
    extra["cases"] = [dict(extra["cases"][0], name="odd-7x5x3", role="holdout", scalars={"m": 7, "n": 5, "k": 3})]
    path = tmp_path / "extra.json"
    path.write_text(json.dumps(extra))
    pool = ScriptedPool(2)
    outcome = verify(finished, pool, extra=path, seed=7)
    # the checks shared out (one request per GPU), then each timed case's 3 pairs on one GPU
    assert [len(lane.requests) for lane in pool.lanes] == [1 + 6 + 6, 1 + 6]
    assert [c.name for c in outcome.cases] == ["holdout-515x261x1031", "holdout-96x3072x1536", "odd-7x5x3"]
    assert [c.gpu.index for c in outcome.cases] == [0, 1, 0] and outcome.passed
    assert [c.name for c in outcome.timed] == ["holdout-515x261x1031", "holdout-96x3072x1536", "odd-7x5x3"]
    lanes = [{r.cases[0].name for r in lane.requests[1:]} for lane in pool.lanes]
    assert lanes == [{"holdout-515x261x1031", "odd-7x5x3"}, {"holdout-96x3072x1536"}]


def test_evaluate_on_two_gpus_measures_the_kernel_and_the_reference_at_once(tmp_path):
    experiment = load_experiment(SGEMM / "experiment.json")
    result = evaluate_kernel(experiment, experiment.initial_kernel_path.read_text(), ScriptedPool(2))
    assert result.candidate.ok and result.reference_timing is not None
    assert {name: g.index for name, g in result.gpus.items()} == {"candidate": 0, "reference": 1}


def test_the_command_line_runs_a_sweep_on_every_gpu_it_may_use(tmp_path, experiment, monkeypatch):
    """--devices all through the real pool: CUDA_VISIBLE_DEVICES lists two GPUs, fake workers stand in."""
    from typer.testing import CliRunner

    from cudaopt.cli import app
    from cudaopt.pool import supervisor
    from tests.fakes import FAKE

    monkeypatch.setattr(supervisor, "WORKER_COMMAND", FAKE)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    result = CliRunner(env={"COLUMNS": "200", "OPENAI_API_KEY": ""}).invoke(app, [
        "optimize", "--config", experiment.config, "--strategy", "tune", "--devices", "all",
        "--results-dir", str(tmp_path / "results")])
    assert result.exit_code == 0, result.output
    run = tmp_path / "results" / "run-001"
    env = Environment.model_validate_json((run / "env.json").read_text())
    assert [g.label for g in env.pool] == ["GPU 0", "GPU 1"] and env.gpu.name == "fake"
    tuned = [a for a in History.model_validate_json((run / "history.json").read_text()).attempts if a.kind == "tune"]
    assert [a.defines["BM"] for a in tuned] == [16, 32, 64, 128] and {a.gpu.index for a in tuned} == {0, 1}
