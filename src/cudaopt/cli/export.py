"""``cudaopt export``: a run's verified winner (or a kernel given by flags) as code to ship (docs/export.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from .. import api
from .app import app, command, console, say
from .options import EntryOpt, KernelOpt, LaunchOpt, takes_experiment

NEXT = {
    "torch": "import it and call {name}(...) on CUDA tensors (an operator: torch.ops.cudaopt.{name})",
    "cuda": "add {name}.cu to your nvcc or CMake build, #include \"{name}.h\" and call launch_{name}(..., stream)",
    "kernelbench": "KernelBench's evaluation loads it as ModelNew",
}


@app.command("export")
@command()
@takes_experiment
def export(
    experiment,
    to: Annotated[str, typer.Option("--to", help="torch (a Python module registering a PyTorch operator), cuda (a "
                                                 "header and a .cu with a host launcher) or kernelbench (ModelNew, "
                                                 "for an imported KernelBench problem).")],
    out: Annotated[Path, typer.Option("--out", help="The folder to write into (made when missing).")],
    run_dir: Annotated[Path | None, typer.Argument(metavar="RUN_DIR", help="A run directory: export its winner "
                                                                           "(best.cu, best-launch.json). Or give an "
                                                                           "experiment.")] = None,
    unverified: Annotated[bool, typer.Option("--unverified", help="Export a winner that did not pass `cudaopt "
                                             "verify`, or a kernel given by flags.")] = False,
    force: Annotated[bool, typer.Option("--force", help="Replace files already in --out.")] = False,
    kernel: KernelOpt = None,
    entry: EntryOpt = None,
    launch: LaunchOpt = None,
) -> None:
    """Write a verified kernel as code that runs without cudaopt: a PyTorch operator, a CUDA launcher, or
    KernelBench's ModelNew; its header says where it came from."""
    if run_dir is None and experiment is None and any(v is not None for v in (kernel, entry, launch)):
        experiment = api.ExperimentArgs()  # a kernel without the experiment flags: the experiment's fields are missing
    paths = api.export(run_dir, to=to, out=out, experiment=experiment, kernel=kernel, entry=entry, launch=launch,
                       unverified=unverified, force=force)
    shown = console()
    for path in paths:
        say(shown, f"wrote {path}")
    name = paths[0].name.split(".")[0].removesuffix("_model_new")
    say(shown, "next: " + NEXT[to].format(name=name))
