"""Every GPU of this machine (`--devices all`), a local Ray cluster (`--ray local`, when Ray is
installed) and a fleet audit, on the GPU, through the command line."""

from __future__ import annotations

import json
import shutil

import pytest
from typer.testing import CliRunner

from cudaopt.cli import app
from cudaopt.pool.devices import visible_devices
from cudaopt.fleet.files import AuditReport
from cudaopt.record.files import Environment, History, ReplayOutcome, Summary, VerifyOutcome
from tests.conftest import ROOT, SGEMM, optional

pytestmark = pytest.mark.gpu
runner = CliRunner(env={"COLUMNS": "200", "OPENAI_API_KEY": ""})
CONFIG = str(SGEMM / "experiment.json")


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    """The example's tune sweep (8 configurations) on every GPU."""
    results = tmp_path_factory.mktemp("results")
    result = runner.invoke(app, ["optimize", "--config", CONFIG, "--strategy", "tune", "--max-evals", "8",
                                 "--devices", "all", "--no-cache", "--results-dir", str(results)])
    assert result.exit_code == 0, result.output
    print(result.output)
    return results / "run-001"


def test_a_sweep_on_every_gpu_records_which_gpu_measured_each_attempt(swept):
    env = Environment.model_validate_json((swept / "env.json").read_text())
    gpus = visible_devices()
    assert sorted(g.index for g in env.pool) == gpus and env.backend == "local"
    attempts = History.model_validate_json((swept / "history.json").read_text()).attempts
    assert len(attempts) == 9 and all(a.status == "ok" for a in attempts), [(a.id, a.reason[:100]) for a in attempts]
    assert all(a.gpu.name == env.gpu.name and a.gpu.index in gpus for a in attempts)
    assert [a.kind for a in attempts] == ["baseline"] + ["tune"] * 8
    if len(gpus) > 1:
        assert len({a.gpu.index for a in attempts}) > 1  # the sweep used more than one GPU
    summary = Summary.model_validate_json((swept / "summary.json").read_text())
    assert summary.best_attempt is not None and summary.speedup > 1
    if summary.finalists:  # several GPUs measured the best: measured again on one
        assert summary.finalists.winner == summary.best_attempt


def test_evaluate_verify_and_replay_on_every_gpu(swept):
    evaluated = runner.invoke(app, ["evaluate", "--config", CONFIG, "--kernel", str(swept / "best.cu"),
                                    "--launch", str(swept / "best-launch.json"), "--iterations", "20",
                                    "--devices", "all"])
    assert evaluated.exit_code == 0, evaluated.output
    verified = runner.invoke(app, ["verify", str(swept), "--devices", "all"])
    assert verified.exit_code == 0, verified.output
    outcome = VerifyOutcome.model_validate_json((swept / "verify.json").read_text())
    assert outcome.passed and all(c.gpu is not None for c in outcome.cases)
    replayed = runner.invoke(app, ["replay", str(swept), "--devices", "all", "--repeats", "3"])
    assert replayed.exit_code == 0, replayed.output
    replay = ReplayOutcome.model_validate_json((swept / "replay.json").read_text())
    assert replay.passed and all(c.gpu is not None for c in replay.cases)
    print(evaluated.output, verified.output, replayed.output)


def test_a_tune_sweep_through_a_local_ray_cluster(tmp_path):
    optional("ray")
    result = runner.invoke(app, ["optimize", "--config", CONFIG, "--strategy", "tune", "--max-evals", "4",
                                 "--ray", "local", "--no-cache", "--results-dir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    run = tmp_path / "run-001"
    env = Environment.model_validate_json((run / "env.json").read_text())
    assert env.backend == "ray local" and env.pool and all(g.host for g in env.pool)
    attempts = History.model_validate_json((run / "history.json").read_text()).attempts
    assert len(attempts) == 5 and all(a.status == "ok" and a.gpu.host for a in attempts)
    print(result.output)


def test_a_fleet_audit_of_the_sgemm_example_with_one_optimisation(tmp_path):
    """The audit of a directory holding the SGEMM example (the softmax example's 6.4 GB case would
    make this test minutes long; the audit's path is the same for every experiment)."""
    fleet = tmp_path / "examples"
    shutil.copytree(ROOT / "examples" / "sgemm", fleet / "sgemm")
    out = tmp_path / "audit"
    result = runner.invoke(app, ["audit", str(fleet), "--out", str(out), "--devices", "all",
                                 "--optimize", "--strategy", "tune", "--top", "1", "--max-evals", "6",
                                 "--time-limit", "300"])
    assert result.exit_code == 0, result.output
    report = AuditReport.model_validate_json((out / "audit.json").read_text())
    (entry,) = report.entries
    assert entry.name == "sgemm" and entry.status == "ok"
    assert entry.headroom.case == "square-4096" and entry.headroom.basis == "vendor"  # cuBLAS beats initial.cu
    assert entry.headroom.vendor_speedup > 1 and entry.headroom.roofline_pct is not None
    assert entry.optimized is not None and (out / entry.optimized.report).is_file()
    assert entry.optimized.best_us < entry.optimized.baseline_us
    html = (out / "audit.html").read_text()
    assert f'href="{entry.optimized.report}"' in html and "<svg" in html
    print(result.output)
    print(json.dumps(entry.headroom.to_data(), indent=2))
