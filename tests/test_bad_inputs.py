"""Bad input of every kind is refused before any GPU worker starts: exit 2 and one line that names
the file or flag and the field. Each case stands for a class (a launch that does not resolve, a
value of the wrong type, a size counted too large, a flag out of range); the worker pool fails
the test if any command reaches it.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from cudaopt.cli import app
from tests.conftest import SGEMM, optional

runner = CliRunner()
CONFIG = ["--config", "{d}/experiment.json"]


@pytest.fixture
def no_worker(monkeypatch):
    """Any attempt to start a GPU worker fails the test."""
    import cudaopt.pool.pools as pools

    started = []

    def refuse(*args, **kwargs):
        started.append(args)
        raise AssertionError("a GPU worker was started for bad input")

    monkeypatch.setattr(pools, "open_pool", refuse)
    return started


@pytest.fixture
def folder(tmp_path):
    made = tmp_path / "exp"
    shutil.copytree(SGEMM, made)
    return made


def edit(path: Path, change) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def first_case(change):
    return lambda d: edit(d / "input_cases.json", lambda data: change(data["cases"][0]))


def tune(change):
    return lambda d: edit(d / "experiment.json", lambda data: change(data["tune"]))


def write(name: str, content: str | bytes):
    def made(d: Path) -> None:
        (d / name).write_bytes(content if isinstance(content, bytes) else content.encode())
    return made


def without_extern_c(name: str):
    return lambda d: (d / name).write_text((d / "initial.cu").read_text().replace('extern "C" ', ""))


def npy(dtype: str):
    def made(d: Path) -> None:
        np.save(d / "a.npy", np.zeros((31, 29), dtype=dtype))
        first_case(lambda c: c["inputs"]["a"].update(init={"file": "a.npy"}))(d)
    return made


def launch(text: str) -> list[str]:
    return ["evaluate", *CONFIG, "--launch", text]


def guard_launch(text: str) -> list[str]:
    return ["guard", "record", *CONFIG, "--launch", text, "--out", "{d}/guard.json"]


OPTIMIZE = ["optimize", *CONFIG, "--strategy", "tune", "--results-dir", "{d}/results"]

# (id, arguments, setup of the experiment folder, what the line must name)
CASES = [
    # launches given on the command line: every expression on every case, within a GPU's limits
    *[(f"{tag}-{name}", make(text), None, ("--launch", field)) for tag, make in (("evaluate", launch),
                                                                                  ("guard", guard_launch))
      for name, text, field in (
          ("power-tower", '{"grid": ["2**2**2**2**2"], "block": [256]}', "grid[0]"),
          ("division-by-zero", '{"grid": ["n // 0"], "block": [256]}', "grid[0]"),
          ("negative-grid", '{"grid": [-1], "block": [256]}', "grid[0]"),
          ("zero-grid", '{"grid": [1, 0], "block": [256]}', "grid[1]"),
          ("block-2048", '{"grid": [1], "block": [2048]}', "block[0]"),
          ("block-threads", '{"grid": [1], "block": [64, 32]}', "block"),
          ("block-z-128", '{"grid": [1], "block": [1, 1, 128]}', "block[2]"),
          ("grid-y-70000", '{"grid": [1, 70000], "block": [32]}', "grid[1]"),
          ("grid-x-2**31", '{"grid": [2147483648], "block": [32]}', "grid[0]"),
          ("shared-1GB", '{"grid": [1], "block": [32], "shared_bytes": 1000000000}', "shared_bytes"),
          ("missing-entry", '{"grid": [1], "block": [32], "entry": "nope"}', "entry"),
          ("entry-unknown-name", '{"grid": [1], "block": [32], "entry": "\'a\' if zz > 1 else \'b\'"}', "entry"),
          ("unknown-name", '{"grid": ["q * 2"], "block": [32]}', "grid[0]"),
          ("fraction", '{"grid": ["n / 3"], "block": [32]}', "grid[0]"),
          ("boolean", '{"grid": [true], "block": [32]}', "grid"),
          ("nested-list", '{"grid": [[1]], "block": [32]}', "grid[0]"),
          ("not-json", '{"grid": ', ""),
      )],
    ("launch-file-missing", launch("{d}/missing.json"), None, ("missing.json",)),
    # check and evaluate refuse the same things: types, shapes, files, entries, seeds, memory
    *[(f"{command}-{name}", [command, *CONFIG], setup, ("input_cases.json", field)) for command in ("check", "evaluate")
      for name, setup, field in (
          ("scalar-string", first_case(lambda c: c["scalars"].update(m="31")), "scalars"),
          ("scalar-boolean", first_case(lambda c: c["scalars"].update(m=True)), "scalars"),
          ("scalar-null", first_case(lambda c: c["scalars"].update(m=None)), "scalars"),
          ("zero-dimension", first_case(lambda c: c["inputs"]["a"].update(shape=[0, "k"])), "inputs.a.shape[0]"),
          ("negative-dimension", first_case(lambda c: c["inputs"]["a"].update(shape=["m", "-k"])), "shape[1]"),
          ("power-in-shape", first_case(lambda c: c["inputs"]["a"].update(shape=["9**9**9", "k"])), "shape[0]"),
          ("negative-seed", first_case(lambda c: c.update(seed=-5)), "cases[0].seed"),
          ("huge-seed", first_case(lambda c: c.update(seed=2**100)), "cases[0].seed"),
          ("case-launch-entry", first_case(lambda c: c.update(launch={"grid": [1], "block": [32],
                                                                      "entry": "nope"})), "launch.entry"),
          ("case-launch-shared", first_case(lambda c: c.update(launch={"grid": [1], "block": [32],
                                                                       "shared_bytes": 300000})),
           "launch.shared_bytes"),
          ("memory", first_case(lambda c: c["scalars"].update(m=10**6, n=10**6, k=10**6)), "cases[0]"),
          ("npy-dtype", npy("int64"), "init.file"),
          ("npy-strings", npy("<U3"), "init.file"),
          ("npy-garbage", lambda d: (write("a.npy", b"\x00garbage")(d), first_case(
              lambda c: c["inputs"]["a"].update(init={"file": "a.npy"}))(d)), "init.file"),
          ("type-names", first_case(lambda c: c["inputs"]["a"].update(shape=[["m"], "k"])), "shape[0]"),
      )],
    ("no-extern-c", ["check", *CONFIG], without_extern_c("initial.cu"), ("initial.cu", "entry")),
    ("kernel-no-extern-c", ["evaluate", *CONFIG, "--kernel", "{d}/k.cu"], without_extern_c("k.cu"), ("k.cu", "entry")),
    # tune spaces: values, restrictions, sizes counted before anything is built
    ("tunable-string", ["check", *CONFIG], tune(lambda t: t["tunables"].update(BM=["128"])), ("experiment.json", "BM")),
    ("tunable-string-launch", ["check", *CONFIG], tune(lambda t: (t["tunables"].update(BM=["abc"]),
                                                                  t.update(restrictions=[]))),
     ("experiment.json", "tune.launch")),
    ("restriction-unknown", ["check", *CONFIG], tune(lambda t: t.update(restrictions=["FOO > 1"])),
     ("experiment.json", "FOO")),
    ("space-millions", ["evaluate", *CONFIG], tune(lambda t: (t.update(restrictions=[]), t["tunables"].clear(),
                                                              t["tunables"].update({f"T{i}": list(range(10))
                                                                                    for i in range(8)}))),
     ("experiment.json", "tune.tunables", "100,000,000")),
    ("space-cut-late", ["check", *CONFIG], tune(lambda t: (t["tunables"].clear(), t["tunables"].update(
        {f"T{i}": list(range(10)) for i in range(8)}), t.update(restrictions=["T0 + T7 < 100"]))),
     ("experiment.json", "tune.tunables")),
    # flags: ranges, choices, finite numbers, URLs, writable folders
    ("seed-negative", [*OPTIMIZE, "--seed", "-5"], None, ("--seed",)),
    ("seed-huge", [*OPTIMIZE, "--seed", str(2**100)], None, ("--seed",)),
    ("reasoning-effort", [*OPTIMIZE, "--reasoning-effort", "extreme"], None, ("--reasoning-effort", "extreme")),
    ("model-empty", [*OPTIMIZE[:-4], "--model", "", "--strategy", "agent"], None, ("--model",)),
    ("base-url", [*OPTIMIZE, "--base-url", "not a url"], None, ("--base-url",)),
    ("results-proc", [*OPTIMIZE[:-2], "--results-dir", "/proc/results"], None, ("--results-dir",)),
    ("results-sys", [*OPTIMIZE[:-2], "--results-dir", "/sys/results"], None, ("--results-dir",)),
    ("results-file", [*OPTIMIZE[:-2], "--results-dir", "{d}/initial.cu/x"], None, ("--results-dir",)),
    ("time-limit-inf", [*OPTIMIZE, "--time-limit", "inf"], None, ("--time-limit",)),
    ("max-cost-nan", [*OPTIMIZE, "--max-cost-usd", "nan"], None, ("--max-cost-usd",)),
    ("prices-negative", [*OPTIMIZE, "--prices", "{d}/p.json"], write("p.json", '{"m": {"input": -1, "output": 1}}'),
     ("p.json", "m.input")),
    ("prices-missing", [*OPTIMIZE, "--prices", "{d}/p.json"], write("p.json", '{"m": {"input": 1}}'),
     ("p.json", "output")),
    ("fast-p-nan", ["fast-p", "{d}", "--p", "nan"], None, ("--p",)),
    ("report-inf", ["report", "{d}", "--calls-per-month", "inf"], None, ("--calls-per-month",)),
    ("docs-page", ["docs", "tiling", "--page", "not a url"], None, ("--page",)),
    ("docs-top", ["docs", "tiling", "--top", "0"], None, ("--top",)),
    ("json-in-proc", ["evaluate", *CONFIG, "--json", "/proc/out.json"], None, ("--json",)),
    ("guard-out-in-sys", ["guard", "record", *CONFIG, "--out", "/sys/guard.json"], None, ("--out",)),
    ("device-negative", ["evaluate", *CONFIG, "--device", "-1"], None, ("--device",)),
    ("kernelbench-seed", ["import", "kernelbench", "{d}/p.py", "--out", "{d}/o", "--seed", "-1"], None, ("--seed",)),
    # files a command reads: binary, NUL bytes, missing runs
    ("audit-binary", ["audit", "{d}/list.txt"], write("list.txt", b"\xff\xfe\x00binary"), ("list.txt",)),
    ("audit-nul", ["audit", "{d}/list.txt"], write("list.txt", "experiment.json\x00\n"), ("list.txt", "line 1")),
    ("audit-not-utf8", ["audit", "{d}/list.txt"], write("list.txt", b"\xff\xfe"), ("list.txt",)),
    ("cases-huge-number", ["check", *CONFIG], write("input_cases.json", '{"cases": [' + "9" * 5000 + "]}"),
     ("input_cases.json", "not valid JSON")),
    ("cases-deep-nesting", ["check", *CONFIG], write("input_cases.json", "[" * 100000 + "]" * 100000),
     ("input_cases.json", "not valid JSON")),
    ("kernel-nul-byte", ["check", *CONFIG], lambda d: (d / "initial.cu").write_text("\0" + (d / "initial.cu").read_text()),
     ("initial.cu", "NUL byte")),
    ("roi-infinite", ["check", *CONFIG], write("experiment.json", (SGEMM / "experiment.json").read_text().replace(
        '"calls_per_month": 10000000', '"calls_per_month": Infinity')), ("experiment.json", "roi.calls_per_month")),
    ("tunable-nan", ["check", *CONFIG], write("experiment.json", (SGEMM / "experiment.json").read_text().replace(
        '"SK": [\n        32,', '"SK": [\n        NaN,')), ("experiment.json", "tune.tunables", "SK")),
    ("tunable-boolean", ["check", *CONFIG], tune(lambda t: t["tunables"].update(BM=[True])), ("tune.tunables", "BM")),
    ("restriction-division", ["check", *CONFIG], tune(lambda t: t.update(restrictions=["BM // 0 > 1"])),
     ("tune.restrictions", "division by zero")),
    ("signature-flag", ["check", *CONFIG, "--signature", "void f(int"], None, ("--signature",)),
    ("entry-flag", ["check", *CONFIG, "--entry", "bad name"], None, ("--entry",)),
    ("ray-empty", ["evaluate", *CONFIG, "--ray", ""], None, ("--ray",)),
    ("iterations-huge", ["evaluate", *CONFIG, "--iterations", str(10**12)], None, ("--iterations",)),
    ("docs-empty-query", ["docs", "  "], None, ("QUERY",)),
    ("audit-out-proc", ["audit", "{d}", "--out", "/proc/audit"], None, ("--out",)),
    ("kernelbench-out-proc", ["import", "kernelbench", "{d}/p.py", "--out", "/proc/x"], write("p.py", "x = 1\n"),
     ("--out",)),
    ("kernelbench-exit", ["import", "kernelbench", "{d}/p.py", "--out", "{d}/o"],
     write("p.py", "raise SystemExit(3)\n"), ("p.py", "exit(3)")),
    ("kernelbench-os-exit", ["import", "kernelbench", "{d}/p.py", "--out", "{d}/o"],
     write("p.py", "import os\nos._exit(0)\n"), ("p.py", "ended the importer")),
    ("tune-block-unknown-tunable", ["check", "--config", "{d}/experiment.json"], lambda d: (
        edit(d / "experiment.json", lambda data: data["tune"].pop("tunables")),
        (d / "tunable.cu").write_text('/* cudaopt-tune {"tunables": {"A": [1, 2]}, "restrictions": ["B > 1"]} */\n'
                                      + (d / "tunable.cu").read_text())), ("cudaopt-tune block", "restrictions")),
    ("export-out-under-a-file", ["export", *CONFIG, "--unverified", "--to", "cuda", "--out", "{d}/initial.cu/x"],
     None, ("--out", "initial.cu/x")),
    # values of the wrong JSON type are refused, not converted (strict validation of the user's files)
    *[(f"strict-{name}", ["check", *CONFIG], setup, names) for name, setup, names in (
        ("seed-string", first_case(lambda c: c.update(seed="1")), ("input_cases.json", "cases[0].seed")),
        ("timed-string", first_case(lambda c: c.update(timed="yes")), ("input_cases.json", "cases[0].timed")),
        ("rtol-bool", first_case(lambda c: c["outputs"]["c"].update(rtol=True)), ("cases[0].outputs.c.rtol",)),
        ("mean-string", first_case(lambda c: c["inputs"]["a"]["init"].update(mean="0")), ("init.mean",)),
        ("max-iterations-string", lambda d: edit(d / "experiment.json", lambda e: e.update(max_iterations="7")),
         ("experiment.json", "max_iterations")),
        ("flush-string", lambda d: edit(d / "experiment.json", lambda e: e.update(timing={"flush_l2": "yes"})),
         ("timing.flush_l2",)),
        ("iterations-float", lambda d: edit(d / "experiment.json", lambda e: e.update(timing={"iterations": 1e12})),
         ("timing.iterations",)),
        ("iterations-huge", lambda d: edit(d / "experiment.json", lambda e: e.update(timing={"iterations": 10**12})),
         ("timing.iterations", "100000")),
        ("warmup-huge", lambda d: edit(d / "experiment.json", lambda e: e.update(timing={"warmup": 10**9})),
         ("timing.warmup",)),
        ("tunable-twice", lambda d: edit(d / "experiment.json", lambda e: e["tune"]["tunables"].update(BN=[128, 128])),
         ("tune.tunables", "BN: 128 given more than once")),
    )],
    # names and paths the operating system or the tables could not take
    ("path-nul-byte", ["check", *CONFIG], lambda d: edit(d / "experiment.json", lambda e: e.update(
        reference="reference.cu\u0000x")), ("experiment.json", "reference", "NUL")),
    ("path-too-long", ["check", *CONFIG], lambda d: edit(d / "experiment.json", lambda e: e.update(
        initial_kernel="\u00fc" * 300 + ".cu")), ("experiment.json", "initial_kernel", "longer than")),
    ("path-a-folder", ["check", *CONFIG], lambda d: (d / "ref.cu").mkdir() or edit(
        d / "experiment.json", lambda e: e.update(reference="ref.cu")), ("reference", "is a folder")),
    ("case-name-newline", ["check", *CONFIG], first_case(lambda c: c.update(name="a\nb")), ("cases[0].name",)),
    ("shape-beyond-any-float", ["check", *CONFIG], first_case(lambda c: c["inputs"]["a"].update(shape=[10**400])),
     ("input_cases.json", "cases[0]", "2^")),
    # what the signature says each argument is
    ("output-given-as-input", ["check", *CONFIG], first_case(lambda c: c["inputs"].update(c=c["inputs"]["b"])),
     ("cases[0].inputs.c", "an output")),
    ("input-given-as-output", ["check", *CONFIG], first_case(lambda c: c["outputs"].update(a=c["outputs"]["c"])),
     ("cases[0].outputs.a", "an input")),
    ("reserved-scalar", ["check", *CONFIG], first_case(lambda c: c["scalars"].update(CUDAOPT_X=3)),
     ("cases[0].scalars.CUDAOPT_X", "reserved")),
    ("signature-trailing-junk", ["check", *CONFIG], lambda d: edit(d / "experiment.json", lambda e: e.update(
        signature=e["signature"] + " garbage; int main(){}")), ("experiment.json", "signature", "garbage")),
    ("only-holdouts", ["check", *CONFIG], lambda d: edit(d / "input_cases.json", lambda data: [
        c.update(role="holdout") for c in data["cases"]]), ("input_cases.json", "cases", "holdout")),
    ("tier-grid-and-tile", ["check", *CONFIG], tune(lambda t: t["launch"]["tiers"][0].update(grid=[1])),
     ("experiment.json", "tiers[0]", "not both")),
    ("integers-fractional-bounds", ["check", *CONFIG], first_case(lambda c: c["inputs"]["a"].update(
        init={"dist": "integers", "low": 0.5, "high": 3})), ("cases[0].inputs.a.init", "whole")),
    ("tunable-reserved-name", ["check", *CONFIG], tune(lambda t: t["tunables"].update(__import__=[1])),
     ("experiment.json", "tune.tunables", "__import__", "reserve")),
    ("launch-entry-never-launched", ["check", *CONFIG], tune(lambda t: t["launch"].update(entry="nope")),
     ("experiment.json", "tune.launch", "'nope' is never launched")),
    ("cases-file-launch-entry", ["check", *CONFIG], lambda d: edit(d / "input_cases.json", lambda data: data[
        "launch"].update(entry="nokernel")), ("input_cases.json: launch.entry", "nokernel")),
    ("work-syntax-error", ["check", *CONFIG], first_case(lambda c: c.update(flops="2*m*n*k +")),
     ("cases[0].flops", "syntax")),
    ("py-reference-exits", ["check", *CONFIG], lambda d: (
        (d / "ref.py").write_text("import sys\nsys.exit(0)\n\ndef matmul_f32(a, b, m, n, k):\n    return a @ b\n"),
        edit(d / "experiment.json", lambda e: e.update(reference="ref.py"))), ("ref.py", "reference", "exit")),
    ("py-reference-returns-none", ["check", *CONFIG], lambda d: (
        (d / "ref.py").write_text("def matmul_f32(a, b, m, n, k):\n    return None\n"),
        edit(d / "experiment.json", lambda e: e.update(reference="ref.py"))), ("ref.py", "not an array of numbers")),
    ("verify-missing-run", ["verify", "{d}/nope"], None, ("nope",)),
    ("replay-missing-run", ["replay", "{d}/nope"], None, ("nope",)),
    ("replay-bad-request", ["replay", "{d}/input_cases.json"], None, ("input_cases.json",)),
    # names longer than a file system takes, on every command that reads or writes a path given to it
    *[(f"name-too-long-{i}", [a.replace("LONG", "{d}/" + "x" * 300) for a in args], None, (flag, "longer than"))
      for i, (args, flag) in enumerate((
          (["verify", "LONG"], "RUN_DIR"), (["replay", "LONG"], "TARGET"), (["report", "LONG"], "RUN_DIR"),
          (["fast-p", "LONG"], "RUNS"), (["audit", "LONG"], "SOURCE"), (["guard", "check", "LONG"], "FILES"),
          (["export", "LONG", "--to", "cuda", "--out", "{d}/o"], "RUN_DIR"),
          (["optimize", "--resume", "LONG"], "--resume"), (["evaluate", *CONFIG, "--json", "LONG"], "--json"),
          ([*OPTIMIZE[:-2], "--results-dir", "LONG"], "--results-dir"),
          (["export", *CONFIG, "--unverified", "--to", "cuda", "--out", "LONG"], "--out"),
      ))],
]


def one_line(result) -> str:
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1, result.output
    return lines[0]


@pytest.mark.parametrize("args, setup, names", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_is_one_line_and_exit_2_before_any_worker(folder, no_worker, args, setup, names):
    if "kernelbench" in args and "--seed" not in args and "/proc/x" not in args:
        optional("torch")  # the importer needs torch before it reads a problem
    if setup is not None:
        setup(folder)
    result = runner.invoke(app, [a.replace("{d}", str(folder)) for a in args], env={"COLUMNS": "80"})
    assert not no_worker, "a worker was started"
    assert result.exit_code == 2, (result.exit_code, result.output, result.exception)
    line = one_line(result)
    assert line.startswith("error: ") and "Traceback" not in line
    for part in names:
        assert part in line, line
    for internal in ("list[", "dict[", "union[", ".int:", "function-after", "(top level)"):
        assert internal not in line, line


def test_a_huge_tune_space_is_refused_in_seconds_with_its_count():
    from cudaopt.config import SpaceError, TuneSpace

    space = TuneSpace(tunables={f"T{i}": list(range(10)) for i in range(8)}, restrictions=["T0 + T7 == 18"])
    start = time.monotonic()
    with pytest.raises(SpaceError, match=r"\(estimated from a sample\) configurations, too many to search") as err:
        space.count()
    estimate = int(str(err.value).split()[1].replace(",", ""))
    assert 500_000 < estimate < 2_000_000  # the true count is 1,000,000 (1 in 100)
    assert time.monotonic() - start < 20
    with pytest.raises(SpaceError, match="100,000,000 configurations"):
        TuneSpace(tunables={f"T{i}": list(range(10)) for i in range(8)}).configurations()


def test_restrictions_cut_branches_so_a_large_product_counts_fast():
    from cudaopt.config import TuneSpace

    space = TuneSpace(tunables={f"T{i}": list(range(10)) for i in range(8)},
                      restrictions=["T0 < 2", "T1 < 2", "T2 < 2", "T3 < 2", "T4 < 3"])
    assert space.count() == 2**4 * 3 * 10**3
    assert space.first() == {f"T{i}": 0 for i in range(8)}
    small = TuneSpace(tunables={"X": [16, 32, 64], "Y": [1, 2, 4, 8, 16, 32], "T": [1, 2, 4, 8]},
                      restrictions=["X == Y * T"])
    assert small.count() == len(small.configurations()) == 11


def test_a_shape_grid_is_counted_before_it_is_built(sgemm, tmp_path):
    from cudaopt.errors import ExperimentError
    from cudaopt.winner.shapes import load_shapes

    grid = tmp_path / "shapes.json"
    grid.write_text(json.dumps({"m": list(range(1, 200)), "n": list(range(1, 200)), "k": list(range(1, 200))}))
    with pytest.raises(ExperimentError, match=r"7,880,599 shapes \(199 x 199 x 199\)"):
        load_shapes(grid, sgemm)


def test_validation_errors_are_said_in_plain_words():
    from pydantic import TypeAdapter, ValidationError

    from cudaopt.config import CasesFile
    from cudaopt.errors import validation_message

    with pytest.raises(ValidationError) as err:
        CasesFile.model_validate({"cases": [{"name": "a", "role": "correctness", "outputs": {"c": {"shape": [[1]]}}}]})
    assert validation_message(err.value) == ("cases[0].outputs.c.shape[0]",
                                             "list should be a string, an integer or a number")
    with pytest.raises(ValidationError) as err:
        TypeAdapter(dict[str, dict[str, float]]).validate_python([1])
    assert validation_message(err.value) == ("", "Input should be an object (a JSON {...})")


def test_a_launch_before_any_baseline_is_held_to_the_references_time():
    from cudaopt.config import TimeoutPolicy

    fixed = TimeoutPolicy().fixed()
    assert fixed.limit("launch", "square", reference_s=0.01) == 10.0  # the floor
    assert fixed.limit("launch", "square", reference_s=2.0) == 40.0  # 20x the reference
    assert fixed.limit("launch", "square", reference_s=100.0) == 300.0  # never above the fixed limit
    assert fixed.limit("launch", "square") == 300.0  # nothing measured (a sanitizer run): the fixed limit
    assert "20x the reference's" in fixed.why("launch", "square", 0.01)
    assert TimeoutPolicy(multiple=None).fixed().limit("launch", "square", reference_s=0.01) == 300.0


def test_report_refuses_a_folder_it_cannot_write_and_an_unknown_roi_case(tmp_path, monkeypatch):
    from cudaopt.agent.model import ModelSettings
    from cudaopt.optimize import Options, start_or_resume
    from cudaopt.record.runs import Budget, ExperimentArgs
    from tests.scripted import ScriptedEvaluator

    run, _ = start_or_resume(ExperimentArgs(config=str(SGEMM / "experiment.json")), ModelSettings(), Budget(),
                             tmp_path / "results", ScriptedEvaluator(), Options(strategy="tune", max_evals=2))
    result = runner.invoke(app, ["report", str(run.path), "--roi-case", "nope"])
    assert result.exit_code == 2 and "--roi-case" in one_line(result) and "square-256" in one_line(result)
    monkeypatch.setattr("cudaopt.api.winners.writable", lambda folder: False)
    result = runner.invoke(app, ["report", str(run.path)])
    assert result.exit_code == 2 and "not writable" in one_line(result)


def test_resuming_a_tune_run_asks_for_no_api_key(tmp_path, monkeypatch, no_worker):
    from cudaopt.agent.model import ModelSettings
    from cudaopt.optimize import Options, start_or_resume
    from cudaopt.record.runs import Budget, ExperimentArgs
    from tests.scripted import ScriptedEvaluator

    run, _ = start_or_resume(ExperimentArgs(config=str(SGEMM / "experiment.json")), ModelSettings(),
                             Budget(max_iterations=1), tmp_path / "results", ScriptedEvaluator(),
                             Options(strategy="tune", max_evals=2))
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    result = runner.invoke(app, ["optimize", "--resume", str(run.path), "--results-dir", str(tmp_path / "results")])
    assert no_worker, result.output  # it went as far as the GPU: no model was asked for
    assert "API_KEY" not in result.output


def test_an_import_whose_forward_never_returns_is_stopped_at_its_limit(tmp_path):
    optional("torch")
    problem = tmp_path / "hang.py"
    problem.write_text("import torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n"
                       "    def forward(self, x):\n        while True:\n            pass\n\n\n"
                       "def get_inputs():\n    return [torch.randn(16)]\n\n\ndef get_init_inputs():\n    return []\n")
    start = time.monotonic()
    result = runner.invoke(app, ["import", "kernelbench", str(problem), "--out", str(tmp_path / "out"),
                                 "--time-limit", "3"])
    assert time.monotonic() - start < 30
    assert result.exit_code == 2 and "did not finish within 3 s" in one_line(result)
    assert not (tmp_path / "out" / "experiment.json").exists()


def test_help_keeps_every_option_name_whole_at_80_columns():
    import re

    from typer.main import get_command

    def commands(group, path):
        for name, sub in getattr(group, "commands", {}).items():
            yield from commands(sub, [*path, name]) if hasattr(sub, "commands") else [([*path, name], sub)]

    for path, command in commands(get_command(app), []):
        text = runner.invoke(app, [*path, "--help"], env={"COLUMNS": "80"}).output
        assert max(len(line) for line in text.splitlines()) <= 80, path
        for name in (o for p in command.params for o in (*p.opts, *p.secondary_opts) if o.startswith("--")):
            assert re.search(re.escape(name) + r"(?![\w-])", text), (path, name)


def test_replaying_an_edited_request_checks_its_launch_before_any_worker(sgemm, tmp_path, no_worker):
    from cudaopt.wire.protocol import LaunchSpec

    request = sgemm.request(sgemm.initial_kernel_path.read_text(), launch=LaunchSpec(grid=["n // 0"], block=[16]))
    path = tmp_path / "best-case-0.json"
    path.write_text(request.to_json())
    result = runner.invoke(app, ["replay", str(path)])
    assert not no_worker
    assert result.exit_code == 2 and "best-case-0.json: launch.grid[0]" in one_line(result)
    assert "division by zero" in one_line(result)


@pytest.mark.parametrize("edit, words", [
    ({"cases": []}, "best-case-0.json: cases: empty: a request checks and times at least one case"),
    ({"kernel": None, "vendors": []}, "best-case-0.json: kernel: missing: a request without a kernel measures its "
                                      "vendors, and names none"),
])
def test_replaying_a_request_that_would_measure_nothing_is_refused(sgemm, tmp_path, no_worker, edit, words):
    """An edited request with nothing to measure would come back passed: refused before any worker."""
    request = sgemm.request(sgemm.initial_kernel_path.read_text()).model_copy(update=edit)
    path = tmp_path / "best-case-0.json"
    path.write_text(request.to_json())
    result = runner.invoke(app, ["replay", str(path)])
    assert not no_worker
    assert result.exit_code == 2 and words in one_line(result)


@pytest.mark.parametrize("field, entry", [("kernel", "matmul_f32_typo"), ("reference", "reference_typo")])
def test_replaying_a_request_whose_entry_the_source_lacks_is_refused(sgemm, tmp_path, no_worker, field, entry):
    """A kernel or ``.cu`` reference entry its source does not declare would fail only in the worker."""
    request = sgemm.request(sgemm.initial_kernel_path.read_text())
    edited = request.model_copy(update={field: getattr(request, field).model_copy(update={"entry": entry})})
    path = tmp_path / "best-case-0.json"
    path.write_text(edited.to_json())
    result = runner.invoke(app, ["replay", str(path)])
    assert not no_worker
    assert result.exit_code == 2 and f"best-case-0.json: {field}.entry: the {'request' if field == 'kernel' else field} " \
                                      f"names {entry!r}, which the source does not declare" in one_line(result)


def test_a_path_with_colons_is_printed_as_it_is(tmp_path):
    """":x:" in a path is not an emoji code: the error names the file the user gave."""
    missing = tmp_path / "run:x:1" / "experiment.json"
    result = runner.invoke(app, ["check", "--config", str(missing)])
    assert result.exit_code == 2 and f"{missing}: config file not found" in " ".join(result.output.split())
