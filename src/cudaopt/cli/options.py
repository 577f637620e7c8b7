"""The options several commands share, declared once: the experiment flags (added to a command by
:func:`takes_experiment`, which hands them over as one ``ExperimentArgs``), the kernel, entry and
launch flags, and the GPU flags. A flag's value goes to the API argument of the same name, which
checks it."""

from __future__ import annotations

import functools
import inspect
from pathlib import Path
from typing import Annotated

import typer

from .. import api

ConfigOpt = Annotated[Path | None, typer.Option("--config", help="Experiment config file (JSON); flags override it.")]
DescriptionOpt = Annotated[str | None, typer.Option("--description", help="What the kernel computes.")]
SignatureOpt = Annotated[str | None, typer.Option("--signature", help='Kernel signature: extern "C" __global__ '
                                                                      "void name(...).")]
ReferenceOpt = Annotated[Path | None, typer.Option("--reference", help="Trusted reference: a .cu kernel, or a .py "
                                                                       "file with a NumPy or PyTorch function.")]
InitialOpt = Annotated[Path | None, typer.Option("--initial-kernel", help="The kernel to start from (.cu).")]
CasesOpt = Annotated[Path | None, typer.Option("--input-cases", help="Input cases (JSON).")]
EXPERIMENT_OPTIONS = {"config": ConfigOpt, "description": DescriptionOpt, "signature": SignatureOpt,
                      "reference": ReferenceOpt, "initial_kernel": InitialOpt, "input_cases": CasesOpt}

KernelOpt = Annotated[Path | None, typer.Option("--kernel", help="The kernel file (default: the experiment's "
                                                                 "initial kernel).")]
EntryOpt = Annotated[str | None, typer.Option("--entry", help="Entry point name (default: the signature's name).")]
LaunchOpt = Annotated[str | None, typer.Option("--launch", help='Launch configuration as JSON or a JSON file: '
                                               '{"grid": [...], "block": [...], "shared_bytes": 0}, or a tier table '
                                               '{"let": {...}, "size": [...], "tiers": [...]} (docs/experiments.md; '
                                               "default: each case's own).")]
WarmupOpt = Annotated[int | None, typer.Option(help="Warm-up launches per case (default: the experiment's, 10).")]
IterationsOpt = Annotated[int | None, typer.Option(help="Timed launches per case (default: the experiment's, 100).")]
SeedOpt = Annotated[int | None, typer.Option(help="Base seed for the checked inputs (default: a fresh random "
                                                  "one).")]
JsonOpt = Annotated[Path | None, typer.Option("--json", help="Write the full result here (- for standard output; "
                                                             "the tables then go to standard error).")]
DeviceOpt = Annotated[int | None, typer.Option(help="GPU ordinal (default 0; the same as --devices N).")]
DevicesOpt = Annotated[str | None, typer.Option("--devices", help="GPUs to use, one worker each: all, or ordinals "
                                                                  "such as 0,1.")]
RayOpt = Annotated[str | None, typer.Option("--ray", help="Run the workers on a Ray cluster, one per free GPU: its "
                                                          "ADDRESS, auto (the cluster this machine is part of) or "
                                                          "local (start one here).")]
ModelOpt = Annotated[str, typer.Option(help="provider:model for LangChain's init_chat_model.")]
BaseUrlOpt = Annotated[str | None, typer.Option(help="An OpenAI-compatible server (vLLM, Ollama, llama.cpp).")]
StrategyOpt = Annotated[str, typer.Option(help="auto | agent | agent+tune | tune. auto: agent+tune when the model's "
                                               "credentials are set, tune otherwise.")]


def takes_experiment(fn):
    """Give a command the experiment flags; it receives them as ``experiment``: an
    ``ExperimentArgs`` (paths as typed, so errors name them so), or None when none was given."""
    signature = inspect.signature(fn, eval_str=True)  # typer reads the annotations as objects
    kept = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in signature.parameters.values()
            if p.name != "experiment"]  # typer passes every value by name
    added = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=kind)
             for name, kind in EXPERIMENT_OPTIONS.items()]

    @functools.wraps(fn)
    def run(*args, **kwargs):
        given = {name: kwargs.pop(name) for name in EXPERIMENT_OPTIONS}
        text = {k: (str(v) if isinstance(v, Path) else v) for k, v in given.items()}
        kwargs["experiment"] = api.ExperimentArgs(**text) if any(v is not None for v in given.values()) else None
        return fn(*args, **kwargs)

    run.__signature__ = signature.replace(parameters=[*added, *kept])  # the experiment's flags listed first
    run.__annotations__ = {p.name: p.annotation for p in run.__signature__.parameters.values()}
    return run


def to_stdout(path: Path | None) -> bool:
    """``--json -``: the result goes to standard output (and the tables to standard error)."""
    return path is not None and str(path) == "-"
