"""A Trial is prepared once, in one order: the experiment, the kernel, the launch, the protocol,
the output paths, then the checks of `cudaopt check`; and `optimize` loads its experiment once."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from cudaopt import trial as trial_module
from cudaopt.errors import ExperimentError
from cudaopt.record.runs import ExperimentArgs
from cudaopt.trial import prepare_trial

LAUNCH = '{"grid": [2, 3, 1], "block": [16, 16, 1]}'


@pytest.fixture
def steps(monkeypatch):
    """Each experiment load and each preflight, in the order they happened."""
    done: list[tuple] = []
    load = ExperimentArgs.load
    monkeypatch.setattr(ExperimentArgs, "load", lambda self: (done.append(("load",)), load(self))[1])
    monkeypatch.setattr(trial_module, "preflight", lambda exp, **kwargs: done.append(("preflight", kwargs)))
    return done


def test_each_step_runs_once_and_the_trial_holds_what_it_read(example, steps):
    folder, _ = example
    kernel = folder / "initial.cu"
    trial = prepare_trial(ExperimentArgs(config=str(folder / "experiment.json")), kernel, launch=LAUNCH, warmup=3,
                          iterations=7, outputs=[(folder / "out.json", "--json")])
    assert [s[0] for s in steps] == ["load", "preflight"]
    checks = steps[1][1]
    assert checks["kernel"] == kernel and checks["tune"] is False and checks["launch_origin"] == "--launch"
    assert checks["launch"] == trial.launch and trial.launch.grid == [2, 3, 1]
    assert trial.source == kernel.read_text() and trial.kernel == kernel
    assert (trial.protocol.warmup, trial.protocol.iterations) == (3, 7)
    assert trial.entry_name == trial.experiment.signature.name and trial.args.config.endswith("experiment.json")


def test_a_launch_file_is_named_by_its_path(example, steps):
    folder, _ = example
    (folder / "launch.json").write_text(LAUNCH)
    prepare_trial(ExperimentArgs(config=str(folder / "experiment.json")), launch=str(folder / "launch.json"))
    assert steps[-1][1]["launch_origin"] == str(folder / "launch.json")


def test_an_output_path_that_cannot_be_written_is_refused_before_the_checks(example, steps):
    folder, _ = example
    with pytest.raises(ExperimentError) as error:
        prepare_trial(ExperimentArgs(config=str(folder / "experiment.json")),
                      outputs=[(folder / "missing" / "out.json", "--json")])
    assert error.value.file == "--json" and "does not exist" in error.value.message
    assert "preflight" not in [s[0] for s in steps]


def test_no_kernel_at_all_names_the_callers_field(example, steps):
    folder, edit = example
    edit("experiment.json", lambda config: config.pop("initial_kernel"))
    with pytest.raises(ExperimentError) as error:
        prepare_trial(ExperimentArgs(config=str(folder / "experiment.json")))
    assert (error.value.file, error.value.message) == ("--kernel", "no kernel given and the experiment has no "
                                                                   "initial kernel")


def test_a_kernel_whose_entry_is_missing_names_the_file(example, steps):
    folder, _ = example
    (folder / "k.cu").write_text('extern "C" __global__ void other(float* c) {}\n')
    with pytest.raises(ExperimentError) as error:
        prepare_trial(ExperimentArgs(config=str(folder / "experiment.json")), folder / "k.cu")
    assert error.value.file == str(folder / "k.cu")
    assert "preflight" not in [s[0] for s in steps]


def test_optimize_loads_the_experiment_once(example, monkeypatch, tmp_path):
    from cudaopt import optimize
    from cudaopt.cli import app
    from cudaopt.pool import pools
    from tests.scripted import ScriptedEvaluator

    folder, _ = example
    loads: list[str] = []
    load = ExperimentArgs.load
    monkeypatch.setattr(ExperimentArgs, "load", lambda self: (loads.append("load"), load(self))[1])
    seen = {}
    monkeypatch.setattr(pools, "open_pool", lambda devices, ray=None, log_dir=None: (
        seen.setdefault("at the pool", len(loads)), ScriptedEvaluator())[1])
    create = optimize.RunDir.create
    monkeypatch.setattr(optimize.RunDir, "create", lambda results: (
        seen.setdefault("at the run directory", len(loads)), create(results))[1])
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    result = CliRunner().invoke(app, ["optimize", "--config", str(folder / "experiment.json"), "--strategy", "tune",
                                      "--max-evals", "2", "--results-dir", str(tmp_path / "results")])
    assert result.exit_code == 0, result.output
    assert seen == {"at the pool": 1, "at the run directory": 1}


def test_a_python_caller_prepares_once_and_passes_the_trial_to_evaluate_verify_and_guard(example, steps):
    from cudaopt import api
    from tests.scripted import ScriptedEvaluator

    folder, _ = example
    trial = api.prepare_trial(ExperimentArgs(config=str(folder / "experiment.json")), warmup=2)
    measured = ScriptedEvaluator()
    assert api.evaluate(trial, evaluator=measured).candidate.ok
    assert measured.requests[0].protocol.warmup == 2 and measured.requests[0].kernel.source == trial.source
    verified = ScriptedEvaluator()
    outcome = api.verify(trial, evaluator=verified, seed=5)
    assert outcome.passed and outcome.attempt is None and outcome.cases
    assert {c.role for r in verified.requests for c in r.cases} <= {"holdout"}
    assert not (folder / "verify.json").exists()
    done = api.guard_record(trial, out=folder / "guard.json", repeats=2, evaluator=ScriptedEvaluator())
    assert done.baseline is not None and done.baseline.protocol.warmup == 2
    assert (folder / "guard.json").is_file()
    assert [s[0] for s in steps] == ["load", "preflight"]  # prepared once, whatever measured it
    with pytest.raises(ExperimentError, match="a Trial holds its kernel"):
        api.evaluate(trial, folder / "initial.cu", evaluator=ScriptedEvaluator())


def test_a_guard_of_a_loaded_experiment_records_how_it_was_given(example, steps):
    from cudaopt import api
    from cudaopt.guard.files import read_guard
    from tests.scripted import ScriptedEvaluator

    folder, _ = example
    trial = prepare_trial(api.load(str(folder / "experiment.json")))
    done = api.guard_record(trial, out=folder / "guard.json", repeats=2, evaluator=ScriptedEvaluator())
    assert done.baseline is not None
    assert read_guard(folder / "guard.json").experiment.config == "experiment.json"  # relative to the guard file


def test_a_candidate_of_a_run_is_a_variant_of_the_run_trial(example):
    from cudaopt.trial import run_trial

    folder, _ = example
    base = run_trial(ExperimentArgs(config=str(folder / "experiment.json")).load())
    assert base.source == (folder / "initial.cu").read_text()
    tuned = base.variant("// tuned", None, {"BLOCK": 32})
    request = tuned.request(request_id="attempt-1", roles={"performance"})
    assert request.kernel.source == "// tuned" and request.kernel.defines == {"BLOCK": 32}
    assert {c.role for c in request.cases} == {"performance"} and request.protocol == base.protocol
    assert request.protocol is not base.protocol  # each request its own copy
    assert base.variant(None, None).request().kernel is None  # the vendors alone
