"""report.html: the ROI arithmetic, the verdict rule, the page itself, and a real browser."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest
from typer.testing import CliRunner

from cudaopt.agent.model import ModelSettings
from cudaopt.cli import app
from cudaopt.config import RoiInputs
from cudaopt.optimize import start_or_resume
from cudaopt.record.runs import Budget, ExperimentArgs
from cudaopt.record.files import ReplayOutcome, VerifyOutcome
from cudaopt.report.build import verdict
from cudaopt.report.build import build
from cudaopt.report.roi import compute, roi_case
from tests.conftest import SGEMM
from tests.fake_openai import FakeOpenAI
from tests.scripted import ScriptedEvaluator, answer


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


def test_the_roi_case_is_the_one_named_else_the_slowest_with_a_note():
    latencies = {"small": 10.0, "big": 900.0, "mid": 80.0}
    assert roi_case("mid", latencies) == "mid" and roi_case(None, latencies) == "big"
    assert roi_case("square-4096", latencies) == "big" and roi_case("x", {}) is None
    assert compute(RoiInputs(case="mid"), "mid", 80.0, 40.0, 0.0, 0.0).note is None
    assert compute(RoiInputs(), "big", 900.0, 450.0, 0.0, 0.0).note is None
    note = compute(RoiInputs(case="square-4096"), "big", 900.0, 450.0, 0.0, 0.0).note
    assert note == ("roi.case 'square-4096' is not a timed performance case here: the slowest one, 'big', "
                    "pays the bill instead")


def verified(passed: bool = True) -> VerifyOutcome:
    return VerifyOutcome(passed=passed, status="ok" if passed else "mismatch", attempt=1, seed=7, cases=[])


def replayed(beats: bool = True) -> ReplayOutcome:
    return ReplayOutcome(passed=True, beats_baseline=beats, repeats=5)


def test_verdict_needs_holdout_replay_and_payback():
    roi = compute(RoiInputs(calls_per_month=1e9), "c", 1000.0, 500.0, 0.0, 0.0)
    assert verdict(verified(), replayed(), roi)[0] == "go"
    decision, reasons = verdict(None, replayed(), roi)
    assert decision == "no-go" and "holdout: not verified yet" in reasons
    assert verdict(verified(False), replayed(), roi)[0] == "no-go"
    assert verdict(verified(), replayed(False), roi)[0] == "no-go"
    slow = compute(RoiInputs(calls_per_month=1), "c", 1000.0, 999.0, 10.0, 0.0)
    assert "longer than the window" in verdict(verified(), replayed(), slow)[1][-1]


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
    # % of roofline: the bounding roof, from the case's compute and memory percentages
    best = json.loads((run_dir / "history.json").read_text())["attempts"][-1]
    roof = next(c["roofline"] for c in best["cases"] if c["name"] == "square-4096")
    assert roof["compute_pct"] > roof["memory_pct"] and f"{roof['compute_pct']:.1f}% compute" in html
    assert "@@" in html and "RESULT: ok 0.5" in html  # the source diff against the parent
    assert "compile_error" in html and "identifier &#34;x&#34; is undefined" in html


def test_the_report_says_where_the_runs_time_went(run_dir):
    from cudaopt.record.files import Summary

    spent = Summary.model_validate_json((run_dir / "summary.json").read_text()).time
    html = (run_dir / "report.html").read_text()
    table = html[html.index('id="time-spent"'):]
    table = table[:table.index("</table>")]
    assert "host and compile waits s" in table and f"<td>{spent.wall_s:.1f}</td>" in table
    assert f"<td>{spent.checks_s:.1f}</td><td>{spent.timing_s:.1f}</td>" in table and spent.wall_s > 0


def test_cudaopt_report_rebuilds_with_roi_inputs_and_verification(run_dir, tmp_path):
    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy)
    (copy / "verify.json").write_text(verified().to_json())
    (copy / "replay.json").write_text(replayed().to_json())
    result = CliRunner().invoke(app, ["report", str(copy), "--calls-per-month", "1e9", "--gpu-hour-usd", "3",
                                      "--payback-window-months", "12"])
    assert result.exit_code == 0, result.output
    html = (copy / "report.html").read_text()
    assert '<div class="verdict">go</div>' in html and "payback: " in html and "within the window" in html
    assert CliRunner().invoke(app, ["report", str(tmp_path / "nothing")]).exit_code == 2


def test_a_roi_case_the_run_did_not_time_falls_back_to_the_slowest_case_with_a_note(run_dir, tmp_path):
    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy)
    build(copy, RoiInputs(case="gone-8192"))
    html = (copy / "report.html").read_text()
    roi = html[html.index('<div id="roi">'):]
    assert "case paying the bill</td><td>square-4096<" in roi  # the slowest performance case
    assert "roi.case &#39;gone-8192&#39; is not a timed performance case here" in roi


@pytest.mark.parametrize("content", ["", "[]", "\udcff not json", '{"lock": 3}'])
def test_a_broken_lock_json_is_bad_input_naming_the_file(run_dir, tmp_path, content):
    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy)
    (copy / "lock.json").write_bytes(content.encode(errors="surrogateescape"))
    result = CliRunner().invoke(app, ["report", str(copy)])
    assert result.exit_code == 2 and "lock.json" in result.output and "unexpected" not in result.output


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


def _text(renderable) -> str:
    from rich.console import Console

    console = Console(width=200, record=True)
    console.print(renderable)
    return console.export_text()


def test_the_vendor_baseline_in_the_summary_the_terminal_and_the_report(run_dir):
    from cudaopt.cli.render_experiments import summary_table
    from cudaopt.record.files import Summary

    summary = Summary.model_validate(json.loads((run_dir / "summary.json").read_text()))
    big = next(c for c in summary.cases if c.name == "square-4096")
    # the vendor was timed beside the baseline (0.6x its 17000 us); the best runs at 0.5x
    (vendor,) = big.vendors
    assert (big.baseline_median_us, big.best_median_us, vendor.median_us) == (17000.0, 8500.0, 10200.0)
    assert vendor.status == "ok" and big.speedup == pytest.approx(2.0)
    assert vendor.speedup == pytest.approx(1.2)
    (run_vendor,) = summary.vendors
    assert run_vendor.label == "cuBLAS SGEMM (cupy)" and run_vendor.speedup == pytest.approx(1.2)
    assert summary.baseline == "initial kernel" and summary.kernelbench is None  # no PyTorch baseline
    odd = next(c for c in summary.cases if c.role == "correctness")
    assert odd.vendors[0].median_us is None and odd.vendors[0].status is None  # never timed
    history = json.loads((run_dir / "history.json").read_text())["attempts"]
    assert [bool(a["cases"] and a["cases"][1].get("vendors")) for a in history] == [True, False, False, False]
    best_case = json.loads((run_dir / "best-case-1.json").read_text())
    assert best_case["vendors"][0]["label"] == "cuBLAS SGEMM (cupy)"  # a replay times it beside the winner
    text = _text(summary_table(summary))
    assert "vendor µs" in text and "vs vendor" in text and "10200.00" in text and "1.20×" in text
    assert "vendor: cuBLAS SGEMM (cupy)" in text
    html = (run_dir / "report.html").read_text()
    assert "<th>cuBLAS SGEMM (cupy) µs</th><th>vs cuBLAS SGEMM (cupy)</th>" in html and "10200.00" in html
    assert "1.20×" in html
    assert 'id="vendor"' in html and "cuBLAS SGEMM (cupy)" in html
    assert "Roofs: compute spec, memory spec" in html  # the scripted cases carry no measured roofs


def test_a_vendor_that_mismatches_is_reported_and_never_fails_the_run(tmp_path):
    from cudaopt.cli.render_experiments import summary_table

    folder = tmp_path / "sgemm"
    shutil.copytree(SGEMM, folder)
    config = json.loads((folder / "experiment.json").read_text())
    config["vendor"]["label"] = "cuBLAS with TF32 (mismatch)"
    (folder / "experiment.json").write_text(json.dumps(config))
    with FakeOpenAI([answer("ok 0.5", "register blocking")]) as server:
        run, summary = start_or_resume(ExperimentArgs(config=str(folder / "experiment.json")),
                                       ModelSettings(base_url=server.url), Budget(max_iterations=1),
                                       tmp_path / "results", ScriptedEvaluator())
    big = next(c for c in summary.cases if c.name == "square-4096")
    (vendor,) = big.vendors
    assert vendor.status == "mismatch" and vendor.median_us is None and vendor.speedup is None
    assert summary.best_score_us and summary.vendors[0].score_us is None  # the candidate still won
    assert "mismatch" in _text(summary_table(summary))
    html = (run.path / "report.html").read_text()
    assert '<span class="fail">mismatch</span>' in html
    assert "square-4096: cuBLAS with TF32 (mismatch) mismatch, not timed" in html


def test_the_evaluate_table_shows_the_vendor_and_its_failures():
    from cudaopt.cli.render_experiments import evaluation_table
    from cudaopt.evaluate import Evaluation
    from cudaopt.experiment import load_experiment

    experiment = load_experiment(SGEMM / "experiment.json")
    evaluator = ScriptedEvaluator()
    result = evaluator.evaluate(experiment.request("// RESULT: ok 0.5", vendor=True))
    result.case("rect-384x256x320").vendors[0].status = "error"
    result.case("rect-384x256x320").vendors[0].reason = "the vendor baseline needs cupy: pip install cupy-cuda13x"
    text = _text(evaluation_table(Evaluation(candidate=result)))
    assert "vendor µs" in text and "vs vendor" in text
    assert "12.00" in text and "1.20×" in text  # square-256: vendor 12 us, the kernel 10 us
    assert "rect-384x256x320: error: the vendor baseline needs cupy" in text
    assert "vendor: cuBLAS SGEMM (cupy)" in text
    plain = evaluator.evaluate(experiment.request("// RESULT: ok 0.5"))
    assert "vendor" not in _text(evaluation_table(Evaluation(candidate=plain)))


def test_the_evaluate_table_says_which_kernel_each_case_ran_with_its_registers():
    from cudaopt.cli.render_experiments import evaluation_table
    from cudaopt.evaluate import Evaluation
    from cudaopt.experiment import load_experiment
    from cudaopt.wire.results import EntryInfo, ResolvedLaunch

    experiment = load_experiment(SGEMM / "experiment.json")
    result = ScriptedEvaluator().evaluate(experiment.request("// RESULT: ok 0.5"))
    assert "kernel" not in _text(evaluation_table(Evaluation(candidate=result)))  # one kernel: no column
    result.compile.registers = 241
    result.compile.entries = {"matmul_f32_tiny": EntryInfo(registers=64, spill_stores=0, spill_loads=0, local_bytes=0,
                                                           static_shared_bytes=12288, max_threads_per_block=64)}
    result.case("square-256").launch = ResolvedLaunch(grid=(16, 16, 1), block=(64, 1, 1), entry="matmul_f32_tiny")
    rows = {line.split("│")[1].strip(): line for line in _text(evaluation_table(Evaluation(candidate=result))).splitlines()
            if line.count("│") > 3}
    assert "matmul_f32_tiny" in rows["square-256"] and " 64 " in rows["square-256"]
    assert "(the entry)" in rows["square-4096"] and " 241 " in rows["square-4096"]


def test_the_progress_chart_of_a_run_where_nothing_passed_draws_without_a_warning():
    import warnings

    from cudaopt.report.charts import progress

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        svg = progress([(0, None, "mismatch"), (1, None, "compile_error")])
    assert svg.lstrip().startswith("<") and "failed (no attempt passed)" in svg


@pytest.mark.skipif(_chromium() is None, reason="Debian's chromium is not installed (.ci/run installs it)")
def test_a_shape_sweep_is_charted_in_the_browser_and_its_worst_shapes_named(run_dir, tmp_path):
    from cudaopt.winner.verify import verify
    from tests.scripted import ScriptedEvaluator

    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy)
    shapes = tmp_path / "shapes.json"
    shapes.write_text(json.dumps({"m": [64, 512], "n": [128], "k": [96]}))
    verify(copy, ScriptedEvaluator(), seed=1, shapes=shapes, repeats=1)
    from cudaopt.report.build import build

    build(copy)
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={tmp_path / 'profile'}"]
    dom = subprocess.run([_chromium(), *flags, "--dump-dom", (copy / "report.html").as_uri()], check=True,
                         capture_output=True, text=True, timeout=120).stdout
    assert 'id="shapes"' in dom and 'id="timed"' in dom and 'id="worst"' in dom
    shapes_chart = dom.split('id="shapes"')[1].split("</div>")[0]
    assert "<svg" in shapes_chart and "m=512,n=128,k=96" in dom


def test_the_tune_report_shows_the_best_configuration_per_case(tmp_path):
    from cudaopt.optimize import Options
    from tests.scripted import ScriptedEvaluator

    class PerShape(ScriptedEvaluator):
        """BN=256 is best on square-256, BN=128 on the other cases: no one configuration wins everywhere."""

        def evaluate(self, request, on_event=None):
            result = super().evaluate(request, on_event)
            bn = request.kernel.defines.get("BN")
            for case in result.cases:
                if case.timing and bn:
                    better = (bn == 256) == (case.name == "square-256")
                    case.timing.median_us *= 0.5 if better else 1.0
            return result

    run, summary = start_or_resume(ExperimentArgs(config=str(SGEMM / "experiment.json")), ModelSettings(),
                                   Budget(), tmp_path / "results", PerShape(), Options(strategy="tune", max_evals=100))
    best = {c.case: c for c in summary.per_case_best}
    assert set(best) == {"square-256", "rect-384x256x320", "square-4096"}
    assert all(b.best_us <= b.winner_us for b in best.values())
    assert any(b.gain > 1 for b in best.values())  # the winner is not the best everywhere
    assert summary.dispatch_score_us < summary.best_score_us
    html = (run.path / "report.html").read_text()
    assert 'id="per-case-best"' in html and "What a shape-specialised dispatch would gain" in html
