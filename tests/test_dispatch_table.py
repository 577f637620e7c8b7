"""A tune run's dispatch table without a GPU: built from the measurements as a pure function (only
configurations that passed every case, unseen classes keep the winner, adopted only beyond the
margin), chosen from the scalars like a launch tier, declared and checked in experiment.json,
written by a tune run whose configurations win on different shapes."""

from __future__ import annotations

import io
import json
import shutil

import pytest

from cudaopt.agent.model import ModelSettings
from cudaopt.config import DispatchClass
from cudaopt.errors import ExperimentError
from cudaopt.experiment import load_experiment
from cudaopt.optimize import Options, start_or_resume
from cudaopt.record.dispatch_table import DispatchTable, build_table
from cudaopt.record.runs import Budget, ExperimentArgs
from cudaopt.record.files import History
from tests.conftest import SGEMM
from tests.scripted import ScriptedEvaluator, stats

CLASSES = [DispatchClass(name="small", when="m * n <= 200000"), DispatchClass(name="deep", when="k >= 4 * m"),
           DispatchClass(name="large")]
CASES = [("square-256", {"m": 256, "n": 256, "k": 256}), ("rect-384x256x320", {"m": 384, "n": 256, "k": 320}),
         ("square-4096", {"m": 4096, "n": 4096, "k": 4096})]


def _passed(*rows):
    """(id, BM, medians of the three cases)"""
    return [(i, {"BM": bm}, dict(zip([c for c, _ in CASES], medians, strict=True))) for i, bm, medians in rows]


def test_each_class_gets_its_fastest_configuration_and_unseen_classes_keep_the_winner():
    passed = _passed((1, 16, (10.0, 10.0, 1000.0)), (2, 32, (20.0, 20.0, 800.0)), (3, 64, (8.0, 14.0, 1200.0)))
    table = build_table(CLASSES, CASES, passed, winner=2)
    rows = {r.name: r for r in table.rows}
    assert rows["small"].cases == ["square-256", "rect-384x256x320"] and rows["small"].attempt == 1  # 10 beats sqrt(8 * 14)
    assert rows["large"].attempt == 2 and rows["large"].cases == ["square-4096"]
    assert rows["deep"].cases == [] and rows["deep"].attempt == 2 and rows["deep"].defines == {"BM": 32}
    assert table.table_score_us == pytest.approx((10 * 10 * 800) ** (1 / 3))
    assert table.single_score_us == pytest.approx((20 * 20 * 800) ** (1 / 3))
    assert table.adopted and "adopted" in table.reason
    assert table.choose({"m": 100, "n": 100, "k": 100}) == ("small", 1, {"BM": 16})
    assert table.choose({"m": 8192, "n": 8192, "k": 100}) == ("large", 2, {"BM": 32})
    assert table.choose({"m": 1000, "n": 1000, "k": 9000}) == ("deep", 2, {"BM": 32})  # never measured: the winner


def test_a_configuration_that_failed_any_case_never_enters_the_table():
    passed = _passed((1, 16, (10.0, 10.0, 1000.0)))
    passed.append((2, {"BM": 8}, {"square-256": 1.0, "rect-384x256x320": 1.0}))  # no time on square-4096
    table = build_table(CLASSES, CASES, passed, winner=1)
    assert {r.attempt for r in table.rows} == {1} and not table.adopted
    assert table.reason == "every class chose the single winner's configuration"
    assert build_table(CLASSES, CASES, passed, winner=2) is None  # the winner itself must have passed
    assert build_table([], CASES, passed, winner=1) is None


def test_gains_within_the_margin_keep_the_winner_in_a_class_and_everywhere():
    passed = _passed((1, 16, (10.0, 10.0, 1000.0)), (2, 32, (9.9, 10.0, 1000.0)))
    table = build_table(CLASSES, CASES, passed, winner=1)
    assert [r.attempt for r in table.rows] == [1, 1, 1] and not table.adopted  # 1% faster on small: noise
    assert table.choose({"m": 100, "n": 100, "k": 100}) == (None, 1, {"BM": 16})
    passed = _passed((1, 16, (10.0, 10.0, 1000.0)), (2, 32, (9.75, 9.75, 1000.0)))  # 2.6% on small, 1.7% overall
    table = build_table(CLASSES, CASES, passed, winner=1)
    assert [r.attempt for r in table.rows] == [2, 1, 1] and not table.adopted and "margin" in table.reason


def test_ties_go_to_the_lower_attempt_and_a_shape_in_no_class_keeps_the_winner():
    classes = [DispatchClass(name="small", when="m <= 512")]
    passed = _passed((5, 16, (10.0, 10.0, 1000.0)), (3, 32, (5.0, 5.0, 1000.0)), (4, 64, (5.0, 5.0, 1000.0)))
    table = build_table(classes, CASES, passed, winner=5)
    assert table.rows[0].attempt == 3 and table.adopted
    assert table.choose({"m": 4096, "n": 1, "k": 1}) == (None, 5, {"BM": 16})
    again = DispatchTable.model_validate_json(table.model_dump_json())
    assert again == table and again.schema_version == 1


@pytest.fixture
def folder(tmp_path):
    folder = tmp_path / "exp"
    shutil.copytree(SGEMM, folder)
    return folder


def _with_dispatch(folder, dispatch):
    config = json.loads((folder / "experiment.json").read_text())
    config["tune"]["dispatch"] = dispatch
    (folder / "experiment.json").write_text(json.dumps(config))
    return folder / "experiment.json"


def test_the_experiment_declares_classes_and_bad_ones_name_their_field(folder):
    path = _with_dispatch(folder, [{"name": "small", "when": "m * n <= 200000"}, {"name": "rest"}])
    assert [c.name for c in load_experiment(path).tuning.dispatch] == ["small", "rest"]
    for dispatch, field, words in [
        ([{"name": "a", "when": "m < BM"}, {"name": "b"}], "tune.dispatch[0].when", "BM"),
        ([{"name": "a"}, {"name": "b", "when": "m > 1"}], "tune.dispatch[0].when", "only the last class"),
        ([{"name": "a", "when": "m > 1"}, {"name": "a"}], "tune.dispatch", "share a name"),
    ]:
        with pytest.raises(ExperimentError) as info:
            load_experiment(_with_dispatch(folder, dispatch))
        assert info.value.field == field and words in info.value.message, (dispatch, info.value)


class ShapeScripted(ScriptedEvaluator):
    """BM=16 twice as fast on shapes of at most 200000 outputs, 1.5x slower above: with the
    scripted base (bigger tiles faster), BM=16 wins on the small cases, BM=32 on square-4096."""

    def _evaluate(self, request, on_event=None):
        result = super()._evaluate(request, on_event)
        bm = (request.kernel.defines or {}).get("BM") if request.kernel else None
        scalars = {c.name: c.scalars for c in request.cases}
        for case in result.cases:
            if bm and case.timing:
                small = scalars[case.name]["m"] * scalars[case.name]["n"] <= 200000
                factor = (0.5 if bm == 16 else 1.0) if small else (1.0 if bm == 32 else 1.5)
                case.timing = stats(case.timing.median_us * factor)
        return result


def _tune(tmp_path, config_path, evaluator):
    return start_or_resume(ExperimentArgs(config=str(config_path)), ModelSettings(), Budget(), tmp_path / "results",
                           evaluator, Options(strategy="tune"))


def _small_space(folder, dispatch):
    config = json.loads((folder / "experiment.json").read_text())
    config["tune"].update(tunables={"BM": [16, 32], "BN": [16]}, restrictions=[], dispatch=dispatch,
                          launch={"grid": ["cdiv(n, BN)", "cdiv(m, BM)"], "block": [256]})
    (folder / "experiment.json").write_text(json.dumps(config))
    return folder / "experiment.json"


def test_a_tune_run_writes_its_table_and_adopts_it_when_configurations_win_on_different_shapes(tmp_path, folder):
    path = _small_space(folder, [{"name": "small", "when": "m * n <= 200000"}, {"name": "large"}])
    run, summary = _tune(tmp_path, path, ShapeScripted())
    table = DispatchTable.model_validate(run.read_json("dispatch.json"))
    history = {a.id: a for a in History.model_validate(run.read_json("history.json")).attempts}
    assert summary.best_attempt == table.winner_attempt
    rows = {r.name: r for r in table.rows}
    assert history[rows["small"].attempt].defines["BM"] == 16 and history[rows["large"].attempt].defines["BM"] == 32
    assert table.adopted and table.table_score_us < table.single_score_us
    assert "dispatch table: small -> attempt" in run.file("run.log").read_text()


def test_no_table_without_classes_or_when_one_configuration_wins_everywhere(tmp_path, folder):
    path = _small_space(folder, [])
    run, _ = _tune(tmp_path / "a", path, ShapeScripted())
    assert not run.file("dispatch.json").exists()
    path = _small_space(folder, [{"name": "small", "when": "m * n <= 200000"}, {"name": "large"}])
    run, _ = _tune(tmp_path / "b", path, ScriptedEvaluator())  # the bigger tiles win on every case
    table = DispatchTable.model_validate(run.read_json("dispatch.json"))
    assert not table.adopted and table.reason == "every class chose the single winner's configuration"


def test_verify_checks_and_times_each_shape_with_its_class_beside_the_single_winner(tmp_path, folder):
    from rich.console import Console

    from cudaopt.record.files import VerifyOutcome
    from cudaopt.cli.render_runs import timed_table
    from cudaopt.winner.verify import verify

    path = _small_space(folder, [{"name": "small", "when": "m * n <= 200000"}, {"name": "large"}])
    run, summary = _tune(tmp_path, path, ShapeScripted())
    table = DispatchTable.model_validate(run.read_json("dispatch.json"))
    large = next(r for r in table.rows if r.name == "large")
    shapes = tmp_path / "shapes.json"
    shapes.write_text(json.dumps({"template": "square-4096", "shapes": [{"m": 100, "n": 100, "k": 64},
                                                                        {"m": 2048, "n": 1024, "k": 64}]}))
    evaluator = ShapeScripted()
    outcome = verify(run.path, evaluator, seed=7, shapes=shapes, repeats=2)
    checks = [r for r in evaluator.requests if r.time_roles == []]
    by_case = {c.name: r.kernel.defines for r in checks for c in r.cases}
    assert by_case == {"holdout-515x261x1031": summary.best_defines, "holdout-96x3072x1536": large.defines}
    assert outcome.passed and outcome.dispatch
    timed = {c.name: c for c in outcome.timed}
    near = timed["holdout-515x261x1031"]  # its class chose the single winner: timed once, as before
    assert near.dispatch_class == "small" and near.dispatch_attempt == summary.best_attempt
    assert near.single_medians_us == [] and near.speedup_vs_single is None
    for name in ("holdout-96x3072x1536", "m=2048,n=1024,k=64"):  # large: BM=32 beside the single winner (BM=16)
        case = timed[name]
        assert case.dispatch_class == "large" and case.dispatch_attempt == large.attempt
        assert len(case.single_medians_us) == 2 and case.speedup_vs_single == pytest.approx(2.0), name
    assert timed["m=100,n=100,k=64"].speedup_vs_single is None
    console = Console(width=200, record=True, file=io.StringIO())
    console.print(timed_table(outcome))
    text = console.export_text()
    line = next(x for x in text.splitlines() if "holdout-96x3072x1536" in x)
    assert "vs single" in text and f"large #{large.attempt}" in line and "2.00×" in line
    singles = [r for r in evaluator.requests if r.id.startswith("verify-single-")]
    assert len(singles) == 2 * 2 and all(r.kernel.defines == summary.best_defines and not r.vendors for r in singles)
    old = json.loads(run.file("verify.json").read_text())  # a version 2 file, before the table, still reads
    old["schema_version"] = 2
    old.pop("dispatch")
    for case in old["timed"]:
        for key in ("dispatch_class", "dispatch_attempt", "single_medians_us", "single_us", "speedup_vs_single"):
            case.pop(key)
    assert not VerifyOutcome.model_validate(old).dispatch


def test_verify_ignores_a_table_that_was_not_adopted(tmp_path, folder):
    from cudaopt.winner.verify import verify

    path = _small_space(folder, [{"name": "small", "when": "m * n <= 200000"}, {"name": "large"}])
    run, summary = _tune(tmp_path, path, ScriptedEvaluator())
    evaluator = ScriptedEvaluator()
    outcome = verify(run.path, evaluator, seed=7)
    assert not outcome.dispatch and all(c.dispatch_class is None for c in outcome.timed)
    assert {tuple(sorted(r.kernel.defines.items())) for r in evaluator.requests if r.kernel and r.kernel.defines} == {
        tuple(sorted(summary.best_defines.items()))}


def test_the_report_shows_the_table_and_each_shape_beside_the_single_winner(tmp_path, folder):
    from cudaopt.report.build import build
    from cudaopt.winner.verify import verify

    path = _small_space(folder, [{"name": "small", "when": "m * n <= 200000"}, {"name": "large"}])
    run, summary = _tune(tmp_path, path, ShapeScripted())
    html = build(run.path).read_text()
    assert 'id="dispatch-table"' in html and "m * n &lt;= 200000" in html and "adopted" in html
    assert "single winner µs" in html and "vs single" not in html  # no verify yet
    verify(run.path, ShapeScripted(), seed=3, repeats=1)
    html = build(run.path).read_text()
    row = html[html.index("<td>holdout-96x3072x1536</td>"):]
    row = row[:row.index("</tr>")]
    assert "large #" in row and "2.00×" in row  # the class's configuration, twice the single winner's speed
