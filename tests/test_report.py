"""report.html: the ROI arithmetic, the verdict rule, the page itself, and a real browser."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest
from typer.testing import CliRunner

from cudaopt.agent.graph import Budget
from cudaopt.agent.model import ModelSettings
from cudaopt.cli import app
from cudaopt.optimize import ExperimentArgs, start_or_resume
from cudaopt.report.build import verdict
from cudaopt.report.roi import RoiInputs, compute
from tests.conftest import SGEMM
from tests.fake_openai import FakeOpenAI
from tests.scripted import answer


def test_roi_arithmetic():
    inputs = RoiInputs(engineer_hours=4, engineer_rate_usd=150, gpu_hour_usd=2.5, calls_per_month=3.6e6,
                       payback_window_months=6)
    roi = compute(inputs, "big", baseline_us=17000.0, best_us=3000.0, model_cost_usd=1.5, gpu_seconds=720)
    assert roi.ms_saved_per_call == pytest.approx(14.0)
    assert roi.pilot_cost_usd == pytest.approx(600 + 1.5 + 0.5)  # engineer + model + 0.2 GPU hours
    assert roi.saved_gpu_hours_per_month == pytest.approx(14.0)  # 14 ms x 3.6e6 / 3.6e6
    assert roi.monthly_saving_usd == pytest.approx(35.0)
    assert roi.payback_months == pytest.approx(602.0 / 35.0) and not roi.fits_window
    slower = compute(inputs, "big", baseline_us=10.0, best_us=12.0, model_cost_usd=0, gpu_seconds=0)
    assert slower.ms_saved_per_call == 0 and slower.payback_months is None and not slower.fits_window


def test_verdict_needs_holdout_replay_and_payback():
    roi = compute(RoiInputs(calls_per_month=1e9), "c", 1000.0, 500.0, 0.0, 0.0)
    assert verdict({"passed": True}, {"beats_baseline": True}, roi)[0] == "go"
    decision, reasons = verdict(None, {"beats_baseline": True}, roi)
    assert decision == "no-go" and "holdout: not verified yet" in reasons
    assert verdict({"passed": False}, {"beats_baseline": True}, roi)[0] == "no-go"
    assert verdict({"passed": True}, {"beats_baseline": False}, roi)[0] == "no-go"
    slow = compute(RoiInputs(calls_per_month=1), "c", 1000.0, 999.0, 10.0, 0.0)
    assert "longer than the window" in verdict({"passed": True}, {"beats_baseline": True}, slow)[1][-1]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    from tests.scripted import ScriptedEvaluator

    tmp = tmp_path_factory.mktemp("report")
    script = [answer("ok 0.8", "bigger tiles"), answer("compile_error"), answer("ok 0.5", "register blocking")]
    with FakeOpenAI(script) as server:
        run, _ = start_or_resume(ExperimentArgs(config=str(SGEMM / "experiment.json")),
                                 ModelSettings(base_url=server.url), Budget(max_iterations=3), tmp / "results",
                                 ScriptedEvaluator())
    return run.path


def test_every_run_gets_a_self_contained_report(run_dir):
    html = (run_dir / "report.html").read_text()
    for element in ('id="verdict"', 'id="cases"', 'id="progress"', 'id="heatmap"', 'id="roofline"',
                    'id="attempts"', 'id="usage"', 'id="roi"', 'id="environment"'):
        assert element in html, element
    assert "no-go" in html and "holdout: not verified yet" in html
    assert html.count("<svg") >= 3  # progress, heatmap, roofline, inline
    assert "<script" not in html and 'src="http' not in html and "<link" not in html  # works offline
    assert "square-4096" in html and "2.00×" in html
    assert "@@" in html and "RESULT: ok 0.5" in html  # the source diff against the parent
    assert "compile_error" in html and "identifier &#34;x&#34; is undefined" in html


def test_cudaopt_report_rebuilds_with_roi_inputs_and_verification(run_dir, tmp_path):
    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy)
    (copy / "verify.json").write_text(json.dumps({"passed": True}))
    (copy / "replay.json").write_text(json.dumps({"beats_baseline": True}))
    result = CliRunner().invoke(app, ["report", str(copy), "--calls-per-month", "1e9", "--gpu-hour-usd", "3",
                                      "--payback-window-months", "12"])
    assert result.exit_code == 0, result.output
    html = (copy / "report.html").read_text()
    assert '<div class="verdict">go</div>' in html and "payback: " in html and "within the window" in html
    assert CliRunner().invoke(app, ["report", str(tmp_path / "nothing")]).exit_code == 2


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.skipif(_chromium() is None, reason="Debian's chromium is not installed (.ci/run installs it)")
def test_the_report_renders_in_a_real_browser(run_dir, tmp_path):
    import matplotlib.image as mpimg

    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={tmp_path / 'profile'}"]
    url = (run_dir / "report.html").as_uri()
    shot = tmp_path / "report.png"
    subprocess.run([_chromium(), *flags, f"--screenshot={shot}", "--window-size=1200,1600", url],
                   check=True, capture_output=True, timeout=120)
    pixels = mpimg.imread(shot)
    assert pixels.shape[0] >= 1000 and pixels[..., :3].std() > 0.05  # not a blank page
    dom = subprocess.run([_chromium(), *flags, "--dump-dom", url], check=True, capture_output=True, text=True,
                         timeout=120).stdout
    for element in ('id="verdict"', 'id="cases"', 'id="progress"', 'id="heatmap"', 'id="roofline"'):
        assert element in dom
    assert "<svg" in dom


def test_a_speedup_above_ten_times_is_flagged_for_review(tmp_path):
    from tests.scripted import ScriptedEvaluator

    with FakeOpenAI([answer("ok 0.05", "too good to be true")]) as server:
        run, summary = start_or_resume(ExperimentArgs(config=str(SGEMM / "experiment.json")),
                                       ModelSettings(base_url=server.url), Budget(max_iterations=1),
                                       tmp_path / "results", ScriptedEvaluator())
    assert summary.review and summary.review[0].startswith("square-256: 20.0x over the baseline")
    assert 'id="review"' in (run.path / "report.html").read_text()
