"""A run from start to stop (the core of ``api.optimize``): start or resume it, and leave its run
directory in ``results/run-NNN/``.

The API has checked everything that needs no GPU (the experiment, the model's credentials, the
budgets) and started the workers. The order here is the same for every strategy: the strategy's
own check of the experiment, the run directory (settings, lock and environment written before
anything is measured), the baseline (once per run, refused when a case does not discriminate;
what the strategy will measure first compiles beside it),
the strategy until it returns a stop reason, the finalists measured again on one GPU (the best
alone too), the crowning audit of the winner, the dispatch table, the summary, the heatmap and
the report.
"""

from __future__ import annotations

import datetime as dt
import platform
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from . import strategies
from .cpu_controls import refuse_results
from .engine.recorder import Recorder
from .errors import ExperimentError
from .pool.dispatch import Evaluator, GpuRef
from .experiment import Experiment, ExperimentArgs
from .wire.results import DeviceInfo
from .record.cache import ResultCache
from .record.dispatch_table import write_dispatch
from .record.events import OnProgress, ignore
from .record.rundir import RunDir
from .record.runs import Budget, RunSettings, open_resumable, open_run, read_run_json
from .record.files import Environment, Summary
from .report.build import build as build_report
from .strategies.tune import TuneStrategy, need_tuning
from .winner.crowning import crown

PACKAGES = ("cudaopt", "cuda-core", "cuda-bindings", "numpy", "pydantic", "langgraph", "langchain",
            "langchain-core", "langchain-openai", "openai", "matplotlib", "nvidia-ml-py")


def environment(device: DeviceInfo, pool: list[GpuRef], backend: str) -> Environment:
    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return Environment(gpu=device, pool=pool, backend=backend, python=sys.version.split()[0],
                       platform=platform.platform(), packages=versions, git=_git_state(), started_at=_now())


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def _git_state() -> dict:
    def git(*args: str) -> str | None:
        try:
            out = subprocess.run(["git", *args], capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return out.stdout.strip() if out.returncode == 0 else None

    status = git("status", "--porcelain")
    return {"commit": git("rev-parse", "HEAD"), "dirty": bool(status) if status is not None else None}


@dataclass
class Options:
    """How to run, beyond the experiment and the budget (the CLI's flags)."""

    strategy: str = "agent"
    chat_model: object = None  # a chat model to use instead of building one (tests)
    max_evals: int = 40
    seed: int = 0
    ablation: bool = False
    use_cache: bool = True
    research: bool = False
    use_nsight: bool = False
    device_index: int = 0  # the local GPU the instruments profile on
    proposals: int = 1  # proposals per round of the agent strategies (a resumed run keeps its own)


def stored_iterations(path: Path) -> int:
    """The iteration budget a run was started with (what --resume continues towards)."""
    return read_run_json(open_run(path), RunDir.SETTINGS, RunSettings).budget.max_iterations


def stored_strategy(path: Path) -> str:
    """The strategy a run was started with: a resume needs what it needs (a tune run, no model)."""
    return read_run_json(open_run(path), RunDir.SETTINGS, RunSettings).strategy


def start_or_resume(args: ExperimentArgs, settings, budget: Budget, results: Path, evaluator: Evaluator,
                    options: Options | None = None, *, resume: Path | None = None, experiment: Experiment | None = None,
                    keep: Path | None = None, on_progress: OnProgress = ignore,
                    preflight_s: float = 0.0) -> tuple[RunDir, Summary]:
    """Run a strategy to a stop reason. On --resume, the stored experiment, strategy and lock are used.
    ``settings`` is the model's (agent.model.ModelSettings); ``experiment`` is ``args`` loaded, when
    the caller has loaded it already (it is loaded once); ``keep``: a folder of experiment files
    (``args`` names its config) copied into the run's ``experiment/``, from where the run loads it
    again (an experiment built in Python, kept in a cache that may be cleared); ``preflight_s``: how
    long the caller's pre-flight took (the summary says where the run's time went)."""
    options = options or Options()
    # every check that needs no GPU first; then the worker starts, before anything is written
    proposals = options.proposals
    if resume is not None:
        run, stored, experiment = open_resumable(resume)
        name, proposals = stored.strategy, stored.proposals
    else:
        name = options.strategy
        experiment = experiment or args.load()
        origin = args.config or "command line"
        if experiment.initial_kernel_path is None and strategies.get(name).needs_initial_kernel:
            raise ExperimentError(origin, "initial_kernel", f"missing: --strategy {name} starts from a kernel; give "
                                                            "--initial-kernel (or set it in --config), or let a model "
                                                            "write the first one (--strategy agent, with the model's "
                                                            "credentials set)")
        strategies.get(name).check(experiment, origin)
        if options.ablation:
            need_tuning(experiment, origin)
    strategy = strategies.get(name)
    started = time.monotonic()
    device = evaluator.device_info()  # the workers start here
    workers_s = time.monotonic() - started
    if resume is None:
        run = RunDir.create(results)
        if keep is not None:
            shutil.copytree(keep, run.file(RunDir.EXPERIMENT))
            args = ExperimentArgs(config=str(run.file(RunDir.EXPERIMENT) / Path(args.config).name))
        run.write_model(RunDir.LOCK, experiment.lock())
        run.write_model(RunDir.SETTINGS, RunSettings(experiment=args, strategy=name, research=options.research,
                                                     use_nsight=options.use_nsight, proposals=proposals,
                                                     model=settings.public(), budget=budget))
        run.write_model(RunDir.ENV, environment(device, evaluator.gpus(), evaluator.backend))
    cache = ResultCache(results / "cache", device) if options.use_cache else None
    uses_model = strategy.needs_model
    recorder = Recorder(experiment, run, evaluator, strategy=name,
                        model=settings.public() if uses_model else {"model": None},
                        prices=settings.prices.get(settings.name, {}) if uses_model else {},
                        cache=cache, on_progress=on_progress)
    if resume is not None:
        recorder.load()
    recorder.count_start(preflight_s, workers_s)
    context = strategies.Context(recorder=recorder, budget=budget, model=settings, chat_model=options.chat_model,
                                 max_evals=options.max_evals, seed=options.seed, research=options.research,
                                 use_nsight=options.use_nsight, device_index=options.device_index,
                                 proposals=proposals)
    try:
        summary = _run(strategy, context)
        if options.ablation and name != "tune":
            summary = _ablation(recorder, context)
    finally:
        env = read_run_json(run, RunDir.ENV, Environment)
        env.finished_at = _now()
        run.write_model(RunDir.ENV, env)
        if run.file(RunDir.SUMMARY).is_file():
            build_report(run.path, experiment.roi)
    return run, summary


def _run(strategy, context: strategies.Context) -> Summary:
    """The baseline, the strategy, then the finalists measured again side by side on one GPU and
    the crowning audit of the winner; an interrupt is recorded as the stop reason and re-raised."""
    recorder = context.recorder
    try:
        if recorder.baseline is None:
            recorder.compile_ahead(strategy.ahead(context))
        try:
            refuse_results(recorder.exp, recorder.ensure_baseline().cases)
        except ExperimentError:
            recorder.finish("non-discriminating case (negative controls)")
            raise
        reason = strategy.run(context)
        crown(recorder)
        write_dispatch(recorder)
    except KeyboardInterrupt:
        recorder.run.log("interrupted")
        recorder.finish("interrupted")
        raise
    return recorder.finish(reason)


def _ablation(recorder: Recorder, context: strategies.Context) -> Summary:
    """Tune-only on the same experiment (in ``ablation/``), to show what the agent added beyond tuning."""
    sub = RunDir.create_at(recorder.run.file(RunDir.ABLATION))
    tuned = Recorder(recorder.exp, sub, recorder.evaluator, strategy="tune", model={"model": None}, prices={},
                     cache=recorder.cache, on_progress=recorder.on_progress)
    tune_summary = _run(TuneStrategy(), strategies.Context(
        recorder=tuned, budget=context.budget, max_evals=context.max_evals, seed=context.seed))
    final, tuned_best = recorder.best, tuned.best
    recorder.ablation = {
        "run": RunDir.ABLATION,
        "tune_only_best_score_us": tune_summary.best_score_us,
        "tune_only_best_defines": tune_summary.best_defines,
        "final_best_score_us": final.score_us if final else None,
        # > 1: the final kernel is this much faster than the best the tuner alone found
        "agent_gain_over_tuning": (tuned_best.score_us / final.score_us) if final and tuned_best else None,
    }
    return recorder.write_summary()
