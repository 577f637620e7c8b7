"""``cudaopt check``, ``evaluate`` and ``optimize``: the commands that take an experiment."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from .. import api
from .app import EXIT_FAILED, ModelFailed, app, command, console, say
from .options import (
    BaseUrlOpt,
    DeviceOpt,
    DevicesOpt,
    EntryOpt,
    IterationsOpt,
    JsonOpt,
    KernelOpt,
    LaunchOpt,
    ModelOpt,
    RayOpt,
    StrategyOpt,
    WarmupOpt,
    takes_experiment,
    to_stdout,
)
from .progress import Status
from .render_experiments import OptimizeProgress, check_table, evaluation_table, failure_lines, summary_lines, \
    summary_table


@app.command()
@command()
@takes_experiment
def check(
    experiment,
    kernel: KernelOpt = None,
    entry: EntryOpt = None,
    launch: LaunchOpt = None,
    arch: Annotated[str | None, typer.Option("--arch", help="Target architecture, e.g. sm_90a (default: the local "
                                                            "GPU's, else sm_90a).")] = None,
) -> None:
    """Check an experiment without a GPU: files, fields, every expression on every case, each case's
    launch (or --launch) against the kernel, the reference (a .py one is called on the smallest case),
    the kernels compiled with NVRTC."""
    with Status("checking the experiment"):
        done = api.check(experiment or api.ExperimentArgs(), kernel=kernel, entry=entry, launch=launch, arch=arch)
    console().print(check_table(done))


@app.command()
@command()
@takes_experiment
def evaluate(
    experiment,
    kernel: KernelOpt = None,
    entry: EntryOpt = None,
    launch: LaunchOpt = None,
    json_out: JsonOpt = None,
    warmup: WarmupOpt = None,
    iterations: IterationsOpt = None,
    device: DeviceOpt = None,
    devices: DevicesOpt = None,
    ray: RayOpt = None,
    no_time_reference: Annotated[bool, typer.Option("--no-time-reference", help="Do not time a .cu reference (no "
                                                    "speed-up column).")] = False,
) -> None:
    """Check a kernel on every correctness and performance case, and time it honestly."""
    stdout = to_stdout(json_out)
    with Status("checking the experiment") as status:
        result = api.evaluate(experiment or api.ExperimentArgs(), kernel, entry=entry, launch=launch,
                              warmup=warmup, iterations=iterations, time_reference=not no_time_reference,
                              json_out=None if stdout else json_out, device=device, devices=devices, ray=ray,
                              on_progress=status)
    out = console(stderr=stdout)
    out.print(evaluation_table(result))
    for line in failure_lines(result):
        say(out, line)
    mine, theirs = result.gpus.get("candidate"), result.gpus.get("reference")
    if mine and theirs and mine != theirs:
        say(out, f"the kernel was measured on {mine.label}, the reference on {theirs.label} ({theirs.name} both)")
    if stdout:
        typer.echo(result.to_json(indent=2))
    elif json_out:
        say(out, f"result written to {json_out}")
    if not result.candidate.ok:
        raise typer.Exit(EXIT_FAILED)


@app.command()
@command(interrupted="interrupted: the run directory holds every finished attempt; continue it with --resume")
@takes_experiment
def optimize(
    experiment,
    max_iterations: Annotated[int | None, typer.Option(help="Improvement attempts (default 7, or the "
                                                            "config's).")] = None,
    model: ModelOpt = "openai:gpt-5-mini",
    reasoning_effort: Annotated[str, typer.Option(help="minimal | low | medium | high, for reasoning models "
                                                      "(gpt-5, o-series).")] = "medium",
    base_url: BaseUrlOpt = None,
    results_dir: Annotated[Path, typer.Option(help="Where run-NNN directories go.")] = Path("results"),
    max_model_calls: Annotated[int | None, typer.Option(help="Stop after this many requests to the model.")] = None,
    max_cost_usd: Annotated[float | None, typer.Option(help="Stop once the estimated cost reaches this.")] = None,
    time_limit: Annotated[float | None, typer.Option(help="Stop after this many seconds of wall time.")] = None,
    patience: Annotated[int | None, typer.Option(help="Stop after this many attempts without a new best.")] = None,
    max_model_errors: Annotated[int, typer.Option(help="Stop (exit 5) after this many model errors in a row; "
                                                       "refused credentials stop at once.")] = 3,
    prices: Annotated[Path | None, typer.Option(help='JSON {"model": {"input": USD/M, "output": USD/M}} overriding '
                                                     "the price table.")] = None,
    resume: Annotated[Path | None, typer.Option(help="Continue an interrupted run directory.")] = None,
    device: DeviceOpt = None,
    devices: DevicesOpt = None,
    ray: RayOpt = None,
    proposals: Annotated[int | None, typer.Option(help="Proposals the model writes per round, asked at once and "
                                                       "evaluated in parallel (agent strategies; default 1). Each is "
                                                       "an iteration.")] = None,
    strategy: StrategyOpt = "auto",
    max_evals: Annotated[int, typer.Option(help="Configurations the tuner may evaluate.")] = 40,
    seed: Annotated[int, typer.Option(help="Seed of the tuner's sampler.")] = 0,
    ablation: Annotated[bool, typer.Option("--ablation", help="Also tune only, and report what the agent added "
                                                              "beyond tuning.")] = False,
    cache: Annotated[bool, typer.Option("--cache/--no-cache", help="Reuse results of identical configurations "
                                                                   "(results/cache/).")] = True,
    nvidia_research: Annotated[bool, typer.Option("--nvidia-research", help="Give the model a search tool over "
                                                  "CUDA optimisation guidance: the bundled entries and the NVIDIA "
                                                  "pages they cite, fetched once and cached (see `cudaopt docs`).")]
    = False,
    use_nsight: Annotated[bool, typer.Option("--use-nsight", help="Give the model its instruments: Nsight Compute "
                                             "bottleneck cards (profile_kernel; the loop also profiles the best "
                                             "kernel when progress stalls) and compiled-code summaries "
                                             "(inspect_compiled).")] = False,
) -> None:
    """Improve a kernel (a model in the loop, a tuner, or both); every step lands in results/run-NNN/."""
    out = console()
    with OptimizeProgress(out) as progress:
        run = api.optimize(experiment, strategy=strategy, model=model, reasoning_effort=reasoning_effort,
                           base_url=base_url, prices=prices, results=results_dir, resume=resume,
                           max_iterations=max_iterations, max_model_calls=max_model_calls, max_cost_usd=max_cost_usd,
                           time_limit=time_limit, patience=patience, max_model_errors=max_model_errors,
                           proposals=proposals, max_evals=max_evals, seed=seed, ablation=ablation, cache=cache,
                           nvidia_research=nvidia_research, use_nsight=use_nsight, device=device, devices=devices,
                           ray=ray, on_progress=progress)
    out.print(summary_table(run.summary))
    for line in summary_lines(run.summary):
        say(out, line)
    say(out, f"run directory: {run.path}")
    if run.model_failure is not None:
        raise ModelFailed(f"the run stopped on a model failure: {run.model_failure}")
