"""``cudaopt optimize``: start or resume a run and leave its audit pack in ``results/run-NNN/``."""

from __future__ import annotations

import datetime as dt
import json
import platform
import subprocess
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass
from importlib import metadata
from pathlib import Path

from pydantic import ValidationError

from .agent.graph import Budget, Optimizer
from .agent.instruments import Instruments
from .agent.model import ModelClient, ModelSettings, make_chat_model
from .agent.research import search_cuda_docs
from .experiment import Experiment, ExperimentError, load_experiment
from .insight.locate import find_tool
from .record.recorder import Evaluator, Recorder, ResultCache
from .record.rundir import RunDir
from .record.schema import History, Summary
from .report.build import build as build_report
from .search.tune import Tuner

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
        p = lambda v: Path(v) if v else None
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
        "started_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
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


STRATEGIES = ("auto", "agent", "agent+tune", "tune")


def start_or_resume(
    args: ExperimentArgs,
    settings: ModelSettings,
    budget: Budget,
    results: Path,
    evaluator: Evaluator,
    *,
    strategy: str = "agent",
    resume: Path | None = None,
    chat_model=None,
    on_progress: Callable[[dict], None] = lambda event: None,
    max_evals: int = 40,
    seed: int = 0,
    ablation: bool = False,
    use_cache: bool = True,
    research: bool = False,
    use_nsight: bool = False,
    device_index: int = 0,
) -> tuple[RunDir, Summary]:
    """Run a strategy (``agent``, ``agent+tune`` or ``tune``) to a stop reason.

    On --resume, the stored experiment, strategy and lock are used. ``use_nsight`` gives the model its
    instruments (agent/instruments.py), profiling on GPU ``device_index``.
    """
    # every check that needs no GPU first; then the worker starts, before anything is written
    if resume is not None:
        run, strategy, experiment = open_resumable(resume, strategy)
    else:
        experiment = args.load()
        if experiment.initial_kernel_path is None:
            raise ExperimentError(args.config or "command line", "initial_kernel",
                                  "missing (give --initial-kernel or set it in --config)")
        if strategy == "tune" or ablation:
            _need_tuning(experiment, args)
    device = evaluator.device_info()
    if resume is None:
        run = RunDir.create(results)
        run.write_json("lock.json", experiment.lock())
        run.write_json("settings.json", {"experiment": asdict(args), "strategy": strategy, "research": research,
                                         "use_nsight": use_nsight, "model": settings.public(),
                                         "budget": asdict(budget)})
        run.write_json("env.json", environment(device))
    cache = ResultCache(results / "cache", device) if use_cache else None
    model = settings.public() if strategy != "tune" else {"model": None}
    recorder = Recorder(experiment, run, evaluator, strategy=strategy, model=model,
                        prices=settings.prices.get(settings.name, {}) if strategy != "tune" else {},
                        cache=cache, on_progress=on_progress)
    if resume is not None:
        recorder.load()
    try:
        if strategy == "tune":
            summary = _tune(recorder, budget, max_evals, seed)
        else:
            def gpu_info() -> dict:
                """The GPU the kernels run on: name, architecture, SM count, L2 size, shared memory limit, peak bandwidth."""
                return device

            tools = {"gpu_info": gpu_info}
            if research:
                tools["search_cuda_docs"] = search_cuda_docs
            instruments = None
            if use_nsight:
                instruments = Instruments(recorder, ncu_path=find_tool("ncu"), device=device_index,
                                          arch=device.get("arch") or "sm_90", patience=budget.patience)
                tools.update(instruments.tools())
            model_client = ModelClient(chat_model if chat_model is not None else make_chat_model(settings),
                                       settings, tools)
            summary = Optimizer(recorder, model_client, budget, tune=strategy == "agent+tune",
                                research=research, instruments=instruments).execute()
        if ablation and strategy != "tune":
            summary = _ablation(recorder, evaluator, cache, budget, max_evals, seed, on_progress)
    finally:
        env = run.read_json("env.json")
        env["finished_at"] = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
        run.write_json("env.json", env)
        if run.file("summary.json").is_file():
            build_report(run.path, experiment.roi)
    return run, summary


def open_resumable(path: Path, strategy: str) -> tuple[RunDir, str, Experiment]:
    """A run directory to continue: its files readable, its experiment unchanged (bad input otherwise)."""
    try:
        run = RunDir.open(path)
    except FileNotFoundError as exc:
        raise ExperimentError(path, "", str(exc)) from None
    experiment = load_run_experiment(run)
    try:
        History.model_validate(read_run_json(run, "history.json"))
    except ValidationError as exc:
        err = exc.errors()[0]
        raise ExperimentError(run.file("history.json"), ".".join(map(str, err["loc"])), err["msg"]) from None
    return run, read_run_json(run, "settings.json").get("strategy", strategy), experiment


def read_run_json(run: RunDir, name: str):
    """One of a run's JSON files; unreadable or broken is bad input naming the file."""
    try:
        return run.read_json(name)
    except OSError as exc:
        raise ExperimentError(run.file(name), "", f"cannot be read: {exc.strerror or exc}") from None
    except json.JSONDecodeError as exc:
        raise ExperimentError(run.file(name), f"line {exc.lineno}", f"not valid JSON: {exc.msg}") from None


def load_run_experiment(run: RunDir) -> Experiment:
    """A run's experiment, refused when what defines right and wrong changed since the run started."""
    settings, lock = read_run_json(run, "settings.json"), read_run_json(run, "lock.json")
    if not isinstance(settings, dict) or not isinstance(settings.get("experiment"), dict):
        raise ExperimentError(run.file("settings.json"), "experiment", "missing: not a run's settings")
    if not isinstance(lock, dict) or "lock" not in lock:
        raise ExperimentError(run.file("lock.json"), "lock", "missing: not a run's lock")
    try:
        experiment = ExperimentArgs(**settings["experiment"]).load()
    except TypeError as exc:
        raise ExperimentError(run.file("settings.json"), "experiment", str(exc)) from None
    if lock["lock"] != experiment.lock()["lock"]:
        raise ExperimentError(run.file("lock.json"), "lock",
                              "the reference, the input cases or the harness changed since this run started; "
                              "start a new run")
    return experiment


def _need_tuning(experiment: Experiment, args: ExperimentArgs) -> None:
    if experiment.tuning is None:
        raise ExperimentError(args.config or "command line", "tune",
                              "the experiment declares no tunable kernel; --strategy tune and --ablation need a "
                              "'tune' section (kernel, tunables, launch)")


def _tune(recorder: Recorder, budget: Budget, max_evals: int, seed: int) -> Summary:
    tuning = recorder.exp.tuning
    tuner = Tuner(recorder, tuning.source, tuning.space, tuning.launch, max_evals=max_evals,
                  time_limit_s=budget.time_limit_s, seed=seed)
    try:
        reason = tuner.execute()
    except KeyboardInterrupt:
        recorder.finish("interrupted")
        raise
    return recorder.finish(reason)


def _ablation(recorder: Recorder, evaluator: Evaluator, cache, budget: Budget, max_evals: int, seed: int,
              on_progress) -> Summary:
    """Tune-only on the same experiment (in ``ablation/``), to show what the agent added beyond tuning."""
    sub = RunDir.create_at(recorder.run.path / "ablation")
    tuned = Recorder(recorder.exp, sub, evaluator, strategy="tune", model={"model": None}, prices={},
                     cache=cache, on_progress=on_progress)
    tune_summary = _tune(tuned, budget, max_evals, seed)
    final, tuned_best = recorder.best, tuned.best
    recorder.ablation = {
        "run": "ablation",
        "tune_only_best_score_us": tune_summary.best_score_us,
        "tune_only_best_defines": tune_summary.best_defines,
        "final_best_score_us": final.score_us if final else None,
        # > 1: the final kernel is this much faster than the best the tuner alone found
        "agent_gain_over_tuning": (tuned_best.score_us / final.score_us) if final and tuned_best else None,
    }
    return recorder.write_summary()
