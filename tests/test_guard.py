"""`cudaopt guard` without a GPU: recording a guard file, checking against it (A/B and recorded
figures) with a scripted evaluator, and bad or mismatched guard files as one-line errors."""

from __future__ import annotations

import json
import math
import subprocess

import numpy as np
import pytest

from cudaopt.errors import ExperimentError
from cudaopt.guard.check import Settings, check
from cudaopt.guard.files import GuardBaseline, read_guard
from cudaopt.guard.load import load_guard
from cudaopt.guard.record import record
from cudaopt.wire.results import DeviceInfo
from cudaopt.record.runs import ExperimentArgs
from tests.scripted import BASE_US, VENDOR, ScriptedEvaluator, kernel, trial_of

CASES = ["odd-31x37x29", "square-256", "rect-384x256x320", "square-4096", "holdout-515x261x1031",
         "holdout-96x3072x1536"]
TIMED = ["square-256", "rect-384x256x320", "square-4096"]


def write_guard(folder, source: str = kernel("ok 0.5"), evaluator=None, **options):
    """Record ``source`` (as kernels/k.cu) on the example copy in ``folder``; the guard file's path."""
    (folder / "kernels").mkdir(exist_ok=True)
    path = folder / "kernels" / "k.cu"
    path.write_text(source)
    args = ExperimentArgs(config=str(folder / "experiment.json"))
    out = folder / "guards" / "k.json"
    done = record(trial_of(args, path, source), evaluator or ScriptedEvaluator(), out=out, **options)
    assert done.baseline is not None, done.failures
    out.parent.mkdir(exist_ok=True)
    out.write_text(done.baseline.to_json(indent=2))
    return out


def old_kernel(folder, result: str):
    path = folder / f"old-{result.replace(' ', '-')}.cu"
    path.write_text(kernel(result))
    return path


@pytest.fixture
def guard(example):
    folder, _ = example
    return write_guard(folder)


def test_record_writes_a_versioned_file_with_every_figure(example):
    folder, _ = example
    evaluator = ScriptedEvaluator()
    path = write_guard(folder, evaluator=evaluator, repeats=3, seed=40)
    data = json.loads(path.read_text())
    assert data["schema_version"] == 1
    baseline = read_guard(path)
    assert baseline.experiment.config == "../experiment.json"  # relative: the same in any checkout
    assert baseline.kernel.file == "../kernels/k.cu" and len(baseline.kernel.sha256) == 64
    assert baseline.lock == ExperimentArgs(config=str(folder / "experiment.json")).load().lock()
    assert baseline.gpu.name == "Scripted GPU" and baseline.seed == 40 and baseline.repeats == 3
    assert baseline.checked == CASES  # holdout included
    assert [c.name for c in baseline.cases] == TIMED
    big = baseline.cases[-1]
    assert big.medians_us == [BASE_US["square-4096"] * 0.5] * 3 and big.median_us == 8500.0
    assert big.timing.p10_us < big.median_us < big.timing.p90_us
    assert big.vendor_median_us == BASE_US["square-4096"] * VENDOR and baseline.vendor == "cuBLAS SGEMM (cupy)"
    check_request, *timed = evaluator.requests
    assert [c.name for c in check_request.cases] == CASES and check_request.time_roles == []
    assert [c.seed for c in check_request.cases] == [40, 41, 42, 43, 44, 45]  # fresh seeds, not the file's
    assert len(timed) == 3 and [bool(r.vendors) for r in timed] == [True, False, False]


def test_a_kernel_that_fails_a_case_is_not_recorded(example):
    folder, _ = example
    args = ExperimentArgs(config=str(folder / "experiment.json"))
    source = kernel("mismatch")
    done = record(trial_of(args, folder / "k.cu", source), ScriptedEvaluator(), out=folder / "g.json")
    assert done.baseline is None and done.failures == ["odd-31x37x29: mismatch: c: 37/1147 wrong"]


def test_ab_against_itself_passes_with_requests_interleaved_in_alternating_order(guard, example):
    folder, _ = example
    evaluator = ScriptedEvaluator()
    done = check(load_guard(guard, against=old_kernel(folder, "ok 0.5")), evaluator, Settings(seed=7))
    assert done.passed and done.mode == "ab"
    assert [c.verdict for c in done.cases] == ["passed", "within", "within", "within", "passed", "passed"]
    assert done.cases[0].message.startswith("checked")
    first, *timed = evaluator.requests
    assert [c.seed for c in first.cases] == [7, 8, 9, 10, 11, 12] and first.time_roles == []
    big = [r for r in timed if r.cases[0].name == "square-4096"]
    assert [r.cases[0].seed for r in big] == [10] * 10  # the same fresh inputs for both sides
    case = done.cases[3]
    assert case.ratio == case.ratio_low == case.ratio_high == 1.0 and len(case.candidate_medians_us) == 5
    assert done.score_ratio == 1.0


def test_the_sides_alternate_so_neither_always_goes_first(example):
    folder, _ = example
    guard = write_guard(folder, kernel("ok 0.5"))
    evaluator = ScriptedEvaluator()
    check(load_guard(guard, against=old_kernel(folder, "ok 0.45")), evaluator, Settings(repeats=4))
    sides = ["new" if "ok 0.5" in r.kernel.source else "old" for r in evaluator.requests[1:]
             if r.cases[0].name == "square-256"]
    assert sides == ["new", "old", "old", "new", "new", "old", "old", "new"]


def test_a_slower_kernel_is_a_regression_with_its_figures(guard, example):
    folder, _ = example
    done = check(load_guard(guard, against=old_kernel(folder, "ok 0.45")), ScriptedEvaluator(), Settings())
    assert not done.passed
    big = done.cases[3]
    assert big.verdict == "regressed" and big.failed and big.ratio == pytest.approx(0.5 / 0.45)
    assert "slower beyond the limit: time +11.1%" in big.message and "8500.00 µs now, 7650.00 µs in" in big.message
    assert big.message.endswith("5 pairs") and "limit +3.0%" in big.message


def test_a_faster_kernel_is_reported_as_an_improvement(guard, example):
    folder, _ = example
    done = check(load_guard(guard, against=old_kernel(folder, "ok 0.6")), ScriptedEvaluator(), Settings())
    assert done.passed and {c.verdict for c in done.cases if c.role == "performance"} == {"improved"}
    assert done.score_ratio == pytest.approx(0.5 / 0.6)


def test_the_allowed_slowdown_is_a_setting(guard, example):
    folder, _ = example
    old = old_kernel(folder, "ok 0.48")  # the new kernel is 4.2% slower
    assert not check(load_guard(guard, against=old), ScriptedEvaluator(), Settings()).passed
    assert check(load_guard(guard, against=old), ScriptedEvaluator(), Settings(max_slowdown=0.05)).passed


class Noisy(ScriptedEvaluator):
    """Medians with a log-normal wobble (0.5%) shared by requests that run close together, and a
    smaller one of their own: what interleaving is for."""

    def __init__(self, seed: int = 1):
        super().__init__()
        self.rng = np.random.default_rng(seed)
        self.drift = 0.0

    def evaluate(self, request, on_event=None):
        result = super().evaluate(request, on_event)
        self.drift = 0.5 * self.drift + self.rng.normal(0, 0.005)
        for case in result.cases:
            if case.timing:
                factor = math.exp(self.drift + self.rng.normal(0, 0.001))
                case.timing = case.timing.model_copy(update={"median_us": case.timing.median_us * factor})
        return result


def test_with_noise_itself_is_within_and_ten_percent_slower_is_caught(guard, example):
    folder, _ = example
    same = check(load_guard(guard, against=old_kernel(folder, "ok 0.5")), Noisy(), Settings())
    assert same.passed, [c.message for c in same.cases]
    big = same.cases[3]
    assert big.ratio_low < big.ratio < big.ratio_high and big.ratio_low < 1.0 < big.ratio_high
    slower = check(load_guard(guard, against=old_kernel(folder, "ok 0.455")), Noisy(), Settings())
    assert not slower.passed and slower.cases[3].verdict == "regressed"


def test_quick_trades_repeats_and_launches_for_time(guard, example):
    folder, _ = example
    evaluator = ScriptedEvaluator()
    done = check(load_guard(guard, against=old_kernel(folder, "ok 0.5")), evaluator, Settings(quick=True))
    assert done.repeats == 4 and done.protocol.iterations == 30 and done.protocol.warmup == 5
    assert all(r.protocol.iterations == 30 for r in evaluator.requests)
    recorded = check(load_guard(guard), ScriptedEvaluator(), Settings(quick=True))
    assert recorded.repeats == 4 and recorded.protocol.iterations == 100  # comparable with the record


def test_against_the_recorded_figures_on_the_same_gpu(guard):
    done = check(load_guard(guard), ScriptedEvaluator(), Settings())
    assert done.passed and done.mode == "recorded" and done.against.startswith("the figures recorded on")
    assert [c.verdict for c in done.cases[1:4]] == ["within"] * 3
    assert done.cases[3].message.endswith("5 repeats")


class OtherGpu(ScriptedEvaluator):
    def device_info(self):
        return DeviceInfo(name="Another GPU", arch="sm_80", driver_version="550.1")


def test_recorded_figures_from_another_gpu_fail_or_skip_by_flag_and_correctness_still_counts(guard):
    failed = check(load_guard(guard), OtherGpu(), Settings())
    assert not failed.passed
    assert "name: recorded 'Scripted GPU', now 'Another GPU'" in failed.environment_differences
    assert "driver_version: recorded '', now '550.1'" in failed.environment_differences
    assert [c.verdict for c in failed.cases] == ["passed", "other_gpu", "other_gpu", "other_gpu", "passed", "passed"]
    evaluator = OtherGpu()
    skipped = check(load_guard(guard), evaluator, Settings(other_gpu="skip"))
    assert skipped.passed and [c.verdict for c in skipped.cases][1:4] == ["skipped"] * 3
    assert len(evaluator.requests) == 1 and len(evaluator.requests[0].cases) == 6  # checked, never timed


def test_ab_on_another_gpu_is_still_a_comparison(guard, example):
    folder, _ = example
    done = check(load_guard(guard, against=old_kernel(folder, "ok 0.5")), OtherGpu(), Settings())
    assert done.passed and done.environment_differences and done.cases[3].verdict == "within"


def test_an_incorrect_kernel_fails_and_says_how(example):
    folder, _ = example
    guard = write_guard(folder)
    (folder / "kernels" / "k.cu").write_text(kernel("mismatch"))
    done = check(load_guard(guard, against=old_kernel(folder, "ok 0.5")), ScriptedEvaluator(), Settings())
    assert not done.passed and done.source_changed
    assert done.cases[0].verdict == "incorrect" and done.cases[0].message == "mismatch: c: 37/1147 wrong"
    assert any("changed since the guard was recorded" in note for note in done.notes)


def test_a_kernel_that_no_longer_compiles_fails_every_case_and_is_never_timed(example):
    folder, _ = example
    guard = write_guard(folder)
    (folder / "kernels" / "k.cu").write_text(kernel("compile_error"))
    evaluator = ScriptedEvaluator()
    done = check(load_guard(guard, against=old_kernel(folder, "ok 0.5")), evaluator, Settings())
    assert {c.verdict for c in done.cases} == {"incorrect"} and len(evaluator.requests) == 1
    assert done.cases[2].message.startswith("compile_error: default_program(3)")


def test_an_old_kernel_that_fails_is_an_error_not_a_pass(guard, example):
    folder, _ = example
    done = check(load_guard(guard, against=old_kernel(folder, "compile_error")), ScriptedEvaluator(), Settings())
    assert not done.passed and done.cases[1].verdict == "error"
    assert "the old kernel (" in done.cases[1].message and "compile_error" in done.cases[1].message


# --- bad and mismatched guard files -----------------------------------------------------------


def rewrite(path, change):
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


@pytest.mark.parametrize("change,field,words", [
    (lambda d: d.update(schema_version=2), "schema_version",
     "made by a newer cudaopt (schema_version 2; this one reads up to 1): upgrade cudaopt"),
    (lambda d: d["kernel"].pop("sha256"), "kernel.sha256", "Field required"),
    (lambda d: d["cases"][0].update(medians_us=[1.0]), "cases[0].medians_us", "at least 2"),
    (lambda d: d.update(surprise=1), "surprise", "not a known key (known: "),
    (lambda d: d["cases"].pop(), "cases", "figures for"),
    (lambda d: d["lock"].update(lock="0" * 64), "lock", "record it again"),
    (lambda d: d["kernel"].update(file="../kernels/gone.cu"), "kernel.file", "gone.cu not found"),
])
def test_a_bad_or_mismatched_guard_file_names_the_file_and_the_field(guard, change, field, words):
    rewrite(guard, change)
    with pytest.raises(ExperimentError) as caught:
        load_guard(guard)
    assert caught.value.file == str(guard) and caught.value.field == field, str(caught.value)
    assert words in caught.value.message and "\n" not in str(caught.value)


def test_a_guard_file_that_is_not_json_or_missing(guard, tmp_path):
    guard.write_text("{\n  oops")
    with pytest.raises(ExperimentError, match="line 2: not valid JSON"):
        load_guard(guard)
    with pytest.raises(ExperimentError, match="guard file not found"):
        load_guard(tmp_path / "nope.json")


def test_changed_input_cases_invalidate_the_guard(guard, example):
    _, edit = example
    edit("input_cases.json", lambda d: d["cases"][0]["outputs"]["c"].update(rtol=1e-3))
    with pytest.raises(ExperimentError, match="input cases or the harness changed since this guard was recorded"):
        load_guard(guard)


def test_an_old_kernel_with_another_signature_is_refused(guard, example):
    folder, _ = example
    other = folder / "other.cu"
    other.write_text(kernel("ok 0.5").replace("int k)", "long k)"))
    with pytest.raises(ExperimentError, match="does not match the experiment"):
        load_guard(guard, against=other)


def test_the_schema_is_read_back_from_its_json():
    schema = GuardBaseline.model_json_schema()
    assert schema["properties"]["schema_version"]["maximum"] == 1


# --- --against-ref ----------------------------------------------------------------------------


def git(folder, *args):
    subprocess.run(["git", "-C", str(folder), "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
                   check=True, capture_output=True)


@pytest.fixture
def repo(example):
    """The example in a git repository: the guard and a kernel 10% slower than now committed."""
    folder, _ = example
    guard = write_guard(folder, kernel("ok 0.55"))
    git(folder, "init", "-q")
    git(folder, "add", ".")
    git(folder, "commit", "-q", "-m", "slow")
    (folder / "kernels" / "k.cu").write_text(kernel("ok 0.5"))
    return folder, guard


def test_against_ref_reads_the_old_kernel_from_the_commit(repo):
    folder, guard = repo
    evaluator = ScriptedEvaluator()
    done = check(load_guard(guard, against_ref="HEAD"), evaluator, Settings())
    assert done.passed and done.mode == "ab" and done.against == f"{(folder / 'kernels' / 'k.cu').resolve()} at HEAD"
    assert {c.verdict for c in done.cases if c.role == "performance"} == {"improved"}
    assert any("ok 0.55" in r.kernel.source for r in evaluator.requests)


def test_against_ref_runs_the_old_kernel_with_the_launch_its_guard_had(repo):
    folder, guard = repo
    rewrite(guard, lambda d: d["kernel"].update(launch={"grid": ["cdiv(n, 32)", "cdiv(m, 32)"], "block": [32, 32]}))
    evaluator = ScriptedEvaluator()
    check(load_guard(guard, against_ref="HEAD"), evaluator, Settings(repeats=2))
    old = [r for r in evaluator.requests if "ok 0.55" in r.kernel.source]
    new = [r for r in evaluator.requests if "ok 0.5\n" in r.kernel.source]
    assert old and all(r.launch is None for r in old)  # the committed guard had none
    assert new and all(r.launch.block == [32, 32] for r in new)


def test_against_ref_without_the_kernel_there_compares_with_the_recorded_figures(repo):
    folder, guard = repo
    git(folder, "mv", "kernels/k.cu", "kernels/renamed.cu")
    git(folder, "commit", "-q", "-m", "rename")
    (folder / "kernels" / "k.cu").write_text(kernel("ok 0.55"))
    done = load_guard(guard, against_ref="HEAD")
    assert done.against is None and any("is not in HEAD" in note for note in done.notes)


def test_against_ref_of_an_unknown_commit_or_outside_a_repository_is_bad_input(repo, tmp_path_factory):
    folder, guard = repo
    with pytest.raises(ExperimentError, match="'no-such-branch' is not a commit"):
        load_guard(guard, against_ref="no-such-branch")
    elsewhere = tmp_path_factory.mktemp("plain")
    for name in ("experiment.json", "input_cases.json", "reference.cu", "initial.cu", "tunable.cu", "vendor.py"):
        (elsewhere / name).write_text((folder / name).read_text())
    outside = write_guard(elsewhere)
    with pytest.raises(ExperimentError, match="--against-ref: .*not a git repository"):
        load_guard(outside, against_ref="HEAD")
