"""The command line without a GPU: help, doctor, and one-line errors with exit code 2."""

import json
import shutil

import pytest
from typer.testing import CliRunner

from cudaopt.cli import app
from tests.conftest import SGEMM, gpu_present

runner = CliRunner(env={"COLUMNS": "200"})


def test_help_lists_the_commands():
    result = runner.invoke(app, ["--help"])
    assert result.exit_code == 0
    assert "evaluate" in result.output and "doctor" in result.output


def test_doctor_reports_what_is_missing_and_what_to_do():
    result = runner.invoke(app, ["doctor"])
    assert "NVRTC" in result.output and "cuda-core" in result.output
    if not gpu_present():
        assert result.exit_code == 1
        assert "nvidia-smi should list it" in result.output


def test_doctor_measure_without_a_gpu_says_nothing_was_measured():
    if gpu_present():
        pytest.skip("a GPU is here: --measure measures")
    result = runner.invoke(app, ["doctor", "--measure"])
    assert result.exit_code == 1
    assert "--measure: nothing measured: missing GPU (the table says what to do)" in result.stderr


def error_line(result):
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1, result.output
    return lines[0]


def test_missing_config_is_one_line_and_exit_2(tmp_path):
    result = runner.invoke(app, ["evaluate", "--config", str(tmp_path / "nope.json")])
    assert result.exit_code == 2
    assert error_line(result) == f"error: {tmp_path / 'nope.json'}: config file not found"


def test_bad_case_field_is_one_line_and_exit_2(tmp_path):
    for name in ("experiment.json", "reference.cu", "initial.cu", "tunable.cu", "vendor.py"):
        shutil.copy(SGEMM / name, tmp_path / name)
    cases = json.loads((SGEMM / "input_cases.json").read_text())
    cases["cases"][0]["role"] = "fastest"
    (tmp_path / "input_cases.json").write_text(json.dumps(cases))
    result = runner.invoke(app, ["evaluate", "--config", str(tmp_path / "experiment.json")])
    assert result.exit_code == 2
    line = error_line(result)
    assert "input_cases.json: cases[0].role:" in line and "Traceback" not in result.output


def test_missing_kernel_file_and_bad_launch(tmp_path):
    config = str(SGEMM / "experiment.json")
    result = runner.invoke(app, ["evaluate", "--config", config, "--kernel", str(tmp_path / "k.cu")])
    assert result.exit_code == 2 and "--kernel" in error_line(result)
    result = runner.invoke(app, ["evaluate", "--config", config, "--launch", '{"grid": [1]}'])
    assert result.exit_code == 2 and error_line(result).startswith("error: --launch: block:")


@pytest.mark.parametrize("command", [["check"], ["evaluate"], ["optimize"]])
def test_no_experiment_at_all_says_how_to_give_one(command):
    result = runner.invoke(app, command)
    assert result.exit_code == 2
    assert error_line(result).startswith("error: --config: no experiment given: give --config FILE (such as "
                                         "examples/sgemm/experiment.json)")


def test_flags_without_config_must_name_the_signature():
    result = runner.invoke(app, ["evaluate", "--reference", str(SGEMM / "reference.cu")])
    assert result.exit_code == 2
    assert "command line: signature: missing" in error_line(result)


@pytest.mark.skipif(gpu_present(), reason="needs a machine without a GPU")
def test_evaluate_without_a_gpu_says_so(tmp_path):
    result = runner.invoke(app, ["evaluate", "--config", str(SGEMM / "experiment.json")])
    assert result.exit_code == 3
    assert "did not start" in result.output and "Traceback" not in result.output
    assert "cudaopt doctor" in error_line(result) and "cudaopt check" in error_line(result)
    assert "log: (empty)" not in result.output


@pytest.mark.skipif(gpu_present(), reason="needs a machine without a GPU")
def test_the_api_s_worker_error_says_no_empty_log():
    from cudaopt import api
    from cudaopt.errors import WorkerError

    with pytest.raises(WorkerError, match="did not start") as raised:
        api.evaluate(SGEMM / "experiment.json")
    assert "log: (empty)" not in str(raised.value)


def test_version():
    from importlib.metadata import version

    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0 and result.output.strip() == f"cudaopt {version('cudaopt')}"


def test_a_json_output_that_is_not_a_regular_file_is_refused_before_any_work(tmp_path):
    config = str(SGEMM / "experiment.json")
    link = tmp_path / "stdout-link"
    link.symlink_to("/dev/stdout")
    for target, why in ((link, "is not a regular file"), (tmp_path, "is not a regular file"),
                        (tmp_path / "missing" / "out.json", "does not exist")):
        result = runner.invoke(app, ["evaluate", "--config", config, "--json", str(target)])
        assert result.exit_code == 2, result.output
        assert why in error_line(result) and "--json" in error_line(result)
    assert link.is_symlink()  # never replaced by a regular file


def test_piped_tables_keep_whole_case_names(monkeypatch):
    import io
    import sys

    from rich.table import Table

    from cudaopt.cli import console

    monkeypatch.setattr(sys, "stdout", io.StringIO())  # a pipe, as in a CI log
    monkeypatch.setenv("COLUMNS", "80")
    out = console()
    table = Table(title="cases", title_justify="left")
    for column in ("case", "role", "baseline µs", "best µs", "speed-up", "vendor µs", "vs vendor", "notes"):
        table.add_column(column)
    name = "holdout-rectangular-4097x4095x4099-odd"
    table.add_row(name, "performance", "16929.55", "3248.16", "5.21×", "2682.90", "0.83×", "flagged for review")
    with out.capture() as captured:
        out.print(table)
    assert name in captured.get() and "…" not in captured.get()


def test_a_run_s_files_are_readable_like_any_other(tmp_path):
    import os

    from cudaopt.record.rundir import write_json

    mask = os.umask(0o022)
    os.umask(mask)
    path = tmp_path / "summary.json"
    write_json(path, {"ok": True})
    assert path.stat().st_mode & 0o777 == 0o666 & ~mask


def test_a_non_finite_value_is_named_in_a_failure_line():
    from cudaopt.worker.compare import describe
    from cudaopt.wire.results import CheckInfo

    info = CheckInfo(output="c", input_set=0, phase="check", ok=False, elements=4, mismatches=1, nan_count=1,
                     first_bad_index=[2], expected=1.5, actual=None)
    assert "expected 1.5, got NaN/Inf" in describe(info) and "None" not in describe(info)


def test_a_kernel_with_another_entry_or_in_binary_is_refused_before_the_gpu(tmp_path):
    config = str(SGEMM / "experiment.json")
    other = tmp_path / "other.cu"
    other.write_text((SGEMM / "initial.cu").read_text().replace("matmul_f32", "sgemm_v2"))
    result = runner.invoke(app, ["evaluate", "--config", config, "--kernel", str(other)])
    assert result.exit_code == 2 and "no 'extern \"C\" __global__ void matmul_f32(...)' found" in error_line(result)
    binary = tmp_path / "binary.cu"
    binary.write_bytes(b"\x7fELF\x00\xff\xfe")
    result = runner.invoke(app, ["evaluate", "--config", config, "--kernel", str(binary)])
    assert result.exit_code == 2 and "not a UTF-8 text file" in error_line(result)
    assert "Traceback" not in result.output


def test_a_results_dir_that_is_a_file_is_refused_before_the_gpu(tmp_path):
    target = tmp_path / "results"
    target.write_text("not a folder")
    result = runner.invoke(app, ["optimize", "--config", str(SGEMM / "experiment.json"), "--strategy", "tune",
                                 "--results-dir", str(target)])
    assert result.exit_code == 2 and "exists and is not a folder" in error_line(result)


def test_an_unexpected_error_is_one_line_naming_its_traceback_log(monkeypatch, capsys, tmp_path):
    import pytest

    from cudaopt import cli

    def broken(**kwargs):
        raise RuntimeError("a bug\nover two lines")

    monkeypatch.setenv("CUDAOPT_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(cli, "app", broken)
    with pytest.raises(SystemExit) as exit_:
        cli.main()
    assert exit_.value.code == cli.EXIT_INTERNAL == 4
    err = capsys.readouterr().err
    assert "Traceback" not in err and len([line for line in err.splitlines() if line.strip()]) == 1
    assert "unexpected RuntimeError: a bug over two lines" in err
    (log,) = (tmp_path / "crashes").iterdir()
    assert str(log) in err.replace("\n", "") and "Traceback" in log.read_text() and "a bug" in log.read_text()


def test_help_shows_no_value_beside_a_flag_and_a_reference_may_be_pytorch():
    verify = runner.invoke(app, ["verify", "--help"])
    assert verify.exit_code == 0 and "--sanitize" in verify.output and "<bool>" not in verify.output
    check = runner.invoke(app, ["check", "--help"])
    assert "PyTorch" in check.output and "--launch" in check.output and "<bool>" not in check.output


def test_help_reads_as_the_readme_writes_it():
    """The commands' list flows (a command's line is not cut where its docstring breaks), the
    arguments are named as the README's command table names them, a repeatable option takes one
    value at a time (no ``<list[float]>``), and no flag has a value beside it."""
    top = runner.invoke(app, ["--help"]).output
    assert "the vendor alone without an initial kernel" in " ".join(line.strip("│ ") for line in top.splitlines())
    assert "(the vendor alone without an initial │" not in top
    for command, named in [(["verify"], "{RUN_DIR}"), (["report"], "{RUN_DIR}"), (["export"], "[RUN_DIR]"),
                           (["replay"], "{RUN_DIR|best-case-N.json}"), (["guard", "record"], "[RUN_DIR]"),
                           (["guard", "check"], "{FILES}..."), (["audit"], "{DIR|LIST}"),
                           (["import", "kernelbench"], "{PROBLEM}"), (["fast-p"], "{RUN_DIR}..."), (["docs"], "[QUERY]")]:
        shown = runner.invoke(app, [*command, "--help"]).output
        assert f"[OPTIONS] {named}" in shown, (command, shown)
        assert "<list[" not in shown and "<bool>" not in shown, (command, shown)
    missing = runner.invoke(app, ["verify"])
    assert missing.exit_code == 2 and "Missing argument 'RUN_DIR'" in missing.output


def test_an_unknown_flag_names_the_closest_one():
    result = runner.invoke(app, ["optimize", "--modle", "openai:gpt-5"])
    assert result.exit_code == 2
    assert error_line(result).startswith("error: No such option: --modle; did you mean --model? (see ")
    result = runner.invoke(app, ["check", "--bogus"])
    assert result.exit_code == 2 and "did you mean" not in error_line(result)


def test_a_file_from_a_newer_cudaopt_says_to_upgrade(example, tmp_path):
    from cudaopt import api
    from cudaopt.record.files import Summary
    from tests.scripted import ScriptedEvaluator

    folder, _ = example
    run = api.optimize(folder / "experiment.json", strategy="tune", max_evals=2, results=tmp_path / "results",
                       evaluator=ScriptedEvaluator()).path
    data = json.loads((run / "summary.json").read_text())
    (run / "summary.json").write_text(json.dumps({**data, "schema_version": 99}))
    result = runner.invoke(app, ["report", str(run)])
    readable = Summary.model_fields["schema_version"].default
    assert result.exit_code == 2
    assert error_line(result) == (f"error: {run / 'summary.json'}: schema_version: made by a newer cudaopt "
                                  f"(schema_version 99; this one reads up to {readable}): upgrade cudaopt")


def test_a_crash_on_text_that_is_no_utf8_is_exit_4_with_its_log(monkeypatch, capsys, tmp_path):
    from cudaopt import cli

    def broken(**kwargs):
        raise OSError(f"cannot open {tmp_path}/k\udcff.cu")  # a file name in another encoding, as Python holds it

    monkeypatch.setenv("CUDAOPT_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(cli, "app", broken)
    with pytest.raises(SystemExit) as exit_:
        cli.main()
    assert exit_.value.code == 4
    err = capsys.readouterr().err
    assert len([line for line in err.splitlines() if line.strip()]) == 1 and "k\\udcff.cu" in err
    (log,) = (tmp_path / "crashes").iterdir()
    assert "k\\udcff.cu" in log.read_text() and "Traceback" in log.read_text()
