"""`cudaopt guard` on the GPU, end to end from the command line: the example's initial kernel
recorded, then checked against itself (passes), as a slowed copy (caught), against the slowed
copy (an improvement), as a wrong kernel (incorrect), through git (--against-ref), and against
its recorded figures."""

from __future__ import annotations

import json
import shutil
import xml.etree.ElementTree as ET

import pytest
from typer.testing import CliRunner

from cudaopt.cli import app
from cudaopt.guard.files import GuardReport, read_guard
from tests.conftest import SGEMM

pytestmark = pytest.mark.gpu
runner = CliRunner(env={"COLUMNS": "200", "OPENAI_API_KEY": ""})
FILES = ("experiment.json", "input_cases.json", "reference.cu", "initial.cu", "tunable.cu", "vendor.py")
LOOP = "for (int t = 0; t < k; t += TILE) {"


def slowed(source: str) -> str:
    """Twice the k-slices: the second half loads zeros (the loads are guarded by k), so the output
    is unchanged and the work doubles."""
    assert source.count(LOOP) == 1
    return source.replace(LOOP, "for (int t = 0; t < 2 * k; t += TILE) {")


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """The example without its 4096³ case (a check takes seconds), the initial kernel guarded."""
    folder = tmp_path_factory.mktemp("project")
    for name in FILES:
        shutil.copy(SGEMM / name, folder / name)
    cases = json.loads((folder / "input_cases.json").read_text())
    cases["cases"] = [c for c in cases["cases"] if c["name"] != "square-4096"]
    (folder / "input_cases.json").write_text(json.dumps(cases))
    config = json.loads((folder / "experiment.json").read_text())
    config["roi"].pop("case")  # it named the 4096³ case: the slowest case left pays the calls
    (folder / "experiment.json").write_text(json.dumps(config))
    (folder / "kernels").mkdir()
    shutil.copy(SGEMM / "initial.cu", folder / "kernels" / "sgemm.cu")
    (folder / "guards").mkdir()
    result = runner.invoke(app, ["guard", "record", "--config", str(folder / "experiment.json"), "--kernel",
                                 str(folder / "kernels" / "sgemm.cu"), "--out", str(folder / "guards" / "sgemm.json")])
    assert result.exit_code == 0, result.output
    return folder


@pytest.fixture
def project(recorded, tmp_path):
    """A fresh copy of the recorded project (the guard's paths are relative, so it moves)."""
    copy = tmp_path / "project"
    shutil.copytree(recorded, copy)
    return copy


def guard_check(project, *extra: str):
    out = project / "out"
    out.mkdir(exist_ok=True)
    result = runner.invoke(app, ["guard", "check", str(project / "guards" / "sgemm.json"), "--junit",
                                 str(out / "junit.xml"), "--json", str(out / "report.json"), *extra])
    report = GuardReport.model_validate_json((out / "report.json").read_text()) if result.exit_code in (0, 1) else None
    return result, report, out


def test_record_holds_the_gpu_the_figures_and_the_vendor(recorded):
    baseline = read_guard(recorded / "guards" / "sgemm.json")
    gpu = baseline.gpu
    assert gpu.name and gpu.arch.startswith("sm_") and gpu.driver_version and gpu.driver_cuda_version
    assert baseline.checked == ["odd-31x37x29", "square-256", "rect-384x256x320", "holdout-515x261x1031",
                                "holdout-96x3072x1536"]
    assert [c.name for c in baseline.cases] == ["square-256", "rect-384x256x320"]
    for case in baseline.cases:
        assert len(case.medians_us) == 5 and all(m > 1 for m in case.medians_us)
        assert case.timing.p10_us <= case.median_us * 1.1 and case.vendor_median_us
    assert baseline.vendor == "cuBLAS SGEMM (cupy)"


def test_the_kernel_against_a_copy_of_itself_passes(project):
    copy = project / "copy.cu"
    copy.write_text("// the same kernel\n" + (project / "kernels" / "sgemm.cu").read_text())
    result, report, out = guard_check(project, "--against", str(copy), "--markdown", str(project / "out" / "s.md"))
    assert result.exit_code == 0, result.output
    check = report.checks[0]
    assert check.mode == "ab" and check.passed and check.environment_differences == []
    timed = [c for c in check.cases if c.role == "performance"]
    assert [c.verdict for c in timed] == ["within", "within"], [c.message for c in timed]
    assert all(c.ratio_low < c.ratio_high and 0.97 < c.ratio < 1.03 for c in timed)
    assert ET.parse(out / "junit.xml").getroot().get("failures") == "0"
    assert "| square-256 | performance | within |" in (out / "s.md").read_text()


def test_a_slowed_copy_is_caught(project):
    kernel = project / "kernels" / "sgemm.cu"
    old = project / "old.cu"
    shutil.copy(kernel, old)
    kernel.write_text(slowed(kernel.read_text()))
    result, report, out = guard_check(project, "--against", str(old))
    assert result.exit_code == 1, result.output
    timed = [c for c in report.checks[0].cases if c.role == "performance"]
    assert [c.verdict for c in timed] == ["regressed", "regressed"], [c.message for c in timed]
    assert all(c.ratio_low > 1.2 for c in timed)  # twice the FMAs: far beyond +3%
    assert [c.verdict for c in report.checks[0].cases if c.role != "performance"] == ["passed"] * 3
    failures = [t for t in ET.parse(out / "junit.xml").getroot().iter("failure")]
    assert len(failures) == 2 and all(f.get("type") == "regressed" for f in failures)


def test_the_kernel_against_its_slowed_copy_is_an_improvement(project):
    slow = project / "slow.cu"
    slow.write_text(slowed((project / "kernels" / "sgemm.cu").read_text()))
    result, report, _ = guard_check(project, "--against", str(slow))
    assert result.exit_code == 0, result.output
    assert {c.verdict for c in report.checks[0].cases if c.role == "performance"} == {"improved"}
    assert report.checks[0].score_high < 1 / 1.03


def test_a_wrong_kernel_fails_with_the_mismatch(project):
    kernel = project / "kernels" / "sgemm.cu"
    source = kernel.read_text()
    assert source.count("c[row * n + col] = acc;") == 1
    kernel.write_text(source.replace("c[row * n + col] = acc;", "c[row * n + col] = acc * 1.01f;"))
    result, report, out = guard_check(project, "--against", str(project / "initial.cu"))
    assert result.exit_code == 1, result.output
    check = report.checks[0]
    assert {c.verdict for c in check.cases} == {"incorrect"} and check.source_changed
    assert all(c.message.startswith("mismatch: c") for c in check.cases)
    assert ET.parse(out / "junit.xml").getroot().get("failures") == "5"


def test_against_a_git_ref(project):
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    import subprocess

    git = ["git", "-C", str(project), "-c", "user.name=t", "-c", "user.email=t@example.com"]
    for args in (["init", "-q"], ["add", "."], ["commit", "-q", "-m", "the guarded kernel"]):
        subprocess.run(git + args, check=True, capture_output=True)
    kernel = project / "kernels" / "sgemm.cu"
    kernel.write_text(slowed(kernel.read_text()))
    result, report, _ = guard_check(project, "--against-ref", "HEAD")
    assert result.exit_code == 1, result.output
    check = report.checks[0]
    assert check.mode == "ab" and check.against.endswith("sgemm.cu at HEAD")
    assert {c.verdict for c in check.cases if c.role == "performance"} == {"regressed"}


def test_against_the_recorded_figures_on_the_same_gpu(project):
    # seconds after the record, on the same GPU: a loose limit, since nothing cancels drift since the record
    result, report, _ = guard_check(project, "--max-slowdown", "25%")
    assert result.exit_code == 0, result.output
    check = report.checks[0]
    assert check.mode == "recorded" and check.environment_differences == [] and check.passed


def test_quick(project):
    result, report, _ = guard_check(project, "--against", str(project / "initial.cu"), "--quick")
    assert result.exit_code == 0, result.output
    check = report.checks[0]
    assert check.repeats == 4 and check.protocol.iterations == 30
    assert all(len(c.candidate_medians_us) == 4 for c in check.cases if c.role == "performance")
