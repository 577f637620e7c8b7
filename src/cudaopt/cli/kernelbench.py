"""``cudaopt import kernelbench`` and ``cudaopt fast-p``: KernelBench problems in, KernelBench metrics out."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from .. import api
from .app import app, command, console, say
from .options import JsonOpt, to_stdout
from .progress import Status
from .render_kernelbench import fast_p_tables

imports = typer.Typer(help="Turn a problem written for another benchmark into a cudaopt experiment.",
                      no_args_is_help=True)
app.add_typer(imports, name="import")


@imports.command("kernelbench")
@command()
def kernelbench(
    problem: Annotated[Path, typer.Argument(metavar="PROBLEM", help="A KernelBench problem file (Model, get_inputs, "
                                                                     "get_init_inputs).")],
    out: Annotated[Path, typer.Option("--out", help="The experiment directory to write.")],
    name: Annotated[str | None, typer.Option(help="The kernel's name (default: from the file name).")] = None,
    seed: Annotated[int, typer.Option(help="Seed of the Model's construction (KernelBench's: 42).")] = 42,
    rtol: Annotated[float | None, typer.Option(help="Relative tolerance of every output (default: the problem's "
                                                    "TASK_CONFIG, else KernelBench's 1e-2).")] = None,
    atol: Annotated[float | None, typer.Option(help="Absolute tolerance of every output (default: the problem's "
                                                    "TASK_CONFIG, else KernelBench's 1e-2).")] = None,
    force: Annotated[bool, typer.Option("--force", help="Replace the experiment files already in --out.")] = False,
    time_limit: Annotated[float | None, typer.Option(help="Most seconds the import may take (default 1800): the "
                                                          "problem runs in a process of its own, stopped at the "
                                                          "limit its sizes need, at most this.")] = None,
) -> None:
    """Write a complete experiment for a KernelBench problem: the PyTorch reference, PyTorch eager and
    torch.compile as vendors, the problem's sizes as the performance case, smaller odd correctness
    cases and a holdout; no initial kernel (a model writes the first one)."""
    with Status(f"importing {problem.name}"):
        imported = api.import_kernelbench(problem, out, name=name, seed=seed, rtol=rtol, atol=atol, force=force,
                                          time_limit=time_limit)
    exp = imported.experiment
    shown = console()
    say(shown, f"imported {problem.name} into {out}: {exp.signature}")
    for case in exp.case_specs:
        say(shown, f"  {case.role:<11} {case.name}: {case.scalars}")
    for note in imported.notes:
        say(shown, f"note: {note}")
    for change in exp.kernelbench.changes if exp.kernelbench else []:
        say(shown, f"stricter than KernelBench, so that the case discriminates: {change}")
    say(shown, f"next: cudaopt check --config {out / 'experiment.json'}; then cudaopt optimize --config "
               f"{out / 'experiment.json'} --strategy agent")


@app.command("fast-p")
@command()
def fast_p(
    runs: Annotated[list[Path], typer.Argument(metavar="RUN_DIR", help="Run directories, or results folders holding "
                                                                       "run-NNN directories (one run per problem).")],
    p: Annotated[list[float] | None, typer.Option("--p", help="Speed-up thresholds (repeatable; default 0, 1, 1.5, "
                                                              "2).")] = None,
    baseline: Annotated[str, typer.Option(help="eager | compile: the PyTorch baseline of the speed-ups.")] = "eager",
    json_out: JsonOpt = None,
) -> None:
    """KernelBench's fast_p over a set of runs: the fraction correct and faster than PyTorch by more than p."""
    stdout = to_stdout(json_out)
    result = api.fast_p(runs, p=p, baseline=baseline, json_out=None if stdout else json_out)
    shown = console(stderr=stdout)
    for table in fast_p_tables(result):
        shown.print(table)
    if stdout:
        typer.echo(result.to_json(indent=2))
    elif json_out:
        say(shown, f"metrics written to {json_out}")
