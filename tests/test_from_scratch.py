"""A run without an initial kernel: the model writes the first one, speed-ups are over the first
vendor, and the KernelBench metrics (and fast_p over runs) come from the PyTorch vendors (CPU)."""

from __future__ import annotations

import json
import shutil

import pytest
from typer.testing import CliRunner

from cudaopt.agent.model import ModelSettings
from cudaopt.cli import app
from cudaopt.errors import ExperimentError
from cudaopt.optimize import Options, start_or_resume
from cudaopt.record.runs import Budget, ExperimentArgs
from cudaopt.record.files import History, Summary
from cudaopt.winner.replay import replay
from tests.conftest import SGEMM
from tests.fake_openai import FakeOpenAI
from tests.scripted import BASE_US, ScriptedEvaluator, answer

runner = CliRunner(env={"COLUMNS": "200"})
VENDORS = [{"file": "vendor.py", "function": "sgemm", "label": "PyTorch eager", "pytorch": "eager"},
           {"file": "vendor.py", "function": "sgemm", "label": "torch.compile", "pytorch": "compile"}]


@pytest.fixture(autouse=True)
def api_key(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")


def experiment(tmp_path, vendors=VENDORS) -> str:
    folder = tmp_path / "exp"
    shutil.copytree(SGEMM, folder)
    config = json.loads((folder / "experiment.json").read_text())
    del config["initial_kernel"], config["tune"]
    config["vendor"] = vendors
    (folder / "experiment.json").write_text(json.dumps(config))
    return str(folder / "experiment.json")


def run_agent(tmp_path, script, strategy="agent", vendors=VENDORS):
    evaluator = ScriptedEvaluator()
    with FakeOpenAI(script) as server:
        run, summary = start_or_resume(ExperimentArgs(config=experiment(tmp_path, vendors)),
                                       ModelSettings(base_url=server.url), Budget(max_iterations=len(script)),
                                       tmp_path / "results", evaluator, Options(strategy=strategy))
    return run, summary, server, evaluator


def test_the_model_writes_the_first_kernel_and_is_measured_against_the_first_vendor(tmp_path):
    run, summary, server, evaluator = run_agent(tmp_path, [answer("ok 0.5", "first"), answer("ok 0.4", "better")])
    attempts = History.model_validate(run.read_json("history.json")).attempts
    baseline = attempts[0]
    assert baseline.kind == "baseline" and baseline.source_file is None and baseline.score_us is None
    assert not run.file("candidates/000.cu").exists()
    first = evaluator.requests[0]
    assert first.kernel is None and [v.label for v in first.vendors] == ["PyTorch eager", "torch.compile"]
    assert summary.baseline == "vendor: PyTorch eager" and summary.best_attempt == 2
    big = next(c for c in summary.cases if c.name == "square-4096")
    assert big.baseline_median_us == pytest.approx(BASE_US["square-4096"] * 0.6)  # the eager vendor's median
    assert big.speedup == pytest.approx(0.6 / 0.4) and summary.speedup == pytest.approx(1.5)
    assert [v.speedup for v in summary.vendors] == pytest.approx([1.5, 3.0])
    kb = summary.kernelbench
    assert kb.correct and kb.speedup_vs_eager == pytest.approx(1.5) and kb.speedup_vs_compile == pytest.approx(3.0)
    # the first proposal is written from the description, the cases and the reference
    system, user = (m["content"] for m in server.requests[0]["messages"][:2])
    assert system.startswith("You are a CUDA performance engineer. You write a CUDA kernel")
    assert "Reference implementation (reference.cu" in user and "// Trusted reference" in user
    assert "Baseline: PyTorch eager (no initial kernel" in user and "Write the first kernel" in user
    assert "square-4096: median 10200.00 us" in user
    assert "Best so far (#1)" in server.requests[1]["messages"][1]["content"]
    # no kernel measured yet: fixed limits; then scaled from the first kernel that passed
    assert evaluator.requests[1].timeouts.cases == {} and evaluator.requests[2].timeouts.cases
    html = " ".join(run.file("report.html").read_text().split())
    assert 'id="baseline"' in html and "the baseline every speed-up is over is the vendor: PyTorch eager" in html
    assert 'id="kernelbench"' in html and "3.00×" in html
    from cudaopt.cli.render_experiments import summary_lines, summary_table
    from tests.test_report import _text

    assert "baseline: PyTorch eager (no initial kernel)" in _text(summary_table(summary))
    assert any("kernelbench: correct yes, speed-up over PyTorch eager 1.50×, over torch.compile 3.00×" in line
               for line in summary_lines(summary))


def test_a_replay_measures_the_winner_against_the_vendor_in_its_own_requests(tmp_path):
    run, _, _, _ = run_agent(tmp_path, [answer("ok 0.5", "first")])
    evaluator = ScriptedEvaluator()
    outcome = replay(run.path, evaluator, repeats=3)
    assert all(r.kernel is not None and r.vendors for r in evaluator.requests)  # no baseline kernel to run
    big = next(c for c in outcome.cases if c.name == "square-4096")
    assert big.baseline_medians_us == [BASE_US["square-4096"] * 0.6] * 3
    assert big.speedup_vs_baseline == pytest.approx(1.2) and outcome.beats_baseline


def test_without_a_model_or_a_vendor_there_is_nothing_to_start_from(tmp_path):
    with pytest.raises(ExperimentError, match="initial_kernel: missing: --strategy tune starts from a kernel"):
        run_agent(tmp_path, [], strategy="tune")
    with pytest.raises(ExperimentError, match="no vendor to measure the model's kernels against"):
        run_agent(tmp_path / "no-vendor", [answer("ok 0.5")], vendors=[])
    result = runner.invoke(app, ["optimize", "--config", experiment(tmp_path / "cli"), "--strategy", "tune"])
    assert result.exit_code == 2 and "let a model write the first one" in result.output
    assert not (tmp_path / "results").exists()


def test_fast_p_counts_the_runs_that_are_correct_and_faster(tmp_path):
    run, _, _, _ = run_agent(tmp_path, [answer("ok 0.5", "first")])  # 1.2x over eager, 2.4x over compile
    results = run.path.parent
    slower = results / "run-002"
    shutil.copytree(run.path, slower)
    summary = json.loads((slower / "summary.json").read_text())
    summary["kernelbench"]["speedup_vs_eager"] = 0.8
    summary["kernelbench"]["changes"] = ["big: output out: atol 3.8e-08 instead of 0.01"]  # imported, made stricter
    (slower / "summary.json").write_text(json.dumps(summary))
    unverified = results / "run-003"
    shutil.copytree(run.path, unverified)
    summary = json.loads((unverified / "summary.json").read_text())
    summary["kernelbench"]["changes"] = []  # imported with KernelBench's own checks
    (unverified / "summary.json").write_text(json.dumps(summary))
    (unverified / "verify.json").write_text(json.dumps({"schema_version": 1, "passed": False, "status": "mismatch",
                                                        "attempt": 1, "seed": 1, "cases": []}))
    out = tmp_path / "fast_p.json"
    result = runner.invoke(app, ["fast-p", str(results), "--p", "0", "--p", "1", "--json", str(out)])
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    assert [r["correct"] for r in report["runs"]] == [True, True, False]  # a failed holdout verify is incorrect
    assert [(f["threshold"], f["count"]) for f in report["fast_p"]] == [(0.0, 2), (1.0, 1)]
    assert report["fast_p"][1]["fraction"] == pytest.approx(1 / 3)
    assert "fast_p over eager" in result.output
    assert [(r["checks"], r["changes"]) for r in report["runs"]] == [
        ("unknown", []), ("changed", ["big: output out: atol 3.8e-08 instead of 0.01"]), ("kernelbench", [])]
    assert "stricter (1 changes)" in result.output and "KernelBench's" in result.output
    compiled = runner.invoke(app, ["fast-p", str(run.path), "--baseline", "compile", "--p", "2", "--json", "-"])
    assert json.loads(compiled.stdout)["fast_p"][0]["count"] == 1  # 2.4x over torch.compile


def test_fast_p_refuses_a_run_without_pytorch_baselines(tmp_path):
    run, _, _, _ = run_agent(tmp_path, [answer("ok 0.5")], vendors=[{"file": "vendor.py", "function": "sgemm",
                                                                       "label": "cuBLAS"}])
    assert Summary.model_validate(run.read_json("summary.json")).kernelbench is None
    result = runner.invoke(app, ["fast-p", str(run.path)])
    assert result.exit_code == 2 and "summary.json: kernelbench: the run has no PyTorch eager vendor" in result.output
    result = runner.invoke(app, ["fast-p", str(tmp_path / "nothing")])
    assert result.exit_code == 2 and "nothing: not found" in result.output


def test_a_summary_with_one_vendor_in_flat_fields_still_reads(tmp_path):
    run, _, _, _ = run_agent(tmp_path, [answer("ok 0.5")])
    data = json.loads(run.file("summary.json").read_text())
    data.pop("vendors"), data.pop("kernelbench"), data.pop("baseline")
    data.update(schema_version=1, vendor="cuBLAS", vendor_score_us=12.0, speedup_vs_vendor=1.2)
    for case in data["cases"]:
        case.pop("vendors")
        case.update(vendor_median_us=None, vendor_status=None, speedup_vs_vendor=None)
    data["cases"][1].update(vendor_median_us=12.0, vendor_status="ok", speedup_vs_vendor=1.2)
    old = Summary.model_validate(data)
    assert [(v.label, v.score_us, v.speedup) for v in old.vendors] == [("cuBLAS", 12.0, 1.2)]
    assert old.cases[1].vendors[0].median_us == 12.0 and old.cases[0].vendors[0].status is None
    assert old.baseline == "initial kernel" and old.kernelbench is None
    data.update(vendor=None, vendor_score_us=None, speedup_vs_vendor=None)
    assert Summary.model_validate(data).vendors == []
