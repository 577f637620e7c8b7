"""benchmarks/softmax_space.py without a GPU: the copy it writes is an experiment cudaopt loads,
with the space asked for and only the chosen cases, bad arguments are refused by name, and its
table reads a run's history (the vendors from the baseline's request, each configuration's
medians, the best per case)."""

from __future__ import annotations

import json
import re
import sys

import pytest

from tests.conftest import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))
import softmax_space  # noqa: E402


def test_the_copy_has_the_space_and_only_the_chosen_cases(tmp_path):
    from cudaopt.experiment import load_experiment

    config = softmax_space.write_copy(tmp_path / "copy", {"WB": [128], "CT": [512]}, ["rows32-65536x32"])
    exp = load_experiment(config)
    assert [(c["WB"], c["CT"]) for c in exp.tuning.space.configurations()] == [(128, 512)]
    assert {c.name for c in exp.case_specs if c.role != "correctness"} == {"rows32-65536x32"}
    assert sum(c.role == "correctness" for c in exp.case_specs) >= 10
    assert (ROOT / "examples/softmax/experiment.json").read_text().count('"WB": [128, 256]') == 1  # untouched


@pytest.mark.parametrize("space, cases, says", [
    ({"XX": [1]}, ["rows32-65536x32"], "['XX'] neither tunables"),
    ({}, ["no-such-case"], "['no-such-case'] not cases"),
])
def test_a_bad_space_or_case_is_refused_by_name(tmp_path, space, cases, says):
    with pytest.raises(SystemExit, match=re.escape(says)):
        softmax_space.write_copy(tmp_path / "copy", space, cases)


def test_a_macro_of_the_kernel_may_join_the_space(tmp_path):
    """UNROLL is no tunable of the example but a macro of its kernel (#ifndef UNROLL): a space may
    try it without the example being edited."""
    from cudaopt.experiment import load_experiment

    config = softmax_space.write_copy(tmp_path / "copy", {"WB": [128], "CT": [512], "UNROLL": [2, 4]},
                                      ["rows32-65536x32"])
    assert [c["UNROLL"] for c in load_experiment(config).tuning.space.configurations()] == [2, 4]


def _case(name, median, vendors=()):
    return {"name": name, "status": "ok", "timing": {"median_us": median},
            "vendors": [{"label": label, "status": "ok", "timing": {"median_us": us}} for label, us in vendors]}


def test_the_table_reads_the_history(tmp_path, capsys):
    history = {"attempts": [
        {"kind": "baseline", "defines": {}, "status": "ok",
         "cases": [_case("a", 50.0, [("torch.compile", 10.0)]), _case("b", 80.0, [("torch.compile", 20.0)])]},
        {"kind": "tune", "defines": {"WB": 128}, "status": "ok",
         "cases": [_case("a", 9.0), _case("b", 22.0)]},
        {"kind": "tune", "defines": {"WB": 256}, "status": "ok",
         "cases": [_case("a", 11.0), _case("b", 19.0)]},
    ]}
    (tmp_path / "history.json").write_text(json.dumps(history))
    record = softmax_space.report(tmp_path, ["a", "b"])
    assert record["vendors"] == {"torch.compile": {"a": 10.0, "b": 20.0}}
    assert record["best"]["a"] == {"us": 9.0, "defines": {"WB": 128}, "torch.compile": 10.0}
    assert record["best"]["b"]["defines"] == {"WB": 256}
    assert 'best b: 19.00 us {"WB": 256}' in capsys.readouterr().out
