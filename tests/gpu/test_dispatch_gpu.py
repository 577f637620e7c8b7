"""A dispatch table on the GPU: a short tune run of the example with shape classes writes
dispatch.json from its measurements, and verify runs each holdout and shape with its class's
configuration when the table is adopted (the single winner beside it where they differ), the
single winner everywhere when it is not."""

from __future__ import annotations

import json
import shutil

import pytest
from typer.testing import CliRunner

from cudaopt.cli import app
from cudaopt.record.dispatch_table import DispatchTable
from cudaopt.record.files import Summary, VerifyOutcome
from tests.conftest import SGEMM

pytestmark = pytest.mark.gpu
runner = CliRunner(env={"COLUMNS": "200", "OPENAI_API_KEY": ""})


def test_a_tune_run_with_shape_classes_and_its_verification(tmp_path):
    folder = tmp_path / "exp"
    shutil.copytree(SGEMM, folder)
    config = json.loads((folder / "experiment.json").read_text())
    config["tune"]["tunables"] = {**config["tune"]["tunables"], "BN": [128], "BK": [8], "TN": [8], "MINB": [2],
                                  "SK": [32]}  # ST 16 or 32: the tier of the small cases
    config["tune"]["restrictions"] = []
    config["tune"]["dispatch"] = [{"name": "large", "when": "m * n >= 4194304"}, {"name": "rest"}]
    (folder / "experiment.json").write_text(json.dumps(config))
    result = runner.invoke(app, ["optimize", "--config", str(folder / "experiment.json"), "--results-dir",
                                 str(tmp_path / "results")])
    assert result.exit_code == 0, result.output
    run = tmp_path / "results" / "run-001"
    summary = Summary.model_validate_json((run / "summary.json").read_text())
    table = DispatchTable.model_validate_json((run / "dispatch.json").read_text())
    assert table.winner_attempt == summary.best_attempt
    assert [r.name for r in table.rows] == ["large", "rest"]
    assert table.rows[0].cases == ["square-4096"] and table.rows[1].cases == ["square-256", "rect-384x256x320"]
    shapes = tmp_path / "shapes.json"
    shapes.write_text(json.dumps({"template": "square-4096", "shapes": [{"m": 256, "n": 256, "k": 256},
                                                                        {"m": 4096, "n": 2048, "k": 1024}]}))
    result = runner.invoke(app, ["verify", str(run), "--shapes", str(shapes), "--repeats", "1", "--seed", "3"])
    outcome = VerifyOutcome.model_validate_json((run / "verify.json").read_text())
    assert outcome.passed, result.output
    assert outcome.dispatch == table.adopted
    for case in outcome.timed:
        assert (case.dispatch_class is not None) == table.adopted, case
        differs = table.adopted and table.choose(case.scalars)[1] != table.winner_attempt
        assert (case.single_us is not None) == differs, case
    print(table.model_dump_json(indent=1), result.output)
