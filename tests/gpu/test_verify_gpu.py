"""`cudaopt verify` and `cudaopt replay` on the GPU, on a short tuning run of the example."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from cudaopt.cli import app
from tests.conftest import SGEMM

pytestmark = pytest.mark.gpu
runner = CliRunner(env={"COLUMNS": "200", "OPENAI_API_KEY": ""})


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    results = tmp_path_factory.mktemp("results")
    result = runner.invoke(app, ["optimize", "--config", str(SGEMM / "experiment.json"), "--strategy", "tune",
                                 "--max-evals", "2", "--results-dir", str(results)])
    assert result.exit_code == 0, result.output
    return results / "run-001"


def test_verify_a_tuned_winner_on_the_holdout(run):
    result = runner.invoke(app, ["verify", str(run), "--seed", "99", "--repeats", "2"])
    assert result.exit_code == 0, result.output
    outcome = json.loads((run / "verify.json").read_text())
    assert outcome["passed"] and outcome["seed"] == 99
    assert [c["name"] for c in outcome["cases"]] == ["holdout-515x261x1031", "holdout-96x3072x1536"]
    assert all(c["input_sets_checked"] == 3 for c in outcome["cases"])
    # both declare their work: timed beside the initial kernel and cuBLAS, twice each
    assert [c["name"] for c in outcome["timed"]] == ["holdout-515x261x1031", "holdout-96x3072x1536"]
    for case in outcome["timed"]:
        assert case["status"] == "ok" and len(case["winner_medians_us"]) == 2, case
        assert all(case["baseline_medians_us"]) and all(case["vendor_medians_us"])
        assert case["speedup_vs_baseline"] > 0 and case["speedup_vs_vendor"] > 0 and not case["regression"]
    assert "holdout: passed, 2 shape(s) timed" in (run / "report.html").read_text()


def test_a_shape_sweep_on_the_gpu(run, tmp_path):
    shapes = tmp_path / "shapes.json"
    shapes.write_text(json.dumps({"m": [64, 300], "n": [128], "k": [96, 1030]}))
    result = runner.invoke(app, ["verify", str(run), "--shapes", str(shapes), "--repeats", "1"])
    outcome = json.loads((run / "verify.json").read_text())
    swept = [c for c in outcome["timed"] if c["origin"] == "shapes"]
    assert [c["name"] for c in swept] == ["m=64,n=128,k=96", "m=64,n=128,k=1030", "m=300,n=128,k=96",
                                          "m=300,n=128,k=1030"]
    assert all(c["status"] == "ok" and c["winner_us"] and c["baseline_us"] and c["vendor_us"] for c in swept), swept
    assert result.exit_code == (1 if outcome["regressions"] else 0), result.output
    assert 'id="shapes"' in (run / "report.html").read_text()


def test_verify_sanitize_runs_every_tool_on_the_winner(run):
    from cudaopt.winner.sanitize import find_sanitizer

    try:
        find_sanitizer()
    except Exception:
        pytest.skip("compute-sanitizer not installed")
    result = runner.invoke(app, ["verify", str(run), "--seed", "5", "--sanitize"])
    assert result.exit_code == 0, result.output
    outcome = json.loads((run / "verify.json").read_text())
    assert [t["tool"] for t in outcome["sanitize"]] == ["memcheck", "racecheck", "initcheck", "synccheck"]
    assert all(t["passed"] and t["errors"] == 0 for t in outcome["sanitize"]), outcome["sanitize"]
    assert "compute-sanitizer memcheck: ok" in result.output


def test_replay_a_run_beside_its_baseline(run):
    result = runner.invoke(app, ["replay", str(run), "--repeats", "2"])
    assert result.exit_code == 0, result.output
    outcome = json.loads((run / "replay.json").read_text())
    assert outcome["passed"] and outcome["environment_differences"] == []
    timed = [c for c in outcome["cases"] if c["role"] == "performance"]
    assert len(timed) == 3 and all(c["now_us"] and len(c["baseline_medians_us"]) == 2 for c in timed)
