"""`cudaopt audit` without a GPU: a fleet of copies of the example with scripted kernels and ROI
sections, measured, estimated, ranked, optimised within a budget, written as audit.json and
audit.html."""

from __future__ import annotations

import json
import shutil

import pytest
from typer.testing import CliRunner

from cudaopt.agent.model import ModelSettings
from cudaopt.errors import ExperimentError
from cudaopt.fleet.audit import Plan, audit, load_fleet
from cudaopt.fleet.files import AuditReport
from tests.conftest import SGEMM
from tests.scripted import ScriptedEvaluator, ScriptedPool, kernel

# name: (the initial kernel's scripted result, calls per month, keeps the tune section)
FLEET = {
    "gemm-slow": ("ok 2.0", 1e7, True),  # twice the example's times; cuBLAS (0.6x) is faster: vendor basis
    "gemm-tuned": ("ok 0.5", 1e7, False),  # faster than cuBLAS: only the roofline shows headroom
    "gemm-rare": ("ok 1.0", 10, True),  # slower than cuBLAS but hardly ever called
}


def make_fleet(root, fleet=FLEET):
    for name, (result, calls, tune) in fleet.items():
        folder = root / name
        shutil.copytree(SGEMM, folder)
        (folder / "initial.cu").write_text(kernel(result))
        config = json.loads((folder / "experiment.json").read_text())
        config["roi"]["calls_per_month"] = calls
        if not tune:
            del config["tune"]
        (folder / "experiment.json").write_text(json.dumps(config))
    return root


@pytest.fixture
def fleet(tmp_path):
    return make_fleet(tmp_path / "fleet")


def run_audit(source, folder, evaluator=None, plan=None):
    folder.mkdir(parents=True, exist_ok=True)
    return audit(load_fleet(source), evaluator or ScriptedPool(2), folder, source, plan=plan)


def test_the_fleet_is_measured_estimated_and_ranked_by_net_return(fleet, tmp_path):
    pool = ScriptedPool(2)
    report = run_audit(fleet, tmp_path / "out", pool)
    assert [e.name for e in report.entries] == ["gemm-slow", "gemm-tuned", "gemm-rare"]
    assert [e.rank for e in report.entries] == [1, 2, 3]
    assert all(r.vendors for r in pool.requests)  # each kernel timed beside its vendor
    assert {e.gpu.index for e in report.entries} == {0, 1}
    slow = next(e for e in report.entries if e.name == "gemm-slow")
    h = slow.headroom
    assert h.case == "square-4096" and h.kernel_us == 34000.0 and h.vendor_us == pytest.approx(10200.0)
    assert h.basis == "vendor" and h.attainable_us == pytest.approx(10200.0) and h.headroom == pytest.approx(10 / 3)
    # 23.8 ms saved x 1e7 calls / 3.6e6 = 66.1 GPU hours a month at 3 USD; the pilot: 1 engineer hour at 100 USD
    assert slow.roi.monthly_saving_usd == pytest.approx(198.333, rel=1e-4)
    assert slow.net_usd == pytest.approx(198.333 * 3 - 100, rel=1e-4)
    tuned = report.entries[1].headroom  # the largest headroom, but a smaller saving in dollars
    assert tuned.basis == "roofline" and tuned.vendor_speedup < 1 and tuned.headroom > h.headroom
    assert tuned.attainable_us == pytest.approx(tuned.kernel_us * tuned.roofline_pct / 70)
    assert 0 < report.entries[1].net_usd < slow.net_usd
    rare = report.entries[2]
    assert rare.headroom.basis == "vendor" and rare.net_usd < 0  # too few calls to pay for an engineer hour
    saved = AuditReport.model_validate_json((tmp_path / "out" / "audit.json").read_text())
    assert saved.entries == report.entries and saved.finished_at and [g.index for g in saved.gpus] == [0, 1]
    html = (tmp_path / "out" / "audit.html").read_text()
    assert html.index("gemm-slow") < html.index("gemm-tuned") < html.index("gemm-rare")
    assert '<div class="chart" id="headroom"><svg' in html and "<script" not in html


def test_a_kernel_that_fails_its_own_experiment_is_ranked_last_with_its_reason(tmp_path):
    source = make_fleet(tmp_path / "fleet", {"broken": ("mismatch", 1e7, True), "gemm-slow": FLEET["gemm-slow"]})
    report = run_audit(source, tmp_path / "out")
    assert [(e.name, e.status) for e in report.entries] == [("gemm-slow", "ok"), ("broken", "mismatch")]
    assert report.entries[1].headroom is None and report.entries[1].reason


def test_optimize_runs_the_strategy_on_the_top_ones_within_the_shared_budget(fleet, tmp_path):
    plan = Plan(strategy="tune", top=2, time_limit_s=600, settings=ModelSettings(), options={"max_evals": 5})
    report = run_audit(fleet, tmp_path / "out", plan=plan)
    first, second, third = report.entries
    assert second.optimized is None and second.note.startswith("not optimised: tune: the experiment declares no "
                                                               "tunable kernel")
    run = first.optimized
    assert run is not None and run.run == "runs/gemm-slow/run-001" and run.strategy == "tune"
    assert run.budget.time_limit_s <= 600 / 2 and run.stop_reason == "evaluation budget exhausted"
    assert (tmp_path / "out" / run.report).is_file()
    assert run.best_us < run.baseline_us and run.speedup > 1 and run.roi.case == "square-4096"
    assert third.optimized is None and third.note == ""  # not among the top two
    html = (tmp_path / "out" / "audit.html").read_text()
    assert f'<a href="{run.report}">' in html
    assert AuditReport.model_validate_json((tmp_path / "out" / "audit.json").read_text()).entries[0].optimized == run


def test_each_run_gets_an_equal_share_of_the_time_left(tmp_path):
    source = make_fleet(tmp_path / "fleet", {"a": ("ok 2.0", 1e7, True), "b": ("ok 1.5", 1e7, True)})
    plan = Plan(strategy="tune", top=2, time_limit_s=100, settings=ModelSettings(), options={"max_evals": 2})
    report = run_audit(source, tmp_path / "out", plan=plan)
    first, second = (e.optimized for e in report.entries)
    assert 45 < first.budget.time_limit_s <= 50  # half of what was left after the measurements
    assert first.budget.time_limit_s < second.budget.time_limit_s <= 100 - first.wall_seconds


def test_a_list_file_names_the_experiments(fleet, tmp_path):
    listing = tmp_path / "fleet.txt"
    listing.write_text("# the two we care about\nfleet/gemm-slow/experiment.json\n\nfleet/gemm-rare/experiment.json\n")
    assert [m.name for m in load_fleet(listing)] == ["gemm-slow", "gemm-rare"]
    listing.write_text("fleet/gemm-slow/experiment.json\nfleet/nowhere/experiment.json\n")
    with pytest.raises(ExperimentError, match=r"fleet.txt: line 2: .*nowhere/experiment.json not found"):
        load_fleet(listing)


def test_bad_fleets_are_one_line(tmp_path):
    with pytest.raises(ExperimentError, match="not found"):
        load_fleet(tmp_path / "none")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ExperimentError, match="no experiment.json below it"):
        load_fleet(tmp_path / "empty")


def _without_kernel(folder, vendor: bool = True):
    config = json.loads((folder / "experiment.json").read_text())
    del config["initial_kernel"]
    if not vendor:
        del config["vendor"]
    (folder / "experiment.json").write_text(json.dumps(config))


class WithPeaks(ScriptedEvaluator):
    """A scripted GPU whose measured peaks are known (67 TFLOP/s float32, 3.3 TB/s)."""

    def evaluate(self, request, on_event=None):
        from cudaopt.wire.results import MeasuredPeaksInfo

        result = super().evaluate(request, on_event)
        result.device.measured_peaks = MeasuredPeaksInfo(bytes_per_s=3.3e12, flops_per_s={"float32": 67e12})
        return result


def test_an_experiment_without_a_kernel_is_its_vendor_against_the_roofline(tmp_path):
    source = make_fleet(tmp_path / "fleet", {"gemm-slow": FLEET["gemm-slow"], "imported": FLEET["gemm-slow"],
                                             "bare": FLEET["gemm-slow"], "broken": FLEET["gemm-slow"]})
    _without_kernel(source / "imported")
    _without_kernel(source / "bare", vendor=False)
    (source / "broken" / "experiment.json").write_text("{ not json")
    evaluator = WithPeaks()
    report = run_audit(source, tmp_path / "out", evaluator)
    rows = {e.name: e for e in report.entries}
    vendor_only = [r for r in evaluator.requests if r.kernel is None]
    assert len(vendor_only) == 1 and vendor_only[0].vendors and len(evaluator.requests) == 2
    h = rows["imported"].headroom
    assert rows["imported"].status == "ok" and h.measured == "vendor" and h.basis == "roofline"
    assert h.kernel_us == h.vendor_us == pytest.approx(10200.0) and h.case == "square-4096"
    pct = 100 * 2 * 4096**3 / (10200e-6 * 67e12)  # the vendor's share of the float32 roof
    assert h.roofline_pct == pytest.approx(pct, abs=0.1) and h.bound == "compute"
    assert h.attainable_us == pytest.approx(10200.0 * h.roofline_pct / 70) and rows["imported"].net_usd > 0
    assert rows["gemm-slow"].headroom.measured == "kernel"
    assert rows["bare"].status == "bad_input" and "no vendor: nothing to measure" in rows["bare"].reason
    assert rows["broken"].status == "bad_input" and "broken/experiment.json" in rows["broken"].reason
    assert [e.name for e in report.entries][-2:] == ["bare", "broken"]  # not measured: ranked last
    saved = AuditReport.model_validate_json((tmp_path / "out" / "audit.json").read_text())
    assert saved.schema_version == 2 and saved.entries == report.entries
    assert "(vendor: no initial kernel)" in (tmp_path / "out" / "audit.html").read_text()


def test_optimize_takes_experiments_without_a_kernel_and_a_failed_run_is_its_row(tmp_path, monkeypatch):
    from cudaopt.fleet import audit as audit_module

    source = make_fleet(tmp_path / "fleet", {"imported": FLEET["gemm-slow"], "gemm-slow": FLEET["gemm-slow"]})
    _without_kernel(source / "imported")
    started = []
    real = audit_module.start_or_resume

    def start(args, *rest, **kwargs):
        started.append(args.config)
        if "gemm-slow" in args.config:
            raise RuntimeError("the worker pool broke")
        return real(args, *rest, **kwargs)

    monkeypatch.setattr(audit_module, "start_or_resume", start)
    plan = Plan(strategy="tune", top=2, settings=ModelSettings(), options={"max_evals": 2})
    report = run_audit(source, tmp_path / "out", WithPeaks(), plan=plan)
    rows = {e.name: e for e in report.entries}
    assert rows["gemm-slow"].note == "optimisation stopped: RuntimeError: the worker pool broke"
    assert rows["imported"].optimized is None and "tune starts from a kernel" in rows["imported"].note
    assert len(started) == 2 and report.finished_at  # the audit went on to the end


runner = CliRunner(env={"COLUMNS": "220", "OPENAI_API_KEY": ""})


@pytest.fixture
def scripted_pool(monkeypatch):
    from cudaopt.pool import pools

    monkeypatch.setattr(pools, "open_pool", lambda devices, ray=None, log_dir=None: ScriptedEvaluator())


def test_the_command_prints_the_ranking_and_exits_1_for_a_failing_kernel(tmp_path, scripted_pool):
    from cudaopt.cli import app

    source = make_fleet(tmp_path / "fleet", {"broken": ("mismatch", 1e7, True), "gemm-slow": FLEET["gemm-slow"]})
    result = runner.invoke(app, ["audit", str(source), "--out", str(tmp_path / "out")])
    assert result.exit_code == 1, result.output
    assert "fleet audit: 2 experiment(s)" in result.output and "broken: mismatch:" in result.output
    assert f"fleet report: {tmp_path / 'out' / 'audit.html'}" in result.output
    AuditReport.model_validate_json((tmp_path / "out" / "audit.json").read_text())


@pytest.mark.parametrize("args, message", [
    (["--time-limit", "60"], "--time-limit: budgets the runs of --optimize; give --optimize too"),
    (["--devices", "0,0"], "--devices: GPU 0 named twice"),
    (["--optimize", "--strategy", "nope"], "--strategy: 'nope' is not one of"),
])
def test_bad_options_are_one_line_before_any_work(tmp_path, scripted_pool, args, message):
    from cudaopt.cli import app

    source = make_fleet(tmp_path / "fleet", {"gemm-slow": FLEET["gemm-slow"]})
    result = runner.invoke(app, ["audit", str(source), "--out", str(tmp_path / "out"), *args])
    assert result.exit_code == 2 and message in " ".join(result.output.split()), result.output
    assert not (tmp_path / "out").exists()


def test_a_fleet_whose_every_kernel_fails_its_checks_says_why_before_any_gpu_work(tmp_path, scripted_pool):
    from cudaopt.cli import app

    source = make_fleet(tmp_path / "fleet", {"gemm-slow": FLEET["gemm-slow"]})
    cases = source / "gemm-slow" / "input_cases.json"
    data = json.loads(cases.read_text())
    data["cases"][0]["outputs"]["c"]["rtol"] = -1
    cases.write_text(json.dumps(data))
    result = runner.invoke(app, ["audit", str(source), "--out", str(tmp_path / "out")])
    line = " ".join(result.output.split())
    assert result.exit_code == 2 and "no kernel of the fleet can be measured" in line and "rtol" in line, line
    assert not (tmp_path / "out").exists()
