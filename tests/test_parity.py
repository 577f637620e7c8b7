"""One door: every command and its API function, given the same inputs, give the same result or the
same refusal (the GPU worker scripted), and every API function refuses bad input before it starts a
GPU worker, as the commands do."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cudaopt import api
from cudaopt.cli import app
from cudaopt.errors import ExperimentError
from cudaopt.wire.results import CaseResult, EvalResult
from tests.conftest import SGEMM
from tests.scripted import ScriptedEvaluator, kernel

runner = CliRunner(env={"COLUMNS": "200"})
KB = Path(__file__).parent / "fixtures" / "kernelbench"


@pytest.fixture
def pool(monkeypatch):
    """Every pool a command or an API function opens is a scripted GPU; how many were opened."""
    from cudaopt.pool import pools

    opened = []
    monkeypatch.setattr(pools, "open_pool", lambda devices, ray=None, log_dir=None: (
        opened.append(devices), ScriptedEvaluator())[1])
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    return opened


@pytest.fixture
def folder(example):
    return example[0]


def cli(*args) -> object:
    return runner.invoke(app, [str(a) for a in args])


def refused(result) -> str:
    """The one line a refused command printed, as the API words it."""
    assert result.exit_code == 2, (result.exit_code, result.output)
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    return lines[0].removeprefix("error: ")


def api_refusal(call, *args, **kwargs) -> str:
    with pytest.raises(ExperimentError) as caught:
        call(*args, **kwargs)
    return " ".join(str(caught.value).split())


def same_refusal(args: list, call, *call_args, **kwargs) -> str:
    """The command refuses exactly as its API function does (exit 2, the same line)."""
    line = refused(cli(*args))
    assert line == api_refusal(call, *call_args, **kwargs)
    return line


def tuned_run(folder: Path, results: Path):
    return api.optimize(folder / "experiment.json", strategy="tune", max_evals=2, results=results,
                        evaluator=ScriptedEvaluator())


# --- check, evaluate, optimize ----------------------------------------------------------------


def test_check(folder, pool):
    config = folder / "experiment.json"
    result = cli("check", "--config", config)
    assert result.exit_code == 0, result.output
    for item in api.check(config):
        assert item.what in result.output
    line = same_refusal(["check", "--config", config, "--launch", '{"grid": [1, 70000], "block": [32]}'],
                        api.check, config, launch='{"grid": [1, 70000], "block": [32]}')
    assert line.startswith("--launch: grid[1]:") and "65535" in line
    assert not pool


def test_check_takes_a_kernel_for_a_custom_launch(folder):
    """A kernel meant for a launch of its own is checked before the GPU, its launch on every case."""
    config, custom = folder / "experiment.json", folder / "custom.cu"
    custom.write_text((folder / "initial.cu").read_text().replace("matmul_f32", "matmul_rows"))
    launch = '{"grid": ["cdiv(n, 16)", "cdiv(m, 16)"], "block": [16, 16]}'
    result = cli("check", "--config", config, "--kernel", custom, "--entry", "matmul_rows", "--launch", launch)
    assert result.exit_code == 0, result.output
    checked = api.check(config, kernel=custom, entry="matmul_rows", launch=launch)
    assert any("--launch on every case" in c.detail for c in checked) and "--launch on every case" in result.output
    bad = '{"grid": ["cdiv(n, BN)"], "block": [256]}'
    same_refusal(["check", "--config", config, "--kernel", custom, "--entry", "matmul_rows", "--launch", bad],
                 api.check, config, kernel=custom, entry="matmul_rows", launch=bad)


def test_evaluate(folder, pool, tmp_path):
    config = folder / "experiment.json"
    result = cli("evaluate", "--config", config, "--json", tmp_path / "cli.json")
    assert result.exit_code == 0, result.output
    measured = api.evaluate(config, json_out=tmp_path / "api.json")
    from_cli, from_api = (json.loads((tmp_path / f"{n}.json").read_text()) for n in ("cli", "api"))
    assert from_cli == from_api == json.loads(measured.to_json())
    same_refusal(["evaluate", "--config", config, "--warmup", "-1"], api.evaluate, config, warmup=-1)
    same_refusal(["evaluate", "--config", config, "--kernel", folder / "gone.cu"], api.evaluate, config,
                 folder / "gone.cu")


class TrivialAccepted(ScriptedEvaluator):
    """A GPU whose negative controls find that a case accepts zeros."""

    def evaluate(self, request, on_event=None) -> EvalResult:
        result = super().evaluate(request, on_event)
        first = result.cases[0]
        result.cases[0] = CaseResult(name=first.name, role=first.role, status="non_discriminating",
                                     reason="c: zeros pass the check (max error 0.9 within atol)")
        result.status = "non_discriminating"
        return result


def test_a_non_discriminating_case_is_refused_by_both_doors(folder, monkeypatch, tmp_path):
    from cudaopt.pool import pools

    monkeypatch.setattr(pools, "open_pool", lambda devices, ray=None, log_dir=None: TrivialAccepted())
    config = folder / "experiment.json"
    line = same_refusal(["evaluate", "--config", config, "--json", tmp_path / "cli.json"], api.evaluate, config,
                        json_out=tmp_path / "api.json")
    assert "input_cases.json: cases[0]: non-discriminating: c: zeros pass the check" in line
    for name in ("cli", "api"):  # what was measured is kept
        assert json.loads((tmp_path / f"{name}.json").read_text())["candidate"]["status"] == "non_discriminating"


def test_optimize(folder, pool, tmp_path):
    result = cli("optimize", "--config", folder / "experiment.json", "--strategy", "tune", "--max-evals", "2",
                 "--results-dir", tmp_path / "cli")
    assert result.exit_code == 0, result.output
    run = tuned_run(folder, tmp_path / "api")
    by_cli = json.loads((tmp_path / "cli" / "run-001" / "summary.json").read_text())
    by_api = json.loads((run.path / "summary.json").read_text())
    assert by_cli["best_score_us"] == by_api["best_score_us"] and by_cli["attempts"] == by_api["attempts"]
    assert f"run directory: {tmp_path / 'cli' / 'run-001'}" in result.output


def test_a_model_without_credentials_is_refused_by_both_doors_before_any_gpu(folder, pool, tmp_path):
    config = folder / "experiment.json"
    results = tmp_path / "results"
    line = same_refusal(["optimize", "--config", config, "--strategy", "agent", "--results-dir", results],
                        api.optimize, config, strategy="agent", results=results)
    assert line.startswith("--model: model openai:gpt-5-mini needs OPENAI_API_KEY")
    assert not pool and not results.exists()


def test_auto_without_credentials_tunes_and_says_why_in_both_doors(folder, pool, tmp_path):
    notices = []
    api.optimize(folder / "experiment.json", max_evals=2, results=tmp_path / "api",
                 on_progress=lambda e: notices.append(e.text) if isinstance(e, api.Notice) else None)
    result = cli("optimize", "--config", folder / "experiment.json", "--max-evals", "2", "--results-dir",
                 tmp_path / "cli")
    assert result.exit_code == 0, result.output
    assert notices[0].startswith("strategy: tune (no model: model openai:gpt-5-mini needs OPENAI_API_KEY")
    assert notices[0] in result.output


# --- verify, replay, report, export -------------------------------------------------------------


def test_verify_and_its_report(folder, pool, tmp_path):
    run = tuned_run(folder, tmp_path / "results").path
    stale = (run / "report.html").read_text()
    result = cli("verify", run, "--seed", "7")
    assert result.exit_code == 0, result.output
    by_cli = json.loads((run / "verify.json").read_text())
    outcome = api.verify(run, seed=7)
    assert json.loads(outcome.to_json())["cases"] == by_cli["cases"] and outcome.passed == by_cli["passed"]
    assert (run / "report.html").read_text() != stale and "verify" in (run / "report.html").read_text()
    line = same_refusal(["verify", tmp_path / "nope"], api.verify, tmp_path / "nope")
    assert line == f"{tmp_path / 'nope'}: not found (give a run directory, results/run-NNN)"


def test_replay_refreshes_the_report_in_both_doors(folder, pool, tmp_path):
    run = tuned_run(folder, tmp_path / "results").path
    (run / "report.html").unlink()
    outcome = api.replay(run, repeats=2)
    assert (run / "report.html").is_file() and (run / "replay.json").is_file()
    (run / "report.html").unlink()
    result = cli("replay", run, "--repeats", "2")
    assert result.exit_code == (0 if outcome.passed else 1), result.output
    assert (run / "report.html").is_file()
    same_refusal(["replay", run, "--repeats", "0"], api.replay, run, repeats=0)


def test_report(folder, tmp_path):
    run = tuned_run(folder, tmp_path / "results").path
    result = cli("report", run, "--gpu-hour-usd", "2.5")
    assert result.exit_code == 0 and f"report written to {run / 'report.html'}" in result.output
    assert api.report(run, gpu_hour_usd=2.5) == run / "report.html"
    same_refusal(["report", run, "--roi-case", "nope"], api.report, run, roi_case="nope")


def test_export_checks_a_launch_on_every_case_in_both_doors(folder, tmp_path):
    config = folder / "experiment.json"
    bad = '{"grid": ["cdiv(n, BN)"], "block": [256]}'
    line = same_refusal(["export", "--config", config, "--kernel", folder / "tunable.cu", "--launch", bad, "--to",
                         "cuda", "--out", tmp_path / "out", "--unverified"],
                        api.export, experiment=config, kernel=folder / "tunable.cu", launch=bad, to="cuda",
                        out=tmp_path / "out", unverified=True)
    assert line.startswith("--launch: grid[0]: case 'odd-31x37x29': unknown name 'BN'")
    result = cli("export", "--config", config, "--to", "cuda", "--out", tmp_path / "cli", "--unverified")
    assert result.exit_code == 0, result.output
    written = api.export(experiment=config, to="cuda", out=tmp_path / "api", unverified=True)
    for path in written:
        drop = lambda text: [line for line in text.splitlines() if "exported by" not in line]
        assert drop((tmp_path / "cli" / path.name).read_text()) == drop(path.read_text())


def test_export_of_a_kernel_whose_file_name_is_not_utf8(folder, tmp_path):
    odd = Path(str(tmp_path) + "/k\udcff.cu")  # the byte 0xff, as Python decodes a file name that is no UTF-8
    odd.write_bytes((folder / "initial.cu").read_bytes())
    result = cli("export", "--config", folder / "experiment.json", "--kernel", odd, "--to", "cuda", "--out",
                 tmp_path / "out", "--unverified")
    assert result.exit_code == 0, result.output
    assert "k\\udcff.cu" in (tmp_path / "out" / "matmul_f32.h").read_text()


# --- guard record, guard check ----------------------------------------------------------------


def test_guard_record_and_check(folder, pool, tmp_path):
    (folder / "k.cu").write_text(kernel("ok 0.5"))
    config = folder / "experiment.json"
    result = cli("guard", "record", "--config", config, "--kernel", folder / "k.cu", "--out", tmp_path / "cli.json",
                 "--seed", "3", "--repeats", "2")
    assert result.exit_code == 0, result.output
    done = api.guard_record(experiment=config, kernel=folder / "k.cu", out=tmp_path / "api.json", seed=3, repeats=2)
    by_cli, by_api = (json.loads((tmp_path / f"{n}.json").read_text()) for n in ("cli", "api"))
    for key in ("cases", "checked", "kernel", "lock", "seed"):
        assert by_cli[key] == by_api[key] == json.loads(done.baseline.to_json())[key]
    same_refusal(["guard", "record", "--config", config, "--repeats", "1"], api.guard_record, experiment=config,
                 repeats=1)
    result = cli("guard", "check", tmp_path / "cli.json", "--seed", "4", "--json", tmp_path / "check-cli.json")
    report = api.guard_check(tmp_path / "cli.json", seed=4)
    assert result.exit_code == (0 if report.passed else 1), result.output
    checked = json.loads((tmp_path / "check-cli.json").read_text())
    assert [c["verdict"] for c in checked["checks"][0]["cases"]] == [c.verdict for c in report.checks[0].cases]
    same_refusal(["guard", "check", tmp_path / "cli.json", "--max-slowdown", "3"], api.guard_check,
                 tmp_path / "cli.json", max_slowdown="3")


# --- audit, import kernelbench, fast-p ----------------------------------------------------------


def test_audit(pool, tmp_path):
    fleet = tmp_path / "fleet"
    for name in ("a", "b"):
        shutil.copytree(SGEMM, fleet / name)
    result = cli("audit", fleet, "--out", tmp_path / "cli")
    assert result.exit_code == 0, result.output
    done = api.audit(fleet, out=tmp_path / "api")
    by_cli = json.loads((tmp_path / "cli" / "audit.json").read_text())
    assert [e["name"] for e in by_cli["entries"]] == [e.name for e in done.report.entries] == ["a", "b"]
    assert done.folder == tmp_path / "api" and (done.folder / "audit.html").is_file()
    opened = len(pool)
    (tmp_path / "empty").mkdir()
    line = same_refusal(["audit", tmp_path / "empty"], api.audit, tmp_path / "empty")
    assert line == f"{tmp_path / 'empty'}: no experiment.json below it" and len(pool) == opened


def test_import_kernelbench(tmp_path):
    pytest.importorskip("torch")
    result = cli("import", "kernelbench", KB / "19_ReLU.py", "--out", tmp_path / "cli")
    assert result.exit_code == 0, result.output
    imported = api.import_kernelbench(KB / "19_ReLU.py", tmp_path / "api")
    assert str(imported.experiment.signature) in result.output
    for name in ("experiment.json", "input_cases.json", "reference.py", "vendor.py"):
        assert (tmp_path / "cli" / name).read_text() == (tmp_path / "api" / name).read_text()
    same_refusal(["import", "kernelbench", KB / "19_ReLU.py", "--out", tmp_path / "x", "--name", "1bad"],
                 api.import_kernelbench, KB / "19_ReLU.py", tmp_path / "x", name="1bad")


def test_fast_p(tmp_path, monkeypatch):
    from tests.test_from_scratch import run_agent
    from tests.scripted import answer

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    run, _, _, _ = run_agent(tmp_path, [answer("ok 0.5", "first")])
    result = cli("fast-p", run.path, "--p", "1", "--json", tmp_path / "cli.json")
    assert result.exit_code == 0, result.output
    metrics = api.fast_p(run.path, p=[1.0])
    assert json.loads((tmp_path / "cli.json").read_text()) == json.loads(metrics.to_json())
    same_refusal(["fast-p", run.path, "--baseline", "jit"], api.fast_p, run.path, baseline="jit")


# --- docs, doctor ---------------------------------------------------------------------------------


def test_docs():
    result = cli("docs", "shared memory bank conflicts", "--offline", "-k", "2")
    assert result.exit_code == 0, result.output
    answer = api.docs("shared memory bank conflicts", online=False, top=2)
    assert [h.entry.title for h in answer.hits] and all(h.entry.title in result.output for h in answer.hits)
    same_refusal(["docs", "tiling", "--top", "0"], api.docs, "tiling", top=0)
    same_refusal(["docs"], api.docs)


def test_doctor():
    result = cli("doctor")
    found = api.doctor()
    assert result.exit_code == (0 if found.ok else 1)
    for check in found.checks:
        assert check.name in result.output
    same_refusal(["doctor", "--device", "-1"], api.doctor, device=-1)


# --- inputs before any GPU work -----------------------------------------------------------------


@pytest.mark.parametrize("call", [
    lambda d: api.check(d / "nope.json"),
    lambda d: api.evaluate(d / "nope.json"),
    lambda d: api.optimize(d / "nope.json", strategy="tune"),
    lambda d: api.verify(d / "nope"),
    lambda d: api.replay(d / "nope"),
    lambda d: api.report(d / "nope"),
    lambda d: api.export(d / "nope", to="torch", out=d / "out"),
    lambda d: api.guard_record(d / "nope"),
    lambda d: api.guard_check(d / "nope.json"),
    lambda d: api.audit(d / "nope"),
    lambda d: api.import_kernelbench(d / "nope.py", d / "out"),
    lambda d: api.fast_p(d / "nope"),
], ids=["check", "evaluate", "optimize", "verify", "replay", "report", "export", "guard-record", "guard-check",
        "audit", "import-kernelbench", "fast-p"])
def test_a_path_that_does_not_exist_is_not_found_before_any_gpu_work(call, pool, tmp_path):
    message = api_refusal(call, tmp_path)
    assert "nope" in message and "not found" in message, message
    assert not pool


# --- the same, on a fake GPU that runs the real harness (tests/fake_pool.py) ------------------------


def relu(x, n):
    import numpy as np

    return np.maximum(x, 0)


@pytest.fixture
def on_the_fake_device(monkeypatch, tmp_path):
    """A small experiment built in Python (a NumPy reference), every pool a fake GPU running the harness."""
    import numpy as np

    from cudaopt.pool import pools
    from tests.fake_pool import FakePool

    monkeypatch.setattr(pools, "open_pool", lambda devices, ray=None, log_dir=None: FakePool(
        {"relu": lambda x, n: {"y": np.maximum(x, 0)}}))
    x = np.random.default_rng(1).normal(size=4096).astype(np.float32)
    kernel = ('extern "C" __global__ void relu(const float* x, float* y, int n) {\n'
              "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n    if (i < n) y[i] = fmaxf(x[i], 0.0f);\n}\n")
    return api.experiment(relu, {"x": x, "n": x.size}, kernel=kernel, folder=tmp_path / "relu",
                          signature='extern "C" __global__ void relu(const float* x, float* y, int n)',
                          launch={"grid": ["cdiv(n, BLOCK)"], "block": ["BLOCK"]}, tunables={"BLOCK": [128, 256]})


def test_evaluate_verify_and_guard_on_the_fake_device(on_the_fake_device, tmp_path):
    config = on_the_fake_device.args.config
    result = cli("evaluate", "--config", config, "--json", tmp_path / "cli.json")
    assert result.exit_code == 0, result.output
    measured = api.evaluate(config)
    by_cli = json.loads((tmp_path / "cli.json").read_text())["candidate"]
    assert by_cli["status"] == measured.candidate.status == "ok"
    assert [c["timing"]["median_us"] for c in by_cli["cases"]] == [c.timing.median_us for c in measured.candidate.cases]
    run = api.optimize(config, strategy="tune", results=tmp_path / "results").path
    result = cli("verify", run, "--seed", "5")
    assert result.exit_code == 0, result.output
    assert json.loads((run / "verify.json").read_text())["cases"] == json.loads(api.verify(run, seed=5).to_json())["cases"]
    result = cli("guard", "record", run, "--out", tmp_path / "guard.json", "--seed", "2", "--repeats", "2")
    assert result.exit_code == 0, result.output
    recorded = api.guard_record(run, out=tmp_path / "api-guard.json", seed=2, repeats=2)
    assert json.loads((tmp_path / "guard.json").read_text())["cases"] == json.loads(recorded.baseline.to_json())["cases"]
