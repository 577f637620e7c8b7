"""A tune run's dispatch table without a GPU: built from the measurements as a pure function (only
configurations that passed every case, unseen classes keep the winner, adopted only beyond the
margin), chosen from the scalars like a launch tier, declared and checked in experiment.json,
written by a tune run whose configurations win on different shapes."""

from __future__ import annotations

import json
import shutil

import pytest

from cudaopt.config import DispatchClass
from cudaopt.errors import ExperimentError
from cudaopt.experiment import load_experiment
from cudaopt.record.dispatch_table import DispatchTable, build_table
from tests.conftest import SGEMM

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


def test_a_gain_within_the_margin_is_not_adopted_and_the_winner_applies_everywhere():
    passed = _passed((1, 16, (10.0, 10.0, 1000.0)), (2, 32, (9.9, 10.0, 1000.0)))
    table = build_table(CLASSES, CASES, passed, winner=1)
    assert [r.attempt for r in table.rows] == [2, 1, 1] and not table.adopted and "margin" in table.reason
    assert table.choose({"m": 100, "n": 100, "k": 100}) == (None, 1, {"BM": 16})


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
