"""The sample run shipped with the docs reads as docs/sample-run.md says, without a GPU: its
summary's figures, `report` and `export --unverified` on a copy of it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cudaopt.cli import app

SAMPLE = Path(__file__).resolve().parents[1] / "docs" / "sample-run" / "run-001"
runner = CliRunner(env={"COLUMNS": "200"})


@pytest.fixture
def run(tmp_path):
    copy = tmp_path / "run-001"
    shutil.copytree(SAMPLE, copy)
    return copy


def test_the_summary_holds_what_the_walkthrough_quotes():
    summary = json.loads((SAMPLE / "summary.json").read_text())
    assert summary["best_attempt"] == 9 and summary["best_math"] == "FP32 CUDA cores"
    assert round(summary["baseline_score_us"], 2) == 166.11 and round(summary["best_score_us"], 2) == 60.89
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
