"""The bundled knowledge base, its BM25 ranking, `cudaopt docs`, and the agent's research tool."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from cudaopt.agent.graph import Budget
from cudaopt.agent.model import ModelSettings
from cudaopt.agent.research import entries, parse_entry, search, search_cuda_docs
from cudaopt.cli import app
from cudaopt.optimize import ExperimentArgs, start_or_resume
from cudaopt.record.schema import ModelCall
from tests.conftest import SGEMM
from tests.fake_openai import FakeOpenAI
from tests.scripted import ScriptedEvaluator, answer


@pytest.mark.parametrize(
    "query,expected",
    [
        ("shared memory bank conflicts padding", "bank_conflicts.md"),
        ("coalesced global memory access stride", "coalescing.md"),
        ("tensor cores wmma half precision", "tensor_cores_wmma.md"),
        ("register blocking micro-tile outer product", "register_blocking.md"),
        ("occupancy registers __launch_bounds__", "occupancy.md"),
        ("warp shuffle reduction sum", "warp_shuffle_reduction.md"),
        ("cp.async double buffering pipeline", "async_copy.md"),
        ("float4 vectorized loads alignment", "vectorized_access.md"),
        ("hopper thread block clusters TMA", "hopper_specifics.md"),
    ],
)
def test_the_right_entry_ranks_first(query, expected):
    hits = search(query)
    assert hits and hits[0].entry.name == expected
    assert all(a.score >= b.score for a, b in zip(hits, hits[1:], strict=False))


def test_every_entry_cites_nvidia_documentation():
    assert len(entries()) >= 12
    for e in entries():
        assert e.source.startswith(("https://docs.nvidia.com/", "https://developer.nvidia.com/")), e.name
        assert e.section and len(e.text) > 300


def test_nothing_relevant_gives_nothing():
    assert search("xyzzy plugh") == [] and search("   ") == []


def test_a_malformed_entry_is_named():
    with pytest.raises(ValueError, match="bad.md: header lacks"):
        parse_entry("bad.md", "---\ntitle: x\n---\ntext")


def test_cudaopt_docs_answers_offline_with_sources():
    result = CliRunner(env={"COLUMNS": "200"}).invoke(app, ["docs", "shared memory bank conflicts", "-k", "2"])
    assert result.exit_code == 0
    assert "Shared-memory bank conflicts and padding" in result.output
    assert "source: CUDA C++ Programming Guide" in result.output and "docs.nvidia.com" in result.output
    assert CliRunner().invoke(app, ["docs", "xyzzy"]).exit_code == 1


def test_the_tool_result_carries_sources():
    result = search_cuda_docs("coalescing")
    assert result["results"][0]["source"].startswith("https://docs.nvidia.com/")


def run_with(tmp_path, script, research):
    with FakeOpenAI(script) as server:
        run, _ = start_or_resume(ExperimentArgs(config=str(SGEMM / "experiment.json")),
                                 ModelSettings(base_url=server.url), Budget(max_iterations=1),
                                 tmp_path / "results", ScriptedEvaluator(), research=research)
    return run, server


def test_nvidia_research_gives_the_model_the_tool_and_records_what_it_returned(tmp_path):
    script = [{"tool_calls": [{"name": "search_cuda_docs", "arguments": {"query": "register blocking"}}]},
              answer("ok 0.5")]
    run, server = run_with(tmp_path, script, research=True)
    tools = [t["function"]["name"] for t in server.requests[0]["tools"]]
    assert tools == ["gpu_info", "search_cuda_docs"]
    assert "call search_cuda_docs" in server.requests[0]["messages"][0]["content"]
    call = ModelCall.model_validate(run.read_json("model-001.json"))
    result = call.tool_calls[0]["result"]
    assert result["results"][0]["title"].startswith("Register blocking")
    assert "efficient_gemm" in result["results"][0]["source"]


def test_without_the_flag_the_tool_is_not_offered(tmp_path):
    _, server = run_with(tmp_path, [answer("ok 0.5")], research=False)
    assert [t["function"]["name"] for t in server.requests[0]["tools"]] == ["gpu_info"]
