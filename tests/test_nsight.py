"""Nsight Compute on the CPU: reading recorded ncu output, the bottleneck-card rules, the profile
process (a fake ``ncu`` on PATH), graceful degradation, and the tools in the agent loop."""

from __future__ import annotations

import sys

import pytest

from cudaopt.agent.model import ModelSettings
from cudaopt.compilekit import locate
from cudaopt.insight import ncu
from cudaopt.insight.card import BottleneckCard, CardError, build_card
from cudaopt.insight.parse import KernelMetrics, parse_raw_csv
from cudaopt.optimize import Options, start_or_resume
from cudaopt.record.runs import Budget, ExperimentArgs
from cudaopt.record.files import ModelCall
from tests.conftest import ROOT, SGEMM
from tests.fake_openai import FakeOpenAI
from tests.scripted import ScriptedEvaluator, answer

FIXTURES = ROOT / "tests" / "fixtures" / "ncu"

# One entry per recorded `ncu --csv --page raw` file: (file, kernel, bound, profiled µs).
RECORDED = [
    ("sgemm_initial_raw.csv", "matmul_f32", "memory", 16941.2),  # examples/sgemm/initial.cu, square-4096, H200
    ("register_tiled_raw.csv", "matmul_f32", "compute", 3309.7),  # tests/kernels/register_tiled.cu, square-4096, H200
    ("handwritten_register_limited_raw.csv", "matmul_f32", "occupancy", 1234.567),  # written by hand
]


@pytest.mark.parametrize("name,kernel,bound,duration_us", RECORDED, ids=[r[0] for r in RECORDED])
def test_recorded_output_parses_into_a_card(name, kernel, bound, duration_us):
    (metrics,) = parse_raw_csv((FIXTURES / name).read_text())
    assert metrics.kernel == kernel
    for metric in ("sm__throughput.avg.pct_of_peak_sustained_elapsed", "gpu__time_duration.sum",
                   "launch__registers_per_thread", "smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio"):
        assert isinstance(metrics.values[metric], float), metric
    card = build_card(metrics, case="square-4096", attempt=3)
    assert card.bound == bound and card.duration_us == pytest.approx(duration_us, rel=0.02)
    assert card.rule and 2 <= len(card.evidence) <= 3 and card.stalls
    assert "selected" not in card.stalls and "not_selected" not in card.stalls
    assert f"bound: {bound}" in card.to_text() and "attempt #3" in card.to_text()
    assert BottleneckCard.model_validate_json(card.to_json()) == card


def test_the_initial_sgemm_waits_on_shared_memory_not_dram():
    card = build_card(parse_raw_csv((FIXTURES / "sgemm_initial_raw.csv").read_text())[0])
    assert card.busiest_memory == "L1/shared" and card.dram_pct < 30 and "mio_throttle" in card.stalls


def test_the_raw_page_is_read_like_ncu_writes_it():
    (m,) = parse_raw_csv((FIXTURES / "handwritten_register_limited_raw.csv").read_text())
    assert m.values["gpu__time_duration.sum"] == 1234567.0  # thousands separators
    assert m.units["gpu__time_duration.sum"] == "ns"
    assert m.values["Block Size"] == "(384, 1, 1)" and m.number("Block Size") is None
    assert "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active" not in m.values  # empty: absent, not 0
    card = build_card(m)
    assert "tensor" not in card.pipes and card.pipes["FMA"] == pytest.approx(9.64)
    assert card.occupancy_limiter == "registers (1 block per SM)"
    assert card.bank_conflicts == {"loads": 0.0, "stores": 1024.0}


def test_output_without_a_profiled_launch_gives_nothing():
    assert parse_raw_csv("==PROF== Connected to process 1\n==ERROR== something failed\n") == []
    assert parse_raw_csv("") == []


SOL = {"sm": "sm__throughput.avg.pct_of_peak_sustained_elapsed",
       "mem": "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
       "dram": "dram__throughput.avg.pct_of_peak_sustained_elapsed",
       "l2": "lts__throughput.avg.pct_of_peak_sustained_elapsed",
       "l1": "l1tex__throughput.avg.pct_of_peak_sustained_active",
       "achieved": "sm__warps_active.avg.pct_of_peak_sustained_active",
       "theoretical": "sm__maximum_warps_per_active_cycle_pct",
       "waves": "launch__waves_per_multiprocessor"}
STALL = "smsp__average_warps_issue_stalled_{}_per_issue_active.ratio"


def metrics(**values: float) -> KernelMetrics:
    named = {SOL.get(k, STALL.format(k)): float(v) for k, v in values.items()}
    return KernelMetrics(kernel="k", values=named)


def test_dram_at_its_peak_is_memory_bound_and_names_the_unit():
    card = build_card(metrics(sm=20, mem=88, dram=87, l2=40, l1=30, achieved=90, theoretical=100))
    assert card.bound == "memory" and card.busiest_memory == "DRAM"
    assert "memory throughput 88.0% of peak >= 60%" in card.rule and "DRAM at 87.0%" in card.rule


def test_sm_above_memory_and_the_threshold_is_compute_bound():
    card = build_card(metrics(sm=81, mem=64, achieved=70, theoretical=100))
    assert card.bound == "compute" and card.evidence[:2] == ["SM 81.0%", "memory 64.0%"]


def test_both_low_with_warps_in_use_is_latency_bound_named_by_its_top_stall():
    card = build_card(metrics(sm=35, mem=41, achieved=85, theoretical=100, long_scoreboard=9.5, selected=1.0,
                              not_selected=12.0, barrier=2.0, wait=0.0))
    assert card.bound == "latency" and "mostly on long_scoreboard" in card.rule
    assert list(card.stalls) == ["long_scoreboard", "barrier"]  # selected, not_selected and zeros left out


def test_both_low_with_few_warps_is_occupancy_limited_and_a_small_grid_is_named():
    card = build_card(metrics(sm=12, mem=15, achieved=21, theoretical=100, waves=0.39))
    assert card.bound == "occupancy" and card.occupancy_limiter == "the grid: 0.39 waves per SM leave SMs idle"


def test_a_profile_without_speed_of_light_figures_gives_no_card():
    with pytest.raises(CardError):
        build_card(metrics(achieved=50))


# --- the request and the command line --------------------------------------------------------


def test_the_profile_request_is_one_checked_untimed_ungated_case(sgemm):
    request = ncu.profile_request(sgemm.request("// src", request_id="x"))
    assert [c.name for c in request.cases] == ["square-4096"]  # the largest performance case
    assert request.time_roles == [] and request.check is True
    p = request.protocol
    assert (p.gate, p.flush_l2, p.input_sets) == (False, False, 1)
    assert ncu.profile_request(sgemm.request("// src"), case="square-256").cases[0].name == "square-256"
    with pytest.raises(ncu.ProfileError, match="no case named 'nope'"):
        ncu.profile_request(sgemm.request("// src"), case="nope")


def test_the_command_skips_the_reference_launch_of_the_same_name(sgemm, tmp_path):
    request = ncu.profile_request(sgemm.request("// src"))
    cmd = ncu.command("/opt/ncu", request, tmp_path / "log.csv", python="/py")
    assert cmd[:3] == ["/opt/ncu", "--target-processes", "all"]
    assert cmd[cmd.index("--kernel-name") + 1] == "regex:^(matmul_f32)$"
    assert cmd[cmd.index("--launch-skip") + 1] == "1"  # reference.cu's matmul_f32 launches first
    assert cmd[cmd.index("--launch-count") + 1] == "1"
    assert cmd[cmd.index("--metrics") + 1] == ",".join(ncu.METRICS)
    assert cmd[cmd.index("--log-file") + 1] == str(tmp_path / "log.csv")
    assert cmd[-3:] == ["/py", "-m", "cudaopt.worker.main"]
    request.reference.entry = "reference_matmul"
    cmd = ncu.command("ncu", request, tmp_path / "log.csv")
    assert cmd[cmd.index("--launch-skip") + 1] == "0"


# --- the profile process, with a fake ncu ----------------------------------------------------


@pytest.fixture
def fake_ncu(tmp_path, monkeypatch):
    """A fake ``ncu`` first on PATH; returns the file its calls are logged to."""
    folder = tmp_path / "bin"
    folder.mkdir()
    script = folder / "ncu"
    script.write_text(f"#!/bin/sh\nexec {sys.executable} {ROOT / 'tests' / 'fake_ncu.py'} \"$@\"\n")
    script.chmod(0o755)
    calls = tmp_path / "ncu-calls.jsonl"
    calls.touch()
    monkeypatch.setenv("PATH", f"{folder}:/usr/bin:/bin")
    monkeypatch.setenv("FAKE_NCU_CALLS", str(calls))
    monkeypatch.setenv("FAKE_NCU_CSV", str(FIXTURES / "handwritten_register_limited_raw.csv"))
    return calls


@pytest.fixture
def no_ncu(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.setattr(locate, "CUDA_BIN", tmp_path / "no-cuda")


def test_a_profile_reads_the_log_file_not_the_worker_stream(sgemm, fake_ncu):
    profile = ncu.profile(ncu.profile_request(sgemm.request("// src")), locate.find_tool("ncu"))
    assert profile.case == "square-4096" and profile.metrics.kernel == "matmul_f32"
    assert "==PROF==" in profile.raw_csv and profile.command[-1] == "cudaopt.worker.main"
    assert len(fake_ncu.read_text().splitlines()) == 1


def test_counters_not_permitted_is_named_with_the_fix(sgemm, fake_ncu, monkeypatch):
    monkeypatch.setenv("FAKE_NCU_MODE", "denied")
    with pytest.raises(ncu.NsightUnavailable, match="NVreg_RestrictProfilingToAdminUsers=0"):
        ncu.profile(ncu.profile_request(sgemm.request("// src")), locate.find_tool("ncu"))


def test_a_kernel_failing_its_check_under_ncu_gives_no_profile(sgemm, fake_ncu, monkeypatch):
    monkeypatch.setenv("FAKE_NCU_MODE", "mismatch")
    with pytest.raises(ncu.ProfileError, match="did not pass its check under ncu: mismatch"):
        ncu.profile(ncu.profile_request(sgemm.request("// src")), locate.find_tool("ncu"))


def test_a_hanging_profile_is_killed(sgemm, fake_ncu, monkeypatch):
    monkeypatch.setenv("FAKE_NCU_MODE", "hang")
    with pytest.raises(ncu.ProfileError, match="timeout and was killed"):
        ncu.profile(ncu.profile_request(sgemm.request("// src")), locate.find_tool("ncu"), timeout_s=1)


def test_ncu_is_found_on_path_then_in_the_cuda_folders(tmp_path, monkeypatch, no_ncu):
    assert locate.find_tool("ncu") is None
    home = tmp_path / "cuda-home"
    (home / "bin").mkdir(parents=True)
    (home / "bin" / "ncu").write_text("#!/bin/sh\n")
    (home / "bin" / "ncu").chmod(0o755)
    monkeypatch.setenv("CUDA_HOME", str(home))
    assert locate.find_tool("ncu") == str(home / "bin" / "ncu")


# --- the agent's tools -------------------------------------------------------------------


@pytest.fixture(autouse=True)
def api_key(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")


def run_agent(tmp_path, script, iterations=None, patience=None):
    with FakeOpenAI(script) as server:
        run, _ = start_or_resume(
            ExperimentArgs(config=str(SGEMM / "experiment.json")), ModelSettings(base_url=server.url),
            Budget(max_iterations=iterations or len(script), patience=patience), tmp_path / "results",
            ScriptedEvaluator(), Options(use_nsight=True),
        )
    return run, server


def tool_names(server) -> list[str]:
    return [t["function"]["name"] for t in server.requests[0]["tools"]]


def test_the_model_profiles_and_inspects_an_attempt_and_the_card_lands_in_the_run(tmp_path, fake_ncu):
    script = [{"tool_calls": [{"name": "profile_kernel", "arguments": {"attempt_id": 0}},
                              {"name": "inspect_compiled", "arguments": {"attempt_id": 0}}]},
              {"tool_calls": [{"name": "profile_kernel", "arguments": {"attempt_id": 0}}]},
              answer("ok 0.5")]
    run, server = run_agent(tmp_path, script, iterations=1)
    assert tool_names(server) == ["gpu_info", "profile_kernel", "inspect_compiled"]
    assert "profile_kernel(attempt_id)" in server.requests[0]["messages"][0]["content"]
    profiled, inspected, again = ModelCall.model_validate(run.read_json("model-001.json")).tool_calls
    assert profiled["result"]["bound"] == "occupancy" and "bound: occupancy" in profiled["result"]["card"]
    assert again["result"] == profiled["result"]
    assert len(fake_ncu.read_text().splitlines()) == 1  # cached per attempt
    assert inspected["result"]["kind"] in ("sass", "ptx") and "global_loads" in inspected["result"]
    stored = run.read_json("profiles/attempt-0.json")
    assert stored["card"]["bound"] == "occupancy" and "gpu__time_duration.sum" in stored["raw_csv"]
    assert "ncu" in stored["command"][0] and stored["case"] == "square-4096"
    assert "Bottleneck cards (Nsight Compute)" in run.file("report.html").read_text()
    assert "profiled attempt 0 on square-4096" in run.file("run.log").read_text()


def test_a_stall_puts_the_best_kernels_card_into_the_next_prompt(tmp_path, fake_ncu):
    run, server = run_agent(tmp_path, [answer("ok 1.2"), answer("ok 1.3"), answer("ok 1.1")])
    prompts = [r["messages"][1]["content"] for r in server.requests]
    assert ["Progress has stalled" in p for p in prompts] == [False, False, True]
    assert "Bottleneck card: matmul_f32 on case square-4096 (attempt #0)" in prompts[2]
    assert run.read_json("profiles/attempt-0.json")["why"] == "no new best for 2 proposals"


def test_patience_sets_when_the_loop_profiles(tmp_path, fake_ncu):
    _, server = run_agent(tmp_path, [answer("ok 1.2"), answer("ok 1.3")], patience=2)
    assert "Progress has stalled" in server.requests[1]["messages"][1]["content"]


def test_without_ncu_it_says_so_once_and_the_run_goes_on(tmp_path, no_ncu, capsys):
    run, server = run_agent(tmp_path, [{"tool_calls": [{"name": "inspect_compiled", "arguments": {"attempt_id": 0}}]},
                                       answer("ok 1.2"), answer("ok 1.3"), answer("ok 0.5")], iterations=3)
    assert tool_names(server) == ["gpu_info", "inspect_compiled"]
    notices = [line for line in capsys.readouterr().err.splitlines() if "--use-nsight" in line]
    assert len(notices) == 1 and "ncu (Nsight Compute) is not on PATH" in notices[0]
    assert "continuing without profiling" in notices[0]
    assert run.read_json("summary.json")["best_attempt"] == 3
    assert not run.file("profiles").exists()


def test_counters_not_permitted_is_said_once_and_profiling_stops(tmp_path, fake_ncu, monkeypatch, capsys):
    monkeypatch.setenv("FAKE_NCU_MODE", "denied")
    call = {"name": "profile_kernel", "arguments": {"attempt_id": 0}}
    run, _ = run_agent(tmp_path, [{"tool_calls": [call, call]}, answer("ok 1.2"), answer("ok 1.3"), answer("ok 1.1")],
                       iterations=3)
    notices = [line for line in capsys.readouterr().err.splitlines() if "--use-nsight" in line]
    assert len(notices) == 1 and "ERR_NVGPUCTRPERM" in notices[0]
    results = [c["result"] for c in ModelCall.model_validate(run.read_json("model-001.json")).tool_calls]
    assert all("ERR_NVGPUCTRPERM" in r["error"] for r in results)
    assert len(fake_ncu.read_text().splitlines()) == 1  # never tried again, not even when progress stalls
    assert run.read_json("summary.json")["attempts"] == 4


def test_only_passed_attempts_are_profiled(tmp_path, fake_ncu):
    script = [answer("mismatch"),
              {"tool_calls": [{"name": "profile_kernel", "arguments": {"attempt_id": 1}},
                              {"name": "profile_kernel", "arguments": {"attempt_id": 9}}]},
              answer("ok 0.5")]
    run, _ = run_agent(tmp_path, script, iterations=2)
    failed, unknown = ModelCall.model_validate(run.read_json("model-002.json")).tool_calls
    assert "did not pass its checks (mismatch)" in failed["result"]["error"]
    assert "no attempt #9" in unknown["result"]["error"]
    assert fake_ncu.read_text() == ""
