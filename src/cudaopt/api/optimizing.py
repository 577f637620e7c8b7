"""``optimize``: a strategy run to a stop reason (``cudaopt optimize``), and the checks on the model
that come before it (the strategy ``auto`` stands for, the model's credentials, the price file),
shared with the fleet audit's ``--optimize``.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path

from pydantic import TypeAdapter, ValidationError

from .. import strategies
from ..agent.graph import MODEL_FAILURE
from ..agent.model import ModelSettings, credentials_problem, make_chat_model
from ..errors import ExperimentError, shortened, validation_message
from ..experiment import Experiment, ExperimentArgs
from ..optimize import Options, start_or_resume, stored_iterations, stored_strategy
from ..pool.dispatch import Evaluator
from ..preflight import has_local_gpu, preflight
from ..reading import read_json_file
from ..record.events import Notice, OnProgress, StepProgress, ignore
from ..record.files import Summary
from ..record.runs import Budget
from .arguments import check as check_arguments
from .arguments import path_of
from .experiments import Given, PathArg, experiment_of
from .from_python import made_in_cache
from .workers import Devices, chosen, workers
from ..agent.research import default_library


@dataclass(frozen=True)
class RunResult:
    """A finished run: its run directory and its summary (``summary.json``)."""
    path: Path
    summary: Summary

    @property
    def model_failure(self) -> str | None:
        """Why the model kept failing, when that stopped the run (the command exits 5)."""
        reason = self.summary.stop_reason
        return reason.removeprefix(MODEL_FAILURE) if reason.startswith(MODEL_FAILURE) else None


def model_settings(model: str, reasoning_effort: str = "medium", base_url: str | None = None,
                   prices: PathArg | dict | None = None) -> ModelSettings:
    """The model's settings, its price table overridden by ``prices`` (a JSON file or its data)."""
    settings = ModelSettings(model=model, reasoning_effort=reasoning_effort, base_url=base_url)
    if prices is not None:
        settings.prices.update(read_prices(prices))
    return settings


def read_prices(given: PathArg | dict) -> dict[str, dict[str, float]]:
    """``{"model": {"input": USD/M, "output": USD/M}}``, from a file or as data; bad input naming the
    file (or ``--prices``) and the field."""
    origin = "--prices" if isinstance(given, dict) else path_of(given, "prices")
    data = given if isinstance(given, dict) else read_json_file(origin, "price file")
    try:
        prices = TypeAdapter(dict[str, dict[str, float]]).validate_python(data)
    except ValidationError as exc:
        raise ExperimentError(origin, *validation_message(exc)) from None
    for model, entry in prices.items():
        missing = [k for k in ("input", "output") if k not in entry]
        if missing:
            raise ExperimentError(origin, model, f"missing {' and '.join(missing)} (USD per million tokens)")
        for kind, value in entry.items():
            if kind not in ("input", "output"):
                raise ExperimentError(origin, f"{model}.{kind}", "not input or output (USD per million tokens)")
            if not (math.isfinite(value) and value >= 0):
                raise ExperimentError(origin, f"{model}.{kind}", f"{value} is not a price (USD per million tokens, "
                                                                 "0 or more)")
    return prices


def resolve_strategy(requested: str, settings: ModelSettings, on_progress: OnProgress = ignore) -> str:
    """The strategy ``requested`` stands for (``auto``: by the model's credentials, said as a
    :class:`Notice`); bad input when it is unknown or needs a model without credentials."""
    if requested not in strategies.names():
        raise ExperimentError("--strategy", "", f"{requested!r} is not one of {', '.join(strategies.names())}")
    needs_model = requested == strategies.AUTO or strategies.get(requested).needs_model
    problem = credentials_problem(settings) if needs_model else None
    strategy, why = strategies.choose(requested, problem, settings.model)
    if why:
        on_progress(Notice(f"strategy: {strategy} ({why})"))
    elif problem:
        raise ExperimentError("--model", "", problem)
    return strategy


def check_model(settings: ModelSettings) -> None:
    """A model string the provider cannot build is bad input, before any GPU work or run directory."""
    try:
        make_chat_model(settings)
    except Exception as exc:
        raise ExperimentError(f"--model {settings.model}", "", shortened(str(exc))) from None


def optimize(experiment: Given | None = None, *, strategy: str = "auto", model: str = "openai:gpt-5-mini",
             reasoning_effort: str = "medium", base_url: str | None = None, prices: PathArg | dict | None = None,
             results: PathArg = "results", resume: PathArg | None = None, max_iterations: int | None = None,
             max_model_calls: int | None = None, max_cost_usd: float | None = None, time_limit: float | None = None,
             patience: int | None = None, max_model_errors: int = 3, proposals: int | None = None,
             max_evals: int = 40, seed: int = 0, ablation: bool = False, cache: bool = True,
             nvidia_research: bool = False, use_nsight: bool = False, chat_model=None,
             evaluator: Evaluator | None = None, device: int | None = None, devices: Devices = None,
             ray: str | None = None, on_progress: OnProgress = ignore) -> RunResult:
    """Run ``strategy`` (``auto``: ``agent+tune`` with the model's credentials, ``tune`` without;
    ``agent``, ``agent+tune``, ``tune``) on the experiment until a budget runs out; the run directory
    lands in ``results/run-NNN`` (or the run ``resume`` names goes on). Every check of ``cudaopt
    check``, the model's credentials and the budgets are checked before any GPU work.
    ``chat_model``: a LangChain chat model to use instead of building one from ``model``."""
    check_arguments({"model": model, "reasoning_effort": reasoning_effort, "base_url": base_url,
                     "results": results, "max_iterations": max_iterations, "max_model_calls": max_model_calls,
                     "max_cost_usd": max_cost_usd, "time_limit": time_limit, "patience": patience,
                     "max_model_errors": max_model_errors, "proposals": proposals, "max_evals": max_evals,
                     "seed": seed, "device": device, "ray": ray})
    folder = path_of(results, "results") or Path("results")
    settings = model_settings(model, reasoning_effort, base_url, prices)
    if strategy not in strategies.names():
        raise ExperimentError("--strategy", "", f"{strategy!r} is not one of {', '.join(strategies.names())}")
    choice = chosen(device, devices, ray)
    if use_nsight and ray is not None:
        raise ExperimentError("--use-nsight", "", "profiles on this machine's GPU; it does not combine with --ray")
    resumed = path_of(resume, "resume")
    if resumed is not None and experiment is not None:
        raise ExperimentError("--resume", "", "a resumed run keeps the experiment it started with: give no other")
    if proposals is not None and resumed is not None:
        raise ExperimentError("--proposals", "", "a resumed run keeps the proposals per round it started with")
    if resumed is None and experiment is None:
        raise ExperimentError("--config", "", "no experiment given: give --config FILE (such as "
                                              "examples/sgemm/experiment.json), the experiment flags (--signature, "
                                              "--reference, --input-cases, ...) or --resume RUN_DIR")
    exp = experiment_of(experiment) if resumed is None else None
    if exp is not None:
        iterations = max_iterations or exp.max_iterations
        strategy = resolve_strategy(strategy, settings, on_progress) if chat_model is None else \
            (strategy if strategy != strategies.AUTO else "agent+tune")
    else:
        iterations = max_iterations or stored_iterations(resumed)
        strategy = stored_strategy(resumed)
    if (proposals or 1) > 1 and strategy == "tune":
        raise ExperimentError("--proposals", "", "the tune strategy asks no model for proposals (it needs "
                                                 "agent or agent+tune, and the model's credentials)")
    if chat_model is None and strategies.get(strategy).needs_model:
        if exp is None and (problem := credentials_problem(settings)):
            raise ExperimentError("--model", "", problem)
        check_model(settings)
        if nvidia_research:
            for notice in default_library().notices:  # fetched before the run, so notices precede the progress
                on_progress(Notice(notice))
    checked = time.monotonic()
    if exp is not None:
        on_progress(StepProgress("checking the experiment", 0, 0))
        local = evaluator is None and choice.ray is None
        ahead = exp.tuning.space.sweep(max_evals) if strategy == "tune" and exp.tuning and local and has_local_gpu() \
            else []
        preflight(exp, ahead=ahead)  # a tune run's sweep compiled beside the checks, for the worker on this machine
    preflight_s = time.monotonic() - checked
    budget = Budget(max_iterations=iterations, max_model_calls=max_model_calls, max_cost_usd=max_cost_usd,
                    time_limit_s=time_limit, patience=patience, max_model_errors=max_model_errors)
    options = Options(strategy=strategy, chat_model=chat_model, max_evals=max_evals, seed=seed, ablation=ablation,
                      use_cache=cache, research=nvidia_research, use_nsight=use_nsight, proposals=proposals or 1)
    steps = max_evals if strategy == "tune" else iterations
    on_progress(StepProgress(f"optimizing ({strategy})", 0, steps))
    with workers(choice, evaluator, on_progress) as pool:
        if use_nsight:
            options.device_index = pool.gpus()[0].index
        run, summary = start_or_resume(_args(exp), settings, budget, folder, pool, options,
                                       resume=resumed, experiment=exp, keep=made_in_cache(exp) if exp else None,
                                       on_progress=on_progress, preflight_s=preflight_s)
    return RunResult(run.path, summary)


def _args(experiment: Experiment | None) -> ExperimentArgs:
    """How a run will load its experiment again: as it was given, its paths absolute (a resumed run
    reads its own)."""
    if experiment is None:
        return ExperimentArgs()
    if experiment.args is None:
        raise ExperimentError("--config", "", "an Experiment made by hand records no way to load it again: give "
                                              "a config, ExperimentArgs, or api.load's or api.experiment's result")
    return experiment.args.resolved()
