"""``cudaopt check``, ``evaluate`` and ``optimize``: the commands that take an experiment."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Annotated

import typer

from ..errors import ExperimentError
from .app import (
    EXIT_FAILED,
    CasesOpt,
    ConfigOpt,
    DescriptionOpt,
    DeviceOpt,
    DevicesOpt,
    InitialOpt,
    ModelFailed,
    RayOpt,
    ReferenceOpt,
    SignatureOpt,
    app,
    check_model,
    checking,
    command,
    console,
    experiment,
    experiment_args,
    gpu_pool,
    gpus_chosen,
    preflight,
    resolve_strategy,
    say,
)
from .flags import SEED_MAX


@app.command()
@command()
def check(
    config: ConfigOpt = None,
    description: DescriptionOpt = None,
    signature: SignatureOpt = None,
    reference: ReferenceOpt = None,
    initial_kernel: InitialOpt = None,
    input_cases: CasesOpt = None,
    kernel: Annotated[Path | None, typer.Option("--kernel", help="Check this kernel instead of the initial kernel.")] = None,
    entry: Annotated[str | None, typer.Option("--entry", help="Entry point name (default: the signature's name).")] = None,
    arch: Annotated[str | None, typer.Option("--arch", help="Target architecture, e.g. sm_90 (default: the local GPU's, else sm_90).")] = None,
) -> None:
    """Check an experiment without a GPU: files, fields, every expression on every case, the
    reference (a .py one is called on the smallest case), the kernels compiled with NVRTC."""
    from ..experiment import kernel_file
    from .render_experiments import check_table

    exp = experiment(config, description, signature, reference, initial_kernel, input_cases)
    if kernel is not None:
        kernel_file(kernel, entry or exp.signature.name, exp.signature)
    if arch is not None and not re.fullmatch(r"sm_\d{2,3}[a-z]?", arch):
        raise ExperimentError("--arch", "", f"{arch!r} is not an architecture such as sm_90")
    console().print(check_table(preflight(exp, kernel=kernel, entry=entry, arch=arch)))


@app.command()
@command()
def evaluate(
    config: ConfigOpt = None,
    description: DescriptionOpt = None,
    signature: SignatureOpt = None,
    reference: ReferenceOpt = None,
    initial_kernel: InitialOpt = None,
    input_cases: CasesOpt = None,
    kernel: Annotated[Path | None, typer.Option("--kernel", help="Kernel to evaluate (default: the initial kernel).")] = None,
    entry: Annotated[str | None, typer.Option("--entry", help="Entry point name (default: the signature's name).")] = None,
    launch: Annotated[str | None, typer.Option("--launch", help='Launch configuration as JSON or a JSON file: {"grid": [...], "block": [...], "shared_bytes": 0}, '
                                                                  'or a tier table {"let": {...}, "size": [...], "tiers": [...]} '
                                                                  "(docs/experiments.md).")] = None,
    json_out: Annotated[Path | None, typer.Option("--json", help="Write the full result here (- for standard "
                                                                 "output; the tables then go to standard error).")] = None,
    warmup: Annotated[int | None, typer.Option(min=0, help="Warm-up launches per case (default 10).")] = None,
    iterations: Annotated[int | None, typer.Option(min=1, help="Timed launches per case (default 100).")] = None,
    device: DeviceOpt = None,
    devices: DevicesOpt = None,
    ray: RayOpt = None,
    no_time_reference: Annotated[bool, typer.Option("--no-time-reference", help="Do not time a .cu reference (no "
                                                    "speed-up column).")] = False,
) -> None:
    """Check a kernel on every correctness and performance case, and time it honestly."""
    from ..cpu_controls import refuse_results
    from ..evaluate import evaluate_trial
    from ..record.rundir import write_atomic
    from ..trial import prepare_trial
    from .render_experiments import evaluation_table, failure_lines

    chosen = gpus_chosen(device, devices, ray)
    to_stdout = json_out is not None and str(json_out) == "-"
    trial = prepare_trial(experiment_args(config, description, signature, reference, initial_kernel, input_cases,
                                          resolve=False),
                          kernel, entry=entry, launch=launch, warmup=warmup, iterations=iterations,
                          outputs=[(json_out, "--json")] if json_out is not None and not to_stdout else [],
                          checking=checking)
    exp, path = trial.experiment, trial.kernel
    out = console(stderr=to_stdout)
    with gpu_pool(chosen, ray) as pool:
        with out.status(f"evaluating {path.name} on {len(exp.cases({'correctness', 'performance'}))} cases…"):
            result = evaluate_trial(trial, pool, time_reference=not no_time_reference)
    refused = result.candidate.status in ("non_discriminating", "precision")
    if json_out is not None and not to_stdout and refused:
        write_atomic(json_out, result.to_json(indent=2) + "\n")  # what was measured is kept, then refused
    refuse_results(exp, result.candidate.cases)
    if result.candidate.status == "precision":  # the worker read the policy's breach in the compiled code
        raise ExperimentError(path, "limits.precision", result.candidate.reason)
    out.print(evaluation_table(result))
    for line in failure_lines(result):
        say(out, line)
    mine, theirs = result.gpus.get("candidate"), result.gpus.get("reference")
    if mine and theirs and mine != theirs:
        say(out, f"the kernel was measured on {mine.label}, the reference on {theirs.label} ({theirs.name} both)")
    text = result.to_json(indent=2)
    if to_stdout:
        typer.echo(text)
    elif json_out:
        write_atomic(json_out, text + "\n")
        say(out, f"result written to {json_out}")
    if not result.candidate.ok:
        raise typer.Exit(EXIT_FAILED)


@app.command()
@command(interrupted="interrupted: the run directory holds every finished attempt; continue it with --resume")
def optimize(
    config: ConfigOpt = None,
    description: DescriptionOpt = None,
    signature: SignatureOpt = None,
    reference: ReferenceOpt = None,
    initial_kernel: InitialOpt = None,
    input_cases: CasesOpt = None,
    max_iterations: Annotated[int | None, typer.Option(min=1, help="Improvement attempts (default 7, or the config's).")] = None,
    model: Annotated[str, typer.Option(help="provider:model for LangChain's init_chat_model.")] = "openai:gpt-5-mini",
    reasoning_effort: Annotated[str, typer.Option(help="minimal | low | medium | high, for reasoning models "
                                                      "(gpt-5, o-series).")] = "medium",
    base_url: Annotated[str | None, typer.Option(help="An OpenAI-compatible server (vLLM, Ollama, llama.cpp).")] = None,
    results_dir: Annotated[Path, typer.Option(help="Where run-NNN directories go.")] = Path("results"),
    max_model_calls: Annotated[int | None, typer.Option(min=1, help="Stop after this many requests to the model.")] = None,
    max_cost_usd: Annotated[float | None, typer.Option(min=0, help="Stop once the estimated cost reaches this.")] = None,
    time_limit: Annotated[float | None, typer.Option(min=1, help="Stop after this many seconds of wall time.")] = None,
    patience: Annotated[int | None, typer.Option(min=1, help="Stop after this many attempts without a new best.")] = None,
    max_model_errors: Annotated[int, typer.Option(min=1, help="Stop (exit 5) after this many model errors in a row; "
                                                          "refused credentials stop at once.")] = 3,
    prices: Annotated[Path | None, typer.Option(help='JSON {"model": {"input": USD/M, "output": USD/M}} overriding the price table.')] = None,
    resume: Annotated[Path | None, typer.Option(help="Continue an interrupted run directory.")] = None,
    device: DeviceOpt = None,
    devices: DevicesOpt = None,
    ray: RayOpt = None,
    proposals: Annotated[int | None, typer.Option(min=1, help="Proposals the model writes per round, asked at once "
                                                          "and evaluated in parallel (agent strategies; default 1). "
                                                          "Each is an iteration.")] = None,
    strategy: Annotated[str, typer.Option(help="auto | agent | agent+tune | tune. auto: agent+tune when the model's "
                                                "credentials are set, tune otherwise.")] = "auto",
    max_evals: Annotated[int, typer.Option(min=1, help="Configurations the tuner may evaluate.")] = 40,
    seed: Annotated[int, typer.Option(min=0, max=SEED_MAX, help="Seed of the tuner's sampler.")] = 0,
    ablation: Annotated[bool, typer.Option(help="Also tune only, and report what the agent added beyond tuning.")] = False,
    cache: Annotated[bool, typer.Option(help="Reuse results of identical configurations (results/cache/).")] = True,
    nvidia_research: Annotated[bool, typer.Option("--nvidia-research", help="Give the model a search tool over "
                                                   "CUDA optimisation guidance: the bundled entries and the NVIDIA "
                                                   "pages they cite, fetched once and cached (see `cudaopt docs`).")] = False,
    use_nsight: Annotated[bool, typer.Option("--use-nsight", help="Give the model its instruments: Nsight Compute "
                                             "bottleneck cards (profile_kernel; the loop also profiles the best "
                                             "kernel when progress stalls) and compiled-code summaries "
                                             "(inspect_compiled).")] = False,
) -> None:
    """Improve a kernel (a model in the loop, a tuner, or both); every step lands in results/run-NNN/."""
    from .. import strategies
    from ..agent.graph import MODEL_FAILURE
    from ..agent.model import ModelSettings
    from ..optimize import Options, start_or_resume, stored_iterations, stored_strategy
    from ..record.runs import Budget
    from .render_experiments import OptimizeProgress, summary_lines, summary_table

    settings = ModelSettings(model=model, reasoning_effort=reasoning_effort, base_url=base_url)
    if prices is not None:
        settings.prices.update(_read_prices(prices))
    if strategy not in strategies.names():
        raise ExperimentError("--strategy", "", f"{strategy!r} is not one of {', '.join(strategies.names())}")
    chosen = gpus_chosen(device, devices, ray)
    if use_nsight and ray is not None:
        raise ExperimentError("--use-nsight", "", "profiles on this machine's GPU; it does not combine with --ray")
    if proposals is not None and resume is not None:
        raise ExperimentError("--proposals", "", "a resumed run keeps the proposals per round it started with")
    args = experiment_args(config, description, signature, reference, initial_kernel, input_cases, max_iterations)
    exp = None if resume is not None else args.load()  # loaded once: checked here, run by start_or_resume
    if exp is not None:
        iterations = max_iterations or exp.max_iterations
        strategy = resolve_strategy(strategy, settings)
    else:
        iterations = max_iterations or stored_iterations(resume)
        strategy = stored_strategy(resume)
    if (proposals or 1) > 1 and strategy == "tune":
        raise ExperimentError("--proposals", "", "the tune strategy asks no model for proposals (it needs "
                                                 "agent or agent+tune, and the model's credentials)")
    if strategy == strategies.AUTO or strategies.get(strategy).needs_model:
        check_model(settings)
        if nvidia_research:
            from ..agent.research import default_library

            for notice in default_library().notices:  # fetched before the run, so notices precede the progress
                say(console(stderr=True), notice)
    if results_dir.exists() and not results_dir.is_dir():
        raise ExperimentError("--results-dir", "", f"{results_dir}: exists and is not a folder")
    if exp is not None:
        preflight(exp)
    budget = Budget(max_iterations=iterations, max_model_calls=max_model_calls, max_cost_usd=max_cost_usd,
                    time_limit_s=time_limit, patience=patience, max_model_errors=max_model_errors)
    options = Options(strategy=strategy, max_evals=max_evals, seed=seed, ablation=ablation, use_cache=cache,
                      research=nvidia_research, use_nsight=use_nsight, proposals=proposals or 1)
    out = console()
    steps = max_evals if strategy == "tune" else budget.max_iterations
    with gpu_pool(chosen, ray) as pool, OptimizeProgress(out, steps) as progress:
        if use_nsight:
            options.device_index = pool.gpus()[0].index
        run, summary = start_or_resume(args, settings, budget, results_dir, pool, options, resume=resume,
                                       experiment=exp, on_progress=progress)
    out.print(summary_table(summary))
    for line in summary_lines(summary):
        say(out, line)
    say(out, f"audit pack: {run.path}")
    if summary.stop_reason.startswith(MODEL_FAILURE):
        raise ModelFailed(f"the run stopped on a model failure: {summary.stop_reason.removeprefix(MODEL_FAILURE)}")


def _read_prices(path: Path) -> dict:
    from pydantic import TypeAdapter, ValidationError

    from ..reading import read_json_file
    from ..errors import validation_message

    try:
        prices = TypeAdapter(dict[str, dict[str, float]]).validate_python(read_json_file(path, "price file"))
    except ValidationError as exc:
        raise ExperimentError(path, *validation_message(exc)) from None
    for model, entry in prices.items():
        missing = [k for k in ("input", "output") if k not in entry]
        if missing:
            raise ExperimentError(path, model, f"missing {' and '.join(missing)} (USD per million tokens)")
        for kind, value in entry.items():
            if kind not in ("input", "output"):
                raise ExperimentError(path, f"{model}.{kind}", "not input or output (USD per million tokens)")
            if not (math.isfinite(value) and value >= 0):
                raise ExperimentError(path, f"{model}.{kind}", f"{value} is not a price (USD per million tokens, "
                                                               "0 or more)")
    return prices
