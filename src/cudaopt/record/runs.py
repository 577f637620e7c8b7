"""Reading a run directory back: its settings, its experiment (lock-checked) and its winner.

Resume, verify, replay and the report all start here, so a run whose files are broken or whose
experiment changed is bad input with one line naming the file, wherever it is opened.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import Field

from ..reading import read_json_file, read_model_file
from ..errors import ExperimentError
from ..experiment import Experiment, ExperimentArgs, ExperimentLock
from ..wire.protocol import LaunchSpec, WireModel
from .rundir import RunDir
from ..wire.fields import version_field
from .files import Attempt, History, ModelCall, Summary


class Budget(WireModel):
    """When a run stops (whichever comes first)."""

    max_iterations: int = 7
    max_model_calls: int | None = None
    max_cost_usd: float | None = None
    time_limit_s: float | None = None
    patience: int | None = None  # stop after this many attempts without a new best
    max_model_errors: int = 3  # stop after this many model errors in a row


class RunSettings(WireModel):
    """settings.json: what the run was asked to do (no secret: the model's public settings only)."""

    schema_version: int = version_field(2)
    experiment: ExperimentArgs
    strategy: str
    research: bool = False
    use_nsight: bool = False
    proposals: int = Field(1, ge=1)  # proposals asked of the model per round (version 2 added it)
    model: dict[str, Any] = Field(default_factory=dict)
    budget: Budget = Field(default_factory=Budget)


def read_run_json(run: RunDir, name: str, model: type[WireModel] | None = None) -> Any:
    """One of a run's JSON files (validated as ``model`` when given); unreadable or broken is bad
    input naming the file and the field."""
    path = run.file(name)
    return read_model_file(path, model, name) if model is not None else read_json_file(path, name)


def model_calls(run: RunDir) -> list[ModelCall]:
    """The run's model-NNN.json files, in call order."""
    calls = [read_run_json(run, p.name, ModelCall) for p in run.path.glob(RunDir.MODEL_CALLS)]
    return sorted(calls, key=lambda c: c.id)


def open_run(path: Path) -> RunDir:
    """A run directory to read; bad input naming it when it is missing or holds no run."""
    if not path.exists():
        raise ExperimentError(path, "", "not found (give a run directory, results/run-NNN)")
    try:
        return RunDir.open(path)
    except FileNotFoundError:
        raise ExperimentError(path, "", f"is not a run directory (no {RunDir.HISTORY})") from None


def load_run_experiment(run: RunDir) -> Experiment:
    """A run's experiment, refused when what defines right and wrong changed since the run started."""
    settings = read_run_json(run, RunDir.SETTINGS, RunSettings)
    lock = read_run_json(run, RunDir.LOCK, ExperimentLock)
    _experiment_files_there(run, settings.experiment)
    experiment = settings.experiment.load()
    if lock.lock != experiment.lock().lock:
        raise ExperimentError(run.file(RunDir.LOCK), "lock",
                              "the reference, the input cases or the harness changed since this run started; "
                              "start a new run")
    return experiment


def _experiment_files_there(run: RunDir, args: ExperimentArgs) -> None:
    """A run loads its experiment again from the paths ``settings.json`` names (absolute, as the run
    resolved them; relative ones start from the current folder). One that is not there is bad input
    saying so, rather than a bare "not found" of a file the user never named."""
    for field in ("config", "reference", "initial_kernel", "input_cases"):
        value = getattr(args, field)
        if not value or Path(value).exists():
            continue
        where = ("relative to the current folder: run the command from the folder it starts from"
                 if not Path(value).is_absolute() else
                 "the run reads its experiment again from where it was when the run started: put the "
                 "experiment's files back at that path (a run directory copied to another machine needs them "
                 "there too)")
        raise ExperimentError(run.file(RunDir.SETTINGS), f"experiment.{field}", f"{value}: not found; {where}")


def open_resumable(path: Path) -> tuple[RunDir, RunSettings, Experiment]:
    """A run directory to continue: its files readable, its experiment unchanged (bad input otherwise)."""
    run = open_run(path)
    experiment = load_run_experiment(run)
    read_run_json(run, RunDir.HISTORY, History)
    return run, read_run_json(run, RunDir.SETTINGS, RunSettings), experiment


@dataclass
class Winner:
    """The attempt a run chose, with what it takes to run it again."""

    attempt: Attempt
    source: str

    @property
    def launch(self) -> LaunchSpec | None:
        return self.attempt.launch

    @property
    def defines(self) -> dict:
        return dict(self.attempt.defines)


def winner(run: RunDir, what: str = "verify") -> Winner:
    summary = read_run_json(run, RunDir.SUMMARY, Summary)
    if summary.best_attempt is None:
        raise ExperimentError(run.file(RunDir.SUMMARY), "best_attempt", f"the run has no winner to {what}")
    history = read_run_json(run, RunDir.HISTORY, History)
    attempt = next((a for a in history.attempts if a.id == summary.best_attempt), None)
    if attempt is None or attempt.source_file is None:
        raise ExperimentError(run.file(RunDir.HISTORY), "attempts",
                              f"attempt {summary.best_attempt} (the summary's best) is missing")
    return Winner(attempt, run.file(attempt.source_file).read_text())
