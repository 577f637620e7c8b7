"""``cudaopt optimize``: start or resume a run and leave its audit pack in ``results/run-NNN/``."""

from __future__ import annotations

import datetime as dt
import platform
import subprocess
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass
from importlib import metadata
from pathlib import Path

from .agent.graph import Budget, Evaluator, Optimizer
from .agent.model import ModelClient, ModelSettings, make_chat_model
from .experiment import Experiment, ExperimentError, load_experiment
from .record.rundir import RunDir
from .record.schema import Summary

PACKAGES = ("cudaopt", "cuda-core", "cuda-bindings", "numpy", "pydantic", "langgraph", "langchain",
            "langchain-core", "langchain-openai", "openai", "matplotlib", "nvidia-ml-py")


@dataclass
class ExperimentArgs:
    """How the experiment was given (paths as absolute strings), so --resume can load it again."""

    config: str | None = None
    description: str | None = None
    signature: str | None = None
    reference: str | None = None
    initial_kernel: str | None = None
    input_cases: str | None = None
    max_iterations: int | None = None

    def load(self) -> Experiment:
        p = lambda v: Path(v) if v else None  # noqa: E731
        return load_experiment(p(self.config), description=self.description, signature=self.signature,
                               reference=p(self.reference), initial_kernel=p(self.initial_kernel),
                               input_cases=p(self.input_cases), max_iterations=self.max_iterations)


def environment(device: dict) -> dict:
    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return {
        "gpu": device,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "packages": versions,
        "git": _git_state(),
        "started_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "finished_at": None,
    }


def _git_state() -> dict:
    def git(*args: str) -> str | None:
        try:
            out = subprocess.run(["git", *args], capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return out.stdout.strip() if out.returncode == 0 else None

    status = git("status", "--porcelain")
    return {"commit": git("rev-parse", "HEAD"), "dirty": bool(status) if status is not None else None}


def start_or_resume(
    args: ExperimentArgs,
    settings: ModelSettings,
    budget: Budget,
    results: Path,
    evaluator: Evaluator,
    resume: Path | None = None,
    chat_model=None,
    on_progress: Callable[[dict], None] = lambda event: None,
) -> tuple[RunDir, Summary]:
    """Run the agent to a stop reason. On --resume, the stored experiment and lock are used."""
    if resume is not None:
        try:
            run = RunDir.open(resume)
        except FileNotFoundError as exc:
            raise ExperimentError(resume, "", str(exc)) from None
        stored = run.read_json("settings.json")
        args = ExperimentArgs(**stored["experiment"])
        experiment = args.load()
        if run.read_json("lock.json")["lock"] != experiment.lock()["lock"]:
            raise ExperimentError(run.file("lock.json"), "lock",
                                  "the reference, the input cases or the harness changed since this run started; "
                                  "start a new run")
    else:
        experiment = args.load()
        if experiment.initial_kernel_path is None:
            raise ExperimentError(args.config or "command line", "initial_kernel",
                                  "missing (give --initial-kernel or set it in --config)")
        env = environment(evaluator.device_info())  # starts the GPU worker before anything is written
        run = RunDir.create(results)
        run.write_json("lock.json", experiment.lock())
        run.write_json("settings.json", {"experiment": asdict(args), "model": settings.public(),
                                         "budget": asdict(budget)})
        run.write_json("env.json", env)

    def gpu_info() -> dict:
        """The GPU the kernels run on: name, architecture, SM count, L2 size, shared memory limit, peak bandwidth."""
        return evaluator.device_info()

    tools = {"gpu_info": gpu_info}
    client = ModelClient(chat_model if chat_model is not None else make_chat_model(settings), settings, tools)
    optimizer = Optimizer(experiment, evaluator, client, run, budget, on_progress)
    if resume is not None:
        optimizer.load()
    try:
        summary = optimizer.execute()
    finally:
        env = run.read_json("env.json")
        env["finished_at"] = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
        run.write_json("env.json", env)
    return run, summary
