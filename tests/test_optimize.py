"""The whole agent loop on the CPU: a scripted model behind a fake OpenAI server (the real
LangChain/OpenAI client path runs) and a scripted evaluator in place of the GPU worker."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from cudaopt.agent.model import ModelSettings
from cudaopt.optimize import start_or_resume
from cudaopt.record.runs import Budget, ExperimentArgs
from cudaopt.record.files import History, ModelCall, Summary
from cudaopt.wire.protocol import EvalRequest
from tests.conftest import ROOT, SGEMM
from tests.fake_openai import FakeOpenAI
from tests.scripted import ScriptedEvaluator, answer, kernel

SECRET = "sk-test-DO-NOT-LEAK-1234567890"


@pytest.fixture(autouse=True)
def api_key(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)


def run_agent(tmp_path, script, budget=None, prices=None, resume=None):
    with FakeOpenAI(script) as server:
        settings = ModelSettings(model="openai:gpt-5-mini", base_url=server.url, max_retries=2, retry_base_s=0.01)
        if prices:
            settings.prices.update(prices)
        evaluator = ScriptedEvaluator()
        run, summary = start_or_resume(
            ExperimentArgs(config=str(SGEMM / "experiment.json")), settings,
            budget or Budget(max_iterations=len(script)), tmp_path / "results", evaluator, resume=resume,
        )
    return run, summary, server, evaluator


def history(run):
    return History.model_validate(run.read_json("history.json")).attempts


def test_an_improving_trajectory_leaves_a_complete_run_directory(tmp_path):
    script = [answer("ok 0.8", "bigger tiles"), answer("ok 0.5", "register blocking"), answer("ok 0.9", "worse")]
    run, summary, server, evaluator = run_agent(tmp_path, script)
    assert run.path.name == "run-001"
    attempts = history(run)
    assert [a.status for a in attempts] == ["ok", "ok", "ok", "ok"]
    assert [a.parent for a in attempts] == [None, 0, 1, 2]
    assert summary.best_attempt == 2 and summary.stop_reason == "iterations exhausted"
    assert summary.speedup == pytest.approx(2.0)
    assert {c.name: c.speedup for c in summary.cases}["square-4096"] == pytest.approx(2.0)
    assert summary.valid == 4 and summary.rejected_by_reason == {}
    assert summary.totals.model_calls == 3
    assert summary.totals.input_tokens == 3000 and summary.totals.output_tokens == 1200
    assert summary.totals.reasoning_tokens == 300
    assert summary.totals.cost_usd == pytest.approx(3 * (1000 * 0.25 + 400 * 2.0) / 1e6)
    assert "ok 0.5" in run.file("best.cu").read_text()
    # the files of the pack, each valid against its schema
    Summary.model_validate(run.read_json("summary.json"))
    for n in (1, 2, 3):
        call = ModelCall.model_validate(run.read_json(f"model-{n:03d}.json"))
        assert call.attempt == n and call.messages[0]["role"] == "system"
    for name in ("env.json", "lock.json", "settings.json", "heatmap.png", "heatmap.svg", "run.log",
                 "candidates/000.cu", "candidates/003.cu"):
        assert run.file(name).is_file(), name
    replays = sorted(run.path.glob("best-case-*.json"))
    assert len(replays) == 4  # the correctness and performance cases, one request each
    for path in replays:
        request = EvalRequest.model_validate_json(path.read_text())
        assert "ok 0.5" in request.kernel.source and len(request.cases) == 1
        assert request.reference.source.startswith("// Trusted reference")
    env = run.read_json("env.json")
    assert env["gpu"]["name"] == "Scripted GPU" and env["finished_at"]


def test_a_second_run_gets_a_new_directory(tmp_path):
    run_agent(tmp_path, [answer("ok 0.9")])
    run, *_ = run_agent(tmp_path, [answer("ok 0.9")])
    assert run.path.name == "run-002"


def test_repair_after_a_compile_error_and_after_a_mismatch(tmp_path):
    script = [answer("compile_error"), answer("mismatch"), answer("ok 0.7")]
    run, summary, server, _ = run_agent(tmp_path, script)
    attempts = history(run)
    assert [a.status for a in attempts] == ["ok", "compile_error", "mismatch", "ok"]
    assert attempts[2].parent == 1 and attempts[3].parent == 2  # repairs build on the failed attempt
    second, third = (server.requests[i]["messages"][-1]["content"] for i in (1, 2))
    assert "compiler output" in second and 'identifier "x" is undefined' in second
    assert "RESULT: compile_error" in second  # the failing source goes back for repair
    assert "first wrong element of c at (30, 0): expected 1.5, got 0.0" in third
    assert summary.rejected_by_reason == {"compile_error": 1, "mismatch": 1}
    assert summary.best_attempt == 3


GARBAGE = [
    ("prose only", "I think we should use shared memory tiling.", "no JSON block"),
    ("broken json", f"```cuda\n{kernel('ok 0.5')}```\n```json\n{{\"launch\": {{\"grid\": [1,}}\n```", "not valid JSON"),
    ("missing launch", f"```cuda\n{kernel('ok 0.5')}```\n```json\n{{\"rationale\": \"x\"}}\n```", "'launch'"),
    ("no code", '```json\n{"launch": {"grid": [1], "block": [1]}}\n```', "no ```cuda block"),
    ("wrong entry", answer("ok 0.5").replace("matmul_f32", "matmul"), "no 'extern \"C\" __global__ void matmul_f32"),
    ("wrong signature", answer("ok 0.5").replace("int k)", "long long k)"), "signature must be"),
    ("host code", answer("ok 0.5").replace("// RESULT", "int main() { return 0; }\n// RESULT"), "defines main()"),
    ("bad launch", answer("ok 0.5", launch={"grid": ["cdiv(q, 16)"], "block": [256]}), "unknown name 'q'"),
    ("unsafe launch", answer("ok 0.5", launch={"grid": ["__import__('os')"], "block": [256]}), "unknown function"),
    ("empty", "", "empty answer"),
]


@pytest.mark.parametrize("name,text,reason", GARBAGE, ids=[g[0] for g in GARBAGE])
def test_each_kind_of_garbage_is_a_recorded_rejection_and_the_run_goes_on(tmp_path, name, text, reason):
    run, summary, _, evaluator = run_agent(tmp_path, [text, answer("ok 0.6")])
    attempts = history(run)
    assert attempts[1].status == "rejected" and reason in attempts[1].reason, attempts[1].reason
    assert attempts[2].status == "ok" and summary.best_attempt == 2
    assert len(evaluator.attempts) == 2  # the garbage never reached the GPU
    assert summary.rejected_by_reason == {"rejected": 1}


def test_refusal_rate_limits_and_server_errors(tmp_path):
    script = [
        {"refusal": "I cannot help with that."},
        {"status": 429}, {"status": 429}, {"status": 429},  # retried twice, then given up
        {"status": 500}, answer("ok 0.5"),  # one retry, then an answer
    ]
    run, summary, _, _ = run_agent(tmp_path, script, budget=Budget(max_iterations=3))
    attempts = history(run)
    assert attempts[1].status == "rejected" and "refused: I cannot help" in attempts[1].reason
    assert attempts[2].status == "rejected" and "RateLimitError" in attempts[2].reason
    assert attempts[3].status == "ok"
    calls = [ModelCall.model_validate(run.read_json(f"model-{n:03d}.json")) for n in (1, 2, 3)]
    assert [c.retries for c in calls] == [0, 2, 1]
    assert summary.totals.model_calls == 6


def test_tool_calls_are_answered_and_recorded(tmp_path):
    script = [{"tool_calls": [{"name": "gpu_info"}]}, answer("ok 0.5")]
    run, summary, server, _ = run_agent(tmp_path, script, budget=Budget(max_iterations=1))
    call = ModelCall.model_validate(run.read_json("model-001.json"))
    assert call.tool_calls[0]["name"] == "gpu_info" and call.tool_calls[0]["result"]["sm_count"] == 132
    tool_message = server.requests[1]["messages"][-1]
    assert tool_message["role"] == "tool" and "Scripted GPU" in tool_message["content"]
    assert summary.best_attempt == 1 and summary.totals.model_calls == 2


@pytest.mark.parametrize(
    "budget,prices,reason,attempts",
    [
        (Budget(max_iterations=9, max_model_calls=2), None, "model-call budget exhausted", 3),
        (Budget(max_iterations=9, max_cost_usd=0.002), {"gpt-5-mini": {"input": 1.0, "output": 1.0}},
         "cost budget exhausted", 3),
        (Budget(max_iterations=9, time_limit_s=1e-6), None, "time limit reached", 1),
        (Budget(max_iterations=9, patience=2), None, "no improvement for 2 attempts", 4),
    ],
)
def test_budget_stops(tmp_path, budget, prices, reason, attempts):
    script = [answer("ok 0.5"), answer("ok 0.9"), answer("ok 0.8"), answer("ok 0.7"), answer("ok 0.6")]
    run, summary, _, _ = run_agent(tmp_path, script, budget=budget, prices=prices)
    assert summary.stop_reason == reason
    assert summary.attempts == attempts


def test_holdout_cases_and_the_key_never_leave_the_process(tmp_path):
    run, _, server, evaluator = run_agent(tmp_path, [answer("ok 0.5"), answer("compile_error")])
    bodies = json.dumps(server.requests)
    assert "holdout" not in bodies and "515" not in bodies
    assert all(c.role != "holdout" for r in evaluator.requests for c in r.cases)
    auth = {k.lower(): v for k, v in server.headers[0].items()}["authorization"]
    assert auth == f"Bearer {SECRET}"  # it was used ...
    for path in run.path.rglob("*"):  # ... and written nowhere
        if path.is_file():
            assert SECRET not in path.read_bytes().decode(errors="replace"), path


RESUMABLE = """
import sys
from pathlib import Path
sys.path.insert(0, {root!r})
from cudaopt.record.runs import Budget
from cudaopt.agent.model import ModelSettings
from cudaopt.optimize import start_or_resume
from cudaopt.record.runs import ExperimentArgs
from tests.scripted import ScriptedEvaluator
settings = ModelSettings(model="openai:gpt-5-mini", base_url={url!r}, max_retries=0)
start_or_resume(ExperimentArgs(config={config!r}), settings, Budget(max_iterations=3), Path({results!r}),
                ScriptedEvaluator())
"""


def test_resume_after_the_process_is_killed(tmp_path):
    results = tmp_path / "results"
    script = [answer("ok 0.8"), answer("slow 60")]  # the second candidate hangs in "evaluation"
    with FakeOpenAI(script) as server:
        code = RESUMABLE.format(root=str(ROOT), url=server.url, config=str(SGEMM / "experiment.json"),
                                results=str(results))
        proc = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, env=dict(os.environ))
        run_dir = results / "run-001"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if (run_dir / "model-002.json").exists():
                break
            time.sleep(0.1)
        time.sleep(0.5)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    done = History.model_validate(json.loads((run_dir / "history.json").read_text())).attempts
    assert [a.id for a in done] == [0, 1]  # the attempt in flight is the only loss
    run, summary, _, _ = run_agent(tmp_path, [answer("ok 0.5"), answer("ok 0.7")], budget=Budget(max_iterations=3),
                                   resume=run_dir)
    attempts = history(run)
    assert run.path == run_dir and [a.id for a in attempts] == [0, 1, 2, 3]
    assert summary.best_attempt == 2 and summary.stop_reason == "iterations exhausted"
    assert "resumed with 2 attempt(s)" in run.file("run.log").read_text()


def test_resume_refuses_a_changed_experiment(tmp_path):
    import shutil

    from cudaopt.errors import ExperimentError

    folder = tmp_path / "exp"
    shutil.copytree(SGEMM, folder)
    with FakeOpenAI([answer("ok 0.9")]) as server:
        settings = ModelSettings(model="openai:gpt-5-mini", base_url=server.url)
        run, _ = start_or_resume(ExperimentArgs(config=str(folder / "experiment.json")), settings,
                                 Budget(max_iterations=1), tmp_path / "results", ScriptedEvaluator())
    (folder / "reference.cu").write_text((folder / "reference.cu").read_text() + "\n// changed\n")
    with pytest.raises(ExperimentError, match="lock.json: lock: the reference, the input cases"):
        start_or_resume(ExperimentArgs(), ModelSettings(), Budget(max_iterations=2), tmp_path / "results",
                        ScriptedEvaluator(), resume=run.path)


def test_ctrl_c_records_the_finished_attempts_and_the_stop_reason(tmp_path):
    with pytest.raises(KeyboardInterrupt):
        run_agent(tmp_path, [answer("ok 0.7"), answer("interrupt")])
    run = tmp_path / "results" / "run-001"
    summary = Summary.model_validate_json((run / "summary.json").read_text())
    assert summary.stop_reason == "interrupted" and summary.best_attempt == 1
    assert [a.status for a in History.model_validate_json((run / "history.json").read_text()).attempts] == ["ok", "ok"]
    assert (run / "heatmap.png").is_file()


def test_model_errors_in_a_row_stop_the_run_and_say_why(tmp_path):
    script = [{"status": 400, "message": "bad request one"}, {"status": 400, "message": "bad request two"},
              {"status": 400, "message": "bad request three"}, answer("ok 0.5")]
    run, summary, _, evaluator = run_agent(tmp_path, script, budget=Budget(max_iterations=9, max_model_errors=3))
    assert summary.stop_reason.startswith("model failure: 3 model errors in a row (last: ")
    assert "400" in summary.stop_reason and "bad request three" in summary.stop_reason
    assert [a.status for a in history(run)] == ["ok", "rejected", "rejected", "rejected"]
    assert len(evaluator.attempts) == 1  # only the baseline reached the GPU


def test_an_answer_between_model_errors_resets_the_count(tmp_path):
    script = [{"status": 400}, {"status": 400}, answer("ok 0.5"), {"status": 400}, {"status": 400}]
    _, summary, _, _ = run_agent(tmp_path, script, budget=Budget(max_iterations=5, max_model_errors=3))
    assert summary.stop_reason == "iterations exhausted"


def test_refused_credentials_stop_at_once(tmp_path):
    script = [{"status": 401, "message": "Incorrect API key provided"}, answer("ok 0.5")]
    run, summary, server, _ = run_agent(tmp_path, script, budget=Budget(max_iterations=5))
    assert summary.stop_reason.startswith("model failure: ") and "AuthenticationError" in summary.stop_reason
    assert "Incorrect API key" in summary.stop_reason
    assert len(server.requests) == 1  # not retried
    assert SECRET not in (run.path / "summary.json").read_text()


@pytest.mark.parametrize("name, content, field", [
    ("lock.json", "{garbage", "lock.json: line 1"),
    ("history.json", '{"attempts": [{"id": 0', "history.json: line 1"),
    ("history.json", '{"attempts": [{"id": "zero"}]}', "history.json: attempts[0].id"),
    ("settings.json", "[]", "settings.json: Input should be an object"),
])
def test_resuming_a_broken_run_is_bad_input_before_the_gpu(tmp_path, name, content, field):
    from cudaopt.errors import ExperimentError

    run, _, _, _ = run_agent(tmp_path, [answer("ok 0.5")], budget=Budget(max_iterations=1))
    run.file(name).write_text(content)
    evaluator = ScriptedEvaluator()
    with pytest.raises(ExperimentError) as err:
        start_or_resume(ExperimentArgs(), ModelSettings(), Budget(max_iterations=2), tmp_path / "results", evaluator,
                        resume=run.path)
    assert field in str(err.value) and "\n" not in str(err.value)
    assert evaluator.requests == []  # the worker was never asked for anything


def test_after_the_baseline_candidates_get_timeouts_scaled_from_it(tmp_path):
    _, _, _, evaluator = run_agent(tmp_path, [answer("ok 0.8"), answer("ok 0.5")])
    first, *later = evaluator.requests
    assert first.timeouts.cases == {} and first.timeouts.check_s == 300  # nothing measured yet
    for request in later:
        # the scripted baseline: square-4096 checks in 0.4 s and times in 1.71 s
        assert request.timeouts.limit("check", "square-4096") == 10  # the floor
        assert request.timeouts.limit("timing", "square-4096") == pytest.approx(34.2)
        assert request.timeouts.limit("timing", "odd-31x37x29") == 300  # never timed in the baseline


def test_the_digest_shows_why_attempts_failed_and_the_baseline_launch(tmp_path):
    script = ["I think we should use shared memory tiling.", answer("mismatch"), answer("ok 0.5")]
    run, _, server, _ = run_agent(tmp_path, script)
    third = server.requests[2]["messages"][-1]["content"]
    digest = third.split("Attempts so far:\n")[1].split("\n\n")[0].splitlines()
    assert digest[1].startswith("- #1 (from #0): rejected; why: no JSON block"), digest
    assert digest[2].startswith("- #2 (from #0): mismatch; an idea; why: case odd: mismatch"), digest
    # the baseline is still the best: its launch is the input cases' own, not null
    assert ('Its launch configuration: {"grid": ["cdiv(n, 16)", "cdiv(m, 16)"], "block": [16, 16], '
            '"shared_bytes": 0} (the input cases\' launch)') in third
    assert "null" not in third
