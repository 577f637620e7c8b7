"""The Python API without the CLI (a scripted GPU): load, evaluate, optimize, verify, replay, export,
the typed results and the progress callback; `import cudaopt` stays light."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

import cudaopt
from cudaopt import api
from cudaopt.errors import ExperimentError
from cudaopt.evaluate import Evaluation
from cudaopt.record.events import AttemptFinished, AttemptStarted, PhaseProgress, StepProgress
from cudaopt.record.files import ReplayOutcome, Summary, VerifyOutcome
from tests.conftest import ROOT, SGEMM
from tests.scripted import ScriptedEvaluator


def test_import_cudaopt_loads_nothing_heavy():
    code = ("import sys, time; t = time.perf_counter(); import cudaopt; took = time.perf_counter() - t; "
            "heavy = [m for m in ('pydantic', 'numpy', 'torch', 'cuda', 'langgraph', 'cudaopt.api') "
            "if m in sys.modules]; "
            "print(took, heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={"PYTHONPATH": str(ROOT / "src")}).stdout.split(maxsplit=1)
    assert out[1].strip() == "[]" and float(out[0]) < 0.2
    assert cudaopt.api is api
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        cudaopt.nope  # noqa: B018


@pytest.fixture
def folder(tmp_path):
    shutil.copytree(SGEMM, tmp_path / "exp")
    return tmp_path / "exp"


def test_load_and_evaluate_with_progress(folder):
    exp = api.load(folder / "experiment.json")
    assert exp.signature.name == "matmul_f32"
    events = []
    evaluator = ScriptedEvaluator()
    result = api.evaluate(exp, evaluator=evaluator, on_progress=events.append)
    assert isinstance(result, Evaluation) and result.candidate.ok
    assert evaluator.requests[0].kernel.source == (folder / "initial.cu").read_text()
    assert PhaseProgress(phase="compile") in events  # the worker's phases, as the terminal shows them
    result = api.evaluate(exp, folder / "tunable.cu", launch={"grid": ["cdiv(n, 16)", "cdiv(m, 16)"],
                                                                  "block": [256]}, evaluator=ScriptedEvaluator())
    assert result.candidate.ok
    with pytest.raises(ExperimentError, match="kernel"):
        api.evaluate(exp, folder / "missing.cu", evaluator=ScriptedEvaluator())


def test_optimize_verify_replay_export(folder, tmp_path):
    events = []
    run = api.optimize(folder / "experiment.json", strategy="tune", results=tmp_path / "results",
                           evaluator=ScriptedEvaluator(), on_progress=events.append, max_evals=3)
    assert isinstance(run.summary, Summary) and run.summary.best_attempt is not None
    assert run.path == tmp_path / "results" / "run-001" and "run-001" in repr(run)
    assert {type(e) for e in events} >= {AttemptStarted, AttemptFinished}
    with pytest.raises(ExperimentError, match="never verified"):
        api.export(run.path, to="torch", out=tmp_path / "out")
    steps = []
    outcome = api.verify(run.path, evaluator=ScriptedEvaluator(), seed=3, on_progress=steps.append)
    assert isinstance(outcome, VerifyOutcome) and outcome.passed
    assert json.loads((run.path / "verify.json").read_text())["passed"]
    assert steps and all(isinstance(s, StepProgress) for s in steps) and steps[-1].done == steps[-1].total
    again = api.replay(run.path, repeats=2, evaluator=ScriptedEvaluator())
    assert isinstance(again, ReplayOutcome)
    (path,) = api.export(run.path, to="torch", out=tmp_path / "out")
    assert path == tmp_path / "out" / "matmul_f32.py" and "verify: passed" in path.read_text()
    paths = api.export(experiment=api.load(folder / "experiment.json"), to="cuda", out=tmp_path / "c",
                           unverified=True)
    assert [p.name for p in paths] == ["matmul_f32.h", "matmul_f32.cu"]


def test_bad_calls_are_bad_input(folder, tmp_path):
    with pytest.raises(ExperimentError, match="'fastest' is not one of"):
        api.optimize(folder / "experiment.json", strategy="fastest", evaluator=ScriptedEvaluator())
    with pytest.raises(ExperimentError, match="give a run directory or an experiment"):
        api.export(to="torch", out=tmp_path)
    with pytest.raises(ExperimentError, match="come from the run"):
        api.export(tmp_path, kernel="k.cu", to="torch", out=tmp_path)


def test_a_path_argument_of_another_type_or_none_is_bad_input_naming_it(folder, tmp_path):
    cases = [(lambda: api.verify(3), "RUN_DIR: a value of type int is not a path"),
             (lambda: api.report(None), "RUN_DIR: missing: give a path"),
             (lambda: api.replay([folder]), "TARGET: a value of type list is not a path"),
             (lambda: api.fast_p(3), "RUNS: a value of type int is not a path"),
             (lambda: api.audit(None), "SOURCE: missing: give a path"),
             (lambda: api.check(folder / "experiment.json", kernel=b"k.cu"), "--kernel: a value of type bytes"),
             (lambda: api.evaluate(folder / "experiment.json", json_out=1, evaluator=ScriptedEvaluator()),
              "--json: a value of type int"),
             (lambda: api.optimize(folder / "experiment.json", strategy="tune", prices=7), "--prices: a value of type int"),
             (lambda: api.export(tmp_path / ("x" * 300), to="cuda", out=tmp_path), "RUN_DIR: .*longer than a file name")]
    for call, words in cases:
        with pytest.raises(ExperimentError, match=words):
            call()


def test_an_argument_of_another_type_is_bad_input_before_any_gpu_work(folder):
    config = folder / "experiment.json"
    cases = [(lambda: api.evaluate(config, warmup="5", evaluator=NoGpu()), "--warmup: '5' is not a whole number"),
             (lambda: api.evaluate(config, iterations=2.5, evaluator=NoGpu()), "--iterations: 2.5 is not a whole"),
             (lambda: api.evaluate(config, devices=1.5), "--devices: '1.5' is neither all nor GPU ordinals"),
             (lambda: api.optimize(config, strategy="tune", seed="1", evaluator=NoGpu()), "--seed: '1' is not"),
             (lambda: api.optimize(config, strategy="tune", max_model_calls="x", evaluator=NoGpu()),
              "--max-model-calls: 'x' is not a whole number"),
             (lambda: api.optimize(config, strategy="tune", base_url=["http://x"], evaluator=NoGpu()),
              r"--base-url: \['http://x'\] is not a string"),
             (lambda: api.check(config, entry=3), "--entry: 3 is not a string"),
             (lambda: api.check(config, arch=90), "--arch: 90 is not a string")]
    for call, words in cases:
        with pytest.raises(ExperimentError, match=words):
            call()


def test_the_other_functions_refuse_arguments_of_another_type_naming_them(folder, tmp_path):
    (tmp_path / "problem.py").write_text("x = 1\n")
    cases = [(lambda: api.load(folder / "experiment.json", max_iterations="7"), "--max-iterations: '7' is not a whole"),
             (lambda: api.load(folder / "experiment.json", signature=3), "--signature: 3 is not a string"),
             (lambda: api.load(3), "--config: a value of type int is not a path"),
             (lambda: api.gpus(ray=3).__enter__(), "--ray: 3 is not a string"),
             (lambda: api.fast_p(folder, p=1.5), r"--p: 1.5: give a list of thresholds"),
             (lambda: api.import_kernelbench(tmp_path / "problem.py", tmp_path / "out", name=3),
              "--name: 3 is not a C identifier"),
             (lambda: api.docs("tiling", pages="https://docs.nvidia.com/cuda/", online=False),
              "--page: 'https://docs.nvidia.com/cuda/': give a list of URLs")]
    for call, words in cases:
        with pytest.raises(ExperimentError, match=words):
            call()


class NoGpu(ScriptedEvaluator):
    def evaluate(self, *args, **kwargs):
        raise AssertionError("bad input reached the evaluator")

    evaluate_all = device_info = evaluate


def test_evaluate_checks_a_launch_before_the_gpu_as_the_cli_does(folder):
    class NoGpu(ScriptedEvaluator):
        def evaluate(self, *args, **kwargs):
            raise AssertionError("bad input reached the evaluator")

        evaluate_all = evaluate

    exp = api.load(folder / "experiment.json")
    with pytest.raises(ExperimentError) as refused:
        api.evaluate(exp, launch={"grid": [1, 70000], "block": [32]}, evaluator=NoGpu())
    assert refused.value.field.endswith("grid[1]") and "65535" in refused.value.message
