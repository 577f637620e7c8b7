"""Nsight Compute on the GPU: a real profile of the example kernel, and `cudaopt optimize --use-nsight
--nvidia-research` with a scripted model that asks for a profile and searches the documentation.

When ``$CUDAOPT_RECORD_NCU`` names a folder, the raw CSV of the profile is kept there: that is how
``tests/fixtures/ncu/sgemm_initial_raw.csv`` was recorded.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cudaopt.cli import app
from cudaopt.insight import ncu
from cudaopt.insight.card import build_card
from cudaopt.compilekit.locate import find_tool
from tests.conftest import SGEMM
from tests.fake_openai import FakeOpenAI

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(find_tool("ncu") is None, reason="ncu not found")]

TILE16 = {"grid": ["cdiv(n, 16)", "cdiv(m, 16)"], "block": [16, 16], "shared_bytes": 0}


def test_the_initial_sgemm_profiled_at_its_largest_case_names_a_real_bound(sgemm):
    request = ncu.profile_request(sgemm.request((SGEMM / "initial.cu").read_text(), request_id="profile"))
    assert [c.name for c in request.cases] == ["square-4096"]
    profile = ncu.profile(request, find_tool("ncu"))
    if os.environ.get("CUDAOPT_RECORD_NCU"):
        Path(os.environ["CUDAOPT_RECORD_NCU"], "sgemm_initial_raw.csv").write_text(profile.raw_csv)
    card = build_card(profile.metrics, case=profile.case)
    print(card.to_text())
    assert card.kernel == "matmul_f32" and card.case == "square-4096"
    assert card.bound in ("memory", "compute", "latency", "occupancy") and card.rule
    assert card.duration_us and card.duration_us > 100  # a 4096 cube takes milliseconds
    assert card.registers_per_thread and card.stalls


def test_optimize_with_use_nsight_and_nvidia_research_answers_both_tools(tmp_path):
    answer = "```cuda\n{}\n```\n```json\n{}\n```".format(
        (SGEMM / "initial.cu").read_text(), json.dumps({"launch": TILE16, "rationale": "the same kernel"}))
    script = [{"tool_calls": [{"name": "profile_kernel", "arguments": {"attempt_id": 0}},
                              {"name": "search_cuda_docs", "arguments": {"query": "shared memory bank conflicts"}}]},
              answer]
    runner = CliRunner(env={"COLUMNS": "200", "OPENAI_API_KEY": ""})
    with FakeOpenAI(script) as server:
        result = runner.invoke(app, ["optimize", "--config", str(SGEMM / "experiment.json"), "--max-iterations", "1",
                                     "--strategy", "agent", "--use-nsight", "--nvidia-research", "--no-cache", "--base-url", server.url,
                                     "--results-dir", str(tmp_path / "results")])
    assert result.exit_code == 0, result.output
    run = tmp_path / "results" / "run-001"
    call = json.loads((run / "model-001.json").read_text())
    tool, research = call["tool_calls"]
    assert tool["name"] == "profile_kernel" and "error" not in tool["result"], tool["result"]
    assert tool["result"]["bound"] in ("memory", "compute", "latency", "occupancy")
    assert research["name"] == "search_cuda_docs" and research["result"]["results"]
    assert all(hit["source"].startswith("https://") for hit in research["result"]["results"])
    assert any("Bottleneck card: matmul_f32 on case square-4096" in str(m.get("content"))
               for m in server.requests[1]["messages"][-2:])
    stored = json.loads((run / "profiles" / "attempt-0.json").read_text())
    assert stored["raw_csv"].count("matmul_f32") >= 1 and stored["card"]["duration_us"] > 0
    assert "Bottleneck cards (Nsight Compute)" in (run / "report.html").read_text()
