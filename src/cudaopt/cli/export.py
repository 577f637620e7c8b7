"""``cudaopt export``: a run's verified winner (or a kernel given by flags) as code to ship (docs/export.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ..errors import ExperimentError
from .app import (
    CasesOpt,
    ConfigOpt,
    DescriptionOpt,
    InitialOpt,
    ReferenceOpt,
    SignatureOpt,
    app,
    command,
    console,
    experiment,
    say,
)

NEXT = {
    "torch": "import it and call {name}(...) on CUDA tensors (an operator: torch.ops.cudaopt.{name})",
    "cuda": "add {name}.cu to your nvcc or CMake build, #include \"{name}.h\" and call launch_{name}(..., stream)",
    "kernelbench": "KernelBench's evaluation loads it as ModelNew",
}


@app.command("export")
@command()
def export(
    to: Annotated[str, typer.Option("--to", help="torch (a Python module registering a PyTorch operator), cuda (a "
                                                 "header and a .cu with a host launcher) or kernelbench (ModelNew, "
                                                 "for an imported KernelBench problem).")],
    out: Annotated[Path, typer.Option("--out", help="The folder to write into (made when missing).")],
    run_dir: Annotated[Path | None, typer.Argument(help="A run directory: export its winner (best.cu, "
                                                        "best-launch.json). Or give an experiment.")] = None,
    unverified: Annotated[bool, typer.Option("--unverified", help="Export a winner that did not pass `cudaopt "
                                             "verify`, or a kernel given by flags.")] = False,
    force: Annotated[bool, typer.Option("--force", help="Replace files already in --out.")] = False,
    config: ConfigOpt = None,
    description: DescriptionOpt = None,
    signature: SignatureOpt = None,
    reference: ReferenceOpt = None,
    initial_kernel: InitialOpt = None,
    input_cases: CasesOpt = None,
    kernel: Annotated[Path | None, typer.Option("--kernel", help="The kernel to export (default: the initial "
                                                                 "kernel).")] = None,
    entry: Annotated[str | None, typer.Option("--entry", help="Entry point name (default: the signature's "
                                                              "name).")] = None,
    launch: Annotated[str | None, typer.Option("--launch", help="Launch configuration as JSON or a JSON file "
                                                                "(grid and block, or a tier table: let, size, tiers; "
                                                                "default: the input cases').")] = None,
) -> None:
    """Write a verified kernel as code that runs without cudaopt: a PyTorch operator, a CUDA launcher, or
    KernelBench's ModelNew; its header says where it came from."""
    from .. import api
    from ..exporter import TARGETS

    if to not in TARGETS:
        raise ExperimentError("--to", "", f"{to!r} is not one of {', '.join(TARGETS)}")
    flags = (config, description, signature, reference, initial_kernel, input_cases, kernel, entry, launch)
    if run_dir is not None and any(v is not None for v in flags):
        raise ExperimentError(run_dir, "", "give a run directory or an experiment (--config, --kernel, ...), not both")
    exp = None if run_dir is not None else experiment(config, description, signature, reference, initial_kernel,
                                                      input_cases)
    paths = api.export(run_dir, to=to, out=out, experiment=exp, kernel=kernel, entry=entry, launch=launch,
                       unverified=unverified, force=force)
    shown = console()
    for path in paths:
        say(shown, f"wrote {path}")
    name = paths[0].name.split(".")[0].removesuffix("_model_new")
    say(shown, "next: " + NEXT[to].format(name=name))
