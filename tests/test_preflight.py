"""`cudaopt check` and the same checks before evaluate and optimize: no GPU needed."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from cudaopt.cli import app
from cudaopt.errors import ExperimentError
from cudaopt.experiment import load_experiment
from cudaopt.preflight import call_reference, preflight, smallest_case
from tests.conftest import SGEMM

runner = CliRunner(env={"COLUMNS": "200"})
SIGNATURE = json.loads((SGEMM / "experiment.json").read_text())["signature"]
GOOD = "import numpy as np\n\ndef matmul_f32(a, b, m, n, k):\n    return a.astype(np.float64) @ b\n"


def numpy_flags(tmp_path, source: str) -> list[str]:
    ref = tmp_path / "reference.py"
    ref.write_text(source)
    return ["--signature", SIGNATURE, "--reference", str(ref), "--input-cases", str(SGEMM / "input_cases.json"),
            "--initial-kernel", str(SGEMM / "initial.cu")]


def one_line(result) -> str:
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1, result.output
    return lines[0]


def test_the_example_is_ready():
    result = runner.invoke(app, ["check", "--config", str(SGEMM / "experiment.json"), "--arch", "sm_90"])
    assert result.exit_code == 0, result.output
    for text in ("cudaopt check: ready", "reference.cu compiles for sm_90", "initial.cu compiles for sm_90",
                 "10 configurations"):
        assert text in result.output


def test_a_numpy_reference_is_called_on_the_smallest_case(tmp_path):
    result = runner.invoke(app, ["check", *numpy_flags(tmp_path, GOOD)])
    assert result.exit_code == 0, result.output
    assert "ran on case 'odd-31x37x29'" in result.output


@pytest.mark.parametrize("source, message", [
    (GOOD.replace("return a.astype(np.float64) @ b", "raise ValueError('not today')"),
     "reference function raised ValueError: not today"),
    (GOOD.replace("return a.astype(np.float64) @ b", "return a"), "has shape (31, 29), the case says (31, 37)"),
    ("import numpy as np\nX = 1 / 0\n\ndef matmul_f32(a, b, m, n, k):\n    return a @ b\n", "ZeroDivisionError"),
])
def test_a_failing_numpy_reference_is_one_line_and_exit_2_before_the_gpu(tmp_path, source, message):
    for command in ("check", "evaluate"):
        result = runner.invoke(app, [command, *numpy_flags(tmp_path, source)])
        assert result.exit_code == 2, result.output
        line = one_line(result)
        assert "reference.py: reference: on case 'odd-31x37x29'" in line and message in line, line


def test_a_hanging_reference_times_out(tmp_path):
    ref = tmp_path / "reference.py"
    ref.write_text("import time\n\ndef matmul_f32(a, b, m, n, k):\n    time.sleep(60)\n")
    exp = load_experiment(signature=SIGNATURE, reference=ref, input_cases=SGEMM / "input_cases.json")
    with pytest.raises(ExperimentError, match="did not return within 2 s"):
        call_reference(exp, smallest_case(exp), timeout_s=2)


def test_a_kernel_that_does_not_compile_is_named(tmp_path):
    bad = tmp_path / "bad.cu"
    bad.write_text((SGEMM / "initial.cu").read_text().replace("float acc", "float acc = undefined_name;"))
    result = runner.invoke(app, ["check", "--config", str(SGEMM / "experiment.json"), "--kernel", str(bad)])
    assert result.exit_code == 2
    line = one_line(result)
    assert "bad.cu: compile: does not compile for" in line and "undefined_name" in line


def test_kept_device_state_over_the_limit_is_refused_before_the_gpu(tmp_path):
    """What the worker would refuse as global_state, check refuses first, naming the limit; the
    example's tunable kernel has an 8 MiB split-K workspace, which the experiment names."""
    memo = tmp_path / "memo.cu"
    memo.write_text("__device__ float memo[65536];\n" + (SGEMM / "initial.cu").read_text())
    result = runner.invoke(app, ["check", "--config", str(SGEMM / "experiment.json"), "--kernel", str(memo)])
    assert result.exit_code == 2, result.output
    line = one_line(result)
    assert "memo.cu: limits.global_bytes: the kernel keeps 262144 bytes" in line and "limits.workspace" in line
    done = runner.invoke(app, ["check", "--config", str(SGEMM / "experiment.json")])
    assert "a workspace of 8388608 bytes, poisoned before every launch" in done.output


def test_a_bad_arch_is_refused():
    result = runner.invoke(app, ["check", "--config", str(SGEMM / "experiment.json"), "--arch", "hopper"])
    assert result.exit_code == 2 and "--arch" in one_line(result)


def test_preflight_lists_what_it_checked(sgemm):
    done = preflight(sgemm, arch="sm_90", tune=False)
    assert [c.what for c in done] == ["experiment", "launches", "memory", "reference", "controls", "kernel"]
    memory = next(c.detail for c in done if c.what == "memory")
    assert "GiB" in memory or "MiB" in memory


def _softmax():
    from tests.conftest import ROOT

    return load_experiment(ROOT / "examples" / "softmax" / "experiment.json")


def test_a_cases_memory_counts_what_the_worker_holds_at_its_peak():
    """KernelBench's softmax (6.4 GB each way, three input sets, three checked launches): four
    copies of the input, four of the output, four float64 answers (three sets and a fresh one)."""
    from cudaopt.preflight import case_memory

    exp = _softmax()
    case = next(c for c in exp.case_specs if c.name == "kernelbench-4096x393216")
    n = 4096 * 393216
    need = case_memory(exp, case)
    assert 4 * 4 * n + 4 * 4 * n + 4 * 8 * n <= need < 4 * 4 * n + 4 * 4 * n + 4 * 8 * n + (1 << 30)
    assert 95 * 2**30 < need < 97 * 2**30


def test_without_a_gpu_a_case_over_the_assumed_memory_is_said_and_only_one_beyond_any_gpu_refused(monkeypatch):
    import cudaopt.preflight as pre

    monkeypatch.setattr(pre, "gpu_memory", lambda: (pre.DEFAULT_GPU_MEMORY, "assumed (no GPU here: an 80 GiB H100)"))
    line = pre.memory_estimate(_softmax())
    assert line.startswith("largest case 'kernelbench-4096x393216': about 96 GiB of the 80 GiB assumed")
    assert "needs a GPU with more memory" in line
    monkeypatch.setattr(pre, "LARGEST_GPU_MEMORY", 90 * 2**30)
    with pytest.raises(ExperimentError) as refused:
        pre.memory_estimate(_softmax())
    assert refused.value.field.startswith("cases[") and "needs about 96 GiB" in str(refused.value)
    assert "any GPU's (90 GiB)" in str(refused.value)


def test_a_case_that_cannot_fit_this_machines_gpu_is_refused_before_any_worker(monkeypatch):
    import cudaopt.preflight as pre

    monkeypatch.setattr(pre, "gpu_memory", lambda: (80 * 2**30, pre.THIS_GPU))
    from tests.conftest import ROOT

    result = runner.invoke(app, ["check", "--config", str(ROOT / "examples" / "softmax" / "experiment.json")])
    assert result.exit_code == 2
    line = one_line(result)
    assert "input_cases.json" in line and "kernelbench-4096x393216" in line and "more than the 80 GiB of this" in line
    monkeypatch.setattr(pre, "gpu_memory", lambda: (140 * 2**30, pre.THIS_GPU))
    assert "of the 140 GiB of this machine's GPU" in pre.memory_estimate(_softmax())


TINY_TUNABLE = """extern "C" __global__ void matmul_f32(const float* a, const float* b, float* c, int m, int n, int k) {
#if BROKEN
    this line does not compile;
#endif
    int row = blockIdx.y * BM + threadIdx.y, col = blockIdx.x * 32 + threadIdx.x;
    if (row >= m || col >= n) return;
    float sum = 0.0f;
    for (int i = 0; i < k; ++i) sum += a[row * k + i] * b[i * n + col];
    c[row * n + col] = sum;
}
"""


def test_a_runs_sweep_is_compiled_beside_the_checks_and_kept_for_the_worker(tmp_path):
    """Given the configurations a tune run measures first, the pre-flight compiles them too, and the
    GPU worker then reads their cubins from disk; one that does not compile is left to the run,
    which reports it as that attempt's compile error."""
    import shutil

    from cudaopt.compilekit import kept_cubins
    from cudaopt.compilekit.compiler import compile_kernel
    from cudaopt.wire.launch import NOMINAL_DEVICE, device_defines
    from cudaopt.wire.protocol import KernelSpec

    folder = tmp_path / "exp"
    shutil.copytree(SGEMM, folder)
    (folder / "tunable.cu").write_text(TINY_TUNABLE)
    config = json.loads((folder / "experiment.json").read_text())
    config["tune"] = {"kernel": "tunable.cu", "tunables": {"BM": [4, 8], "BROKEN": [0, 1]},
                      "launch": {"grid": ["cdiv(n, 32)", "cdiv(m, BM)"], "block": [32, "BM"]}}
    (folder / "experiment.json").write_text(json.dumps(config))
    experiment = load_experiment(folder / "experiment.json")
    sweep = experiment.tuning.space.sweep(10)
    assert len(sweep) == 4 and experiment.tuning.space.sweep(3) == []  # a larger space is sampled as it goes
    checked = preflight(experiment, ahead=sweep)
    assert checked[-1].what == "ahead" and checked[-1].detail.startswith("1 of 3 further configurations compiled")
    spec = KernelSpec(source=TINY_TUNABLE, entry="matmul_f32", defines={"BM": 8, "BROKEN": 0})
    assert compile_kernel(device_defines(spec, NOMINAL_DEVICE)).info.kept  # what the worker compiles: read from disk
    assert len(list(kept_cubins.folder().glob("*.cubin"))) == 4  # the reference, the initial kernel, two configurations
