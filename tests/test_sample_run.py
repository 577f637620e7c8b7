"""The sample run shipped with the docs reads as docs/sample-run.md says, without a GPU: its
summary's figures, `report` and `export --unverified` on a copy of it, run from the repository's
root as the page says, and the page's own commands as written. The run names its experiment by
paths relative to that root, so it reads the same in every checkout."""

from __future__ import annotations

import json
import re
import shlex
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cudaopt.cli import app

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "docs" / "sample-run" / "run-001"
PAGE = ROOT / "docs" / "sample-run.md"
runner = CliRunner(env={"COLUMNS": "200"})


@pytest.fixture
def run(tmp_path, monkeypatch):
    copy = tmp_path / "run-001"
    shutil.copytree(SAMPLE, copy)
    monkeypatch.chdir(ROOT)  # where the page runs its commands from
    return copy


def test_the_run_names_no_path_of_the_machine_it_was_recorded_on():
    for path in SAMPLE.glob("*.json"):
        text = path.read_text()
        assert not re.search(r'"/(work|home|root|tmp|Users)/', text), f"{path.name} names an absolute path"
    settings = json.loads((SAMPLE / "settings.json").read_text())
    assert (ROOT / settings["experiment"]["config"]).is_file()


def test_the_page_s_commands_run_as_written(tmp_path, monkeypatch):
    """Every `cudaopt` line of the page's shell blocks, but verify and replay (they need a GPU), with
    its copy of the run in a temporary folder instead of /tmp/sample."""
    monkeypatch.chdir(ROOT)
    shutil.copytree(SAMPLE.parent, tmp_path / "sample")
    blocks = re.findall(r"^```bash\n(.*?)^```", PAGE.read_text(), re.M | re.S)
    commands = [line.split("#")[0].strip() for block in blocks for line in block.splitlines()]
    commands = [c for c in commands if c.startswith("cudaopt ")]
    assert [c.split()[1] for c in commands] == ["report", "export", "export"]
    for command in commands:
        args = shlex.split(command.replace("/tmp/sample", str(tmp_path / "sample")))[1:]
        result = runner.invoke(app, args)
        assert result.exit_code == 0, f"{command}: {result.output}"
    assert (tmp_path / "sample" / "ops" / "matmul_f32.py").is_file()
    assert (tmp_path / "sample" / "run-001" / "report.html").is_file()


def test_a_run_whose_experiment_is_elsewhere_says_where_to_run_from(tmp_path, monkeypatch):
    shutil.copytree(SAMPLE, tmp_path / "run-001")
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["export", "run-001", "--to", "cuda", "--out", "out", "--unverified"])
    assert result.exit_code == 2
    assert "settings.json: experiment.config: examples/sgemm/experiment.json: not found; relative to the " \
           "current folder" in " ".join(result.output.split())


def test_the_summary_holds_what_the_walkthrough_quotes():
    summary = json.loads((SAMPLE / "summary.json").read_text())
    assert summary["best_attempt"] == 9 and summary["best_math"] == "FP32 CUDA cores"
    assert round(summary["baseline_score_us"], 2) == 165.11 and round(summary["best_score_us"], 2) == 58.93
    assert min(summary["audit"]["checked_launches_per_case"].values()) >= 11
    assert summary["audit"]["escape_bound"] < 1e-3
    assert summary["totals"]["model_calls"] == 0


def test_report_writes_the_page(run):
    result = runner.invoke(app, ["report", str(run)])
    assert result.exit_code == 0, result.output
    page = (run / "report.html").read_text()
    assert "matmul_f32" in page and "FP32 CUDA cores" in page


@pytest.mark.parametrize("target, written", [("torch", "matmul_f32.py"), ("cuda", "matmul_f32.cu")])
def test_export_unverified_writes_the_winner(run, tmp_path, target, written):
    out = tmp_path / "out"
    result = runner.invoke(app, ["export", str(run), "--to", target, "--out", str(out), "--unverified"])
    assert result.exit_code == 0, result.output
    assert (out / written).is_file()
    assert "#define BN 256" in (out / written).read_text()  # the winner's tunables, baked in
    first = (out / written).read_text().splitlines()[0]
    assert "not verified (exported with --unverified)" in first and "verified by cudaopt" not in first
