"""`cudaopt guard record` and `guard check` on the command line, the GPU worker scripted: exit
statuses, JUnit XML, Markdown, --json, and bad input before any GPU work."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest
from typer.testing import CliRunner

from cudaopt.cli import app
from cudaopt.guard.files import GuardReport, read_guard
from tests.conftest import gpu_present
from tests.scripted import ScriptedEvaluator, kernel

runner = CliRunner(env={"COLUMNS": "200"})
CASES = ["odd-31x37x29", "square-256", "rect-384x256x320", "square-4096", "holdout-515x261x1031",
         "holdout-96x3072x1536"]


@pytest.fixture
def requests(monkeypatch):
    """The GPU worker, scripted; the requests it was sent."""
    from cudaopt.pool import pools

    scripted = ScriptedEvaluator()
    monkeypatch.setattr(pools, "open_pool", lambda devices, ray=None, log_dir=None: scripted)
    return scripted.requests


@pytest.fixture
def recorded(example, requests):
    """A guard recorded from the command line: (folder, guard file)."""
    folder, _ = example
    (folder / "kernels").mkdir()
    (folder / "kernels" / "k.cu").write_text(kernel("ok 0.5"))
    (folder / "guards").mkdir()
    result = runner.invoke(app, ["guard", "record", "--config", str(folder / "experiment.json"), "--kernel",
                                 str(folder / "kernels" / "k.cu"), "--out", str(folder / "guards" / "k.json")])
    assert result.exit_code == 0, result.output
    requests.clear()
    return folder, folder / "guards" / "k.json"


def old(folder, result: str):
    path = folder / "old.cu"
    path.write_text(kernel(result))
    return str(path)


def error_line(result):
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1, result.output
    return lines[0]


def test_guard_is_a_command():
    assert "guard" in runner.invoke(app, ["--help"]).output
    result = runner.invoke(app, ["guard", "--help"])
    assert result.exit_code == 0 and "record" in result.output and "check" in result.output


def test_record_writes_the_guard_and_shows_the_figures(recorded):
    folder, guard = recorded
    baseline = read_guard(guard)
    assert baseline.kernel.file == "../kernels/k.cu" and baseline.experiment.config == "../experiment.json"
    assert [c.name for c in baseline.cases] == ["square-256", "rect-384x256x320", "square-4096"]


def test_record_of_a_failing_kernel_exits_1_and_keeps_the_old_guard(recorded):
    folder, guard = recorded
    before = guard.read_text()
    (folder / "kernels" / "bad.cu").write_text(kernel("mismatch"))
    result = runner.invoke(app, ["guard", "record", "--config", str(folder / "experiment.json"), "--kernel",
                                 str(folder / "kernels" / "bad.cu"), "--out", str(guard)])
    assert result.exit_code == 1, result.output
    assert "odd-31x37x29: mismatch" in result.output and "nothing recorded" in result.output
    assert guard.read_text() == before


def test_record_from_a_run_directory_takes_its_winner(example, requests, tmp_path):
    from cudaopt.agent.model import ModelSettings
    from cudaopt.optimize import start_or_resume
    from cudaopt.record.runs import Budget, ExperimentArgs
    from tests.fake_openai import FakeOpenAI
    from tests.scripted import ScriptedEvaluator, answer

    folder, _ = example
    with FakeOpenAI([answer("ok 0.5", "register blocking")]) as server:
        run, _ = start_or_resume(ExperimentArgs(config=str(folder / "experiment.json")),
                                 ModelSettings(base_url=server.url), Budget(max_iterations=1), tmp_path / "results",
                                 ScriptedEvaluator())
    out = folder / "run-guard.json"
    result = runner.invoke(app, ["guard", "record", str(run.path), "--out", str(out)])
    assert result.exit_code == 0, result.output
    baseline = read_guard(out)
    assert (out.parent / baseline.kernel.file).resolve() == (run.path / "best.cu").resolve()
    assert baseline.kernel.launch is not None and baseline.cases[0].median_us == 10.0
    both = runner.invoke(app, ["guard", "record", str(run.path), "--kernel", "x.cu"])
    assert both.exit_code == 2 and "not both" in error_line(both)


def test_check_passes_against_itself_and_writes_junit_markdown_and_json(recorded):
    folder, guard = recorded
    paths = {k: folder / f"out.{k}" for k in ("xml", "md", "json")}
    result = runner.invoke(app, ["guard", "check", str(guard), "--against", old(folder, "ok 0.5"), "--junit",
                                 str(paths["xml"]), "--markdown", str(paths["md"]), "--json", str(paths["json"])])
    assert result.exit_code == 0, result.output
    assert "PASSED" in result.output and "guard: passed (1 guard file(s))" in result.output
    suites = ET.parse(paths["xml"]).getroot()
    assert suites.get("tests") == "6" and suites.get("failures") == "0"
    assert [t.get("name") for t in suites.iter("testcase")] == CASES
    markdown = paths["md"].read_text()
    assert markdown.startswith("## cudaopt guard: passed")
    assert "| square-4096 | performance | within | 8500.00 | 8500.00 | +0.0% | +0.0% to +0.0% |" in markdown
    report = GuardReport.model_validate_json(paths["json"].read_text())
    assert report.passed and report.checks[0].mode == "ab"


def test_a_regression_exits_1_with_the_figures_in_junit_and_markdown(recorded):
    folder, guard = recorded
    xml, md = folder / "j.xml", folder / "s.md"
    result = runner.invoke(app, ["guard", "check", str(guard), "--against", old(folder, "ok 0.45"),
                                 "--junit", str(xml), "--markdown", str(md)])
    assert result.exit_code == 1, result.output
    assert "square-4096: regressed: slower beyond the limit: time +11.1%" in result.output
    suite = ET.parse(xml).getroot().find("testsuite")
    assert suite.get("failures") == "3" and suite.get("tests") == "6"
    failure = next(t for t in suite.iter("testcase") if t.get("name") == "square-4096").find("failure")
    assert failure.get("type") == "regressed" and "8500.00 µs now, 7650.00 µs" in failure.get("message")
    assert "medians now (µs): 8500.000" in failure.text
    passed = next(t for t in suite.iter("testcase") if t.get("name") == "odd-31x37x29")
    assert passed.find("failure") is None and passed.find("system-out").text.startswith("passed: checked")
    assert "| square-4096 | performance | **regressed** |" in md.read_text()
    assert md.read_text().startswith("## cudaopt guard: FAILED")


def test_json_to_standard_output_keeps_the_tables_on_standard_error(recorded):
    folder, guard = recorded
    result = CliRunner(env={"COLUMNS": "200"}).invoke(app, ["guard", "check", str(guard), "--json", "-"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["schema_version"] == 1 and report["checks"][0]["mode"] == "recorded"
    assert "guard: passed" in result.stderr


def test_many_guard_files_against_a_ref(recorded):
    folder, guard = recorded
    import subprocess

    git = ["git", "-C", str(folder), "-c", "user.name=t", "-c", "user.email=t@example.com"]
    second = folder / "guards" / "k2.json"
    second.write_text(guard.read_text())
    for args in (["init", "-q"], ["add", "."], ["commit", "-q", "-m", "guards"]):
        subprocess.run(git + args, check=True, capture_output=True)
    result = runner.invoke(app, ["guard", "check", str(guard), str(second), "--against-ref", "HEAD", "--quick"])
    assert result.exit_code == 0, result.output
    assert result.output.count("PASSED") == 2 and "guard: passed (2 guard file(s))" in result.output


@pytest.mark.parametrize("extra,words", [
    (["--against", "a.cu", "--against-ref", "HEAD"], "--against: give --against or --against-ref, not both"),
    (["--max-slowdown", "3"], "--max-slowdown: '3': give a percentage below 100% (3%) or a fraction"),
    (["--max-slowdown", "three"], "is not a percentage (3%) or a fraction (0.03)"),
    (["--other-gpu", "ignore"], "--other-gpu: 'ignore' is not fail or skip"),
    (["--junit", "/nonexistent/folder/j.xml"], "--junit: /nonexistent/folder/j.xml: folder /nonexistent/folder "
                                               "does not exist"),
    (["--against", "/nonexistent/old.cu"], "/nonexistent/old.cu: --against: not found"),
    (["--against-ref", "HEAD"], "not a git repository"),
])
def test_bad_input_is_one_line_exit_2_and_no_gpu_work(recorded, requests, extra, words):
    folder, guard = recorded
    result = runner.invoke(app, ["guard", "check", str(guard), *extra])
    assert result.exit_code == 2, result.output
    assert words in error_line(result)
    assert requests == []


def test_against_with_many_guard_files_is_bad_input(recorded, requests):
    folder, guard = recorded
    result = runner.invoke(app, ["guard", "check", str(guard), str(guard), "--against", old(folder, "ok 0.5")])
    assert result.exit_code == 2 and "names one old kernel, but 2 guard files were given" in error_line(result)


def test_a_broken_guard_file_among_many_stops_before_any_gpu_work(recorded, requests):
    folder, guard = recorded
    broken = folder / "guards" / "broken.json"
    broken.write_text(guard.read_text().replace('"schema_version": 1', '"schema_version": 9', 1))
    result = runner.invoke(app, ["guard", "check", str(guard), str(broken)])
    assert result.exit_code == 2 and f"error: {broken}: schema_version:" in error_line(result)
    assert requests == []


@pytest.mark.skipif(gpu_present(), reason="needs a machine without a GPU")
def test_check_without_a_gpu_exits_3(example):
    from cudaopt.guard.record import record
    from cudaopt.record.runs import ExperimentArgs
    from tests.scripted import ScriptedEvaluator, trial_of

    folder, _ = example
    (folder / "k.cu").write_text(kernel("ok 0.5"))
    args = ExperimentArgs(config=str(folder / "experiment.json"))
    done = record(trial_of(args, folder / "k.cu", kernel("ok 0.5")), ScriptedEvaluator(), out=folder / "g.json")
    (folder / "g.json").write_text(done.baseline.to_json())
    result = runner.invoke(app, ["guard", "check", str(folder / "g.json")])
    assert result.exit_code == 3 and "did not start" in result.output
