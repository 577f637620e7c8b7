"""`cudaopt optimize` end to end on the GPU, with a scripted model serving real kernels."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from cudaopt.cli import app
from cudaopt.record.files import History, Summary
from cudaopt.wire.protocol import EvalRequest
from tests.conftest import SGEMM, kernel_source
from tests.fake_openai import FakeOpenAI

pytestmark = pytest.mark.gpu

TILE16 = {"grid": ["cdiv(n, 16)", "cdiv(m, 16)"], "block": [16, 16], "shared_bytes": 0}
BIG = "m * n >= 1048576"
HYBRID_LAUNCH = {
    "grid": [f"cdiv(n, 128) if {BIG} else cdiv(n, 16)", f"cdiv(m, 128) if {BIG} else cdiv(m, 16)"],
    "block": [f"256 if {BIG} else 16", f"1 if {BIG} else 16"],
    "shared_bytes": 0,
}


def hybrid_kernel() -> str:
    """What a model might propose: the 128x128 register-tiled path for large matrices, the 16x16
    tiled path (the initial kernel) for small ones, chosen by the launch shape."""
    big = kernel_source("register_tiled.cu").replace(
        'extern "C" __global__ void __launch_bounds__(256)\nmatmul_f32(', "__device__ __forceinline__ void big_tile(")
    small = (SGEMM / "initial.cu").read_text().replace(
        'extern "C" __global__ void matmul_f32(', "__device__ __forceinline__ void small_tile(")
    assert "big_tile(" in big and "small_tile(" in small
    return big + small + (
        'extern "C" __global__ void __launch_bounds__(256)\n'
        "matmul_f32(const float* a, const float* b, float* c, int m, int n, int k)\n"
        "{\n    if (blockDim.x == 256) big_tile(a, b, c, m, n, k); else small_tile(a, b, c, m, n, k);\n}\n"
    )


def answer(source: str, launch: dict, rationale: str) -> str:
    return f"```cuda\n{source}\n```\n```json\n{json.dumps({'launch': launch, 'rationale': rationale})}\n```"


def test_optimize_end_to_end_with_real_kernels(tmp_path, supervisor):
    script = [
        answer(kernel_source("compile_error.cu"), TILE16, "fails to compile"),
        answer(kernel_source("half_operands.cu"), TILE16, "half precision operands"),
        answer((SGEMM / "reference.cu").read_text(), TILE16, "the naive kernel: slower"),
        answer(hybrid_kernel(), HYBRID_LAUNCH, "128x128 register tiles for large shapes"),
    ]
    runner = CliRunner(env={"COLUMNS": "200", "OPENAI_API_KEY": ""})
    with FakeOpenAI(script) as server:
        result = runner.invoke(app, ["optimize", "--config", str(SGEMM / "experiment.json"), "--max-iterations", "4",
                                     "--base-url", server.url, "--results-dir", str(tmp_path / "results")])
    assert result.exit_code == 0, result.output
    run = tmp_path / "results" / "run-001"
    attempts = History.model_validate_json((run / "history.json").read_text()).attempts
    assert [a.status for a in attempts] == ["ok", "compile_error", "precision", "ok", "ok"]
    summary = Summary.model_validate_json((run / "summary.json").read_text())
    assert summary.best_attempt == 4, [(a.id, a.status, a.score_us) for a in attempts]
    assert summary.speedup > 1.0, [(c.name, c.speedup) for c in summary.cases]
    slower = attempts[3].score_us
    assert slower > attempts[0].score_us  # the naive kernel was slower than the baseline
    # the winner was crowned by the audit: 11 checked timed launches per performance case at least
    audit = summary.audit
    assert audit.winner == 4 and [a.status for a in audit.audits] == ["ok"], audit
    performance = [c.name for c in summary.cases if c.role == "performance"]
    assert all(audit.checked_launches_per_case[name] >= 11 for name in performance), audit.checked_launches_per_case
    assert audit.escape_bound < 2 ** -11 and audit.run_escape_bound < 1e-3
    assert "crowning audit: #4 passed, 11+ checked timed launches per performance case" in result.output
    print(result.output)  # the final table, for the record

    # best.cu passes `cudaopt evaluate` with the winner's launch configuration
    best = run / "best.cu"
    assert best.read_text().strip() == hybrid_kernel().strip()
    check = runner.invoke(app, ["evaluate", "--config", str(SGEMM / "experiment.json"), "--kernel", str(best),
                                "--launch", attempts[4].launch.to_json(), "--iterations", "20",
                                "--no-time-reference"])
    assert check.exit_code == 0, check.output

    # every best-case-N.json replays on its own
    replays = sorted(run.glob("best-case-*.json"))
    assert len(replays) == 4
    for path in replays:
        request = EvalRequest.model_validate_json(path.read_text())
        replayed = supervisor.evaluate(request)
        assert replayed.status == "ok", (path.name, replayed.reason)

    # the heatmap marks the failed attempts
    svg = (run / "heatmap.svg").read_text()
    assert svg.count("failed") >= 2 and (run / "heatmap.png").stat().st_size > 1000
