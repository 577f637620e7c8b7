"""``cudaopt audit``: a fleet of experiments ranked by what optimising each kernel would return."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from .. import api
from .app import EXIT_FAILED, app, command, console, say
from .options import BaseUrlOpt, DeviceOpt, DevicesOpt, ModelOpt, RayOpt, StrategyOpt
from .progress import Status
from .render_audit import audit_table


@app.command()
@command(interrupted="interrupted: audit.json holds what was measured and every finished run")
def audit(
    source: Annotated[Path, typer.Argument(metavar="DIR|LIST", help="A folder of experiments (every experiment.json "
                                                                    "below it), or a list file: one config path a "
                                                                    "line.")],
    out: Annotated[Path | None, typer.Option("--out", help="Where audit.json, audit.html and the runs go "
                                                           "(default: the next results/audit-NNN).")] = None,
    roof_target: Annotated[float, typer.Option(help="The share of its bounding roof a tuned kernel is assumed to "
                                                    "reach, when no faster vendor shows the way (0.01 to 1).")] = 0.7,
    optimize: Annotated[bool, typer.Option("--optimize", help="Then run --strategy on the --top experiments with "
                                           "headroom, within the total budget.")] = False,
    top: Annotated[int, typer.Option(help="How many experiments --optimize runs.")] = 3,
    strategy: StrategyOpt = "auto",
    max_cost_usd: Annotated[float | None, typer.Option(help="Total model cost of the runs.")] = None,
    time_limit: Annotated[float | None, typer.Option(help="Total wall time of the audit, in seconds.")] = None,
    max_iterations: Annotated[int | None, typer.Option(help="Iterations per run (default: each "
                                                            "experiment's).")] = None,
    max_evals: Annotated[int, typer.Option(help="Configurations the tuner may evaluate per run.")] = 40,
    model: ModelOpt = "openai:gpt-5-mini",
    base_url: BaseUrlOpt = None,
    device: DeviceOpt = None,
    devices: DevicesOpt = None,
    ray: RayOpt = None,
) -> None:
    """Measure every experiment's kernel beside its vendor baseline (the vendor alone without an initial
    kernel), estimate its headroom and return on investment, rank the fleet; exit 1 when an experiment
    fails to load or its kernel fails its own experiment (the others are still measured)."""
    with Status("loading the fleet") as status:
        done = api.audit(source, out=out, roof_target=roof_target, optimize=optimize, top=top, strategy=strategy,
                         max_cost_usd=max_cost_usd, time_limit=time_limit, max_iterations=max_iterations,
                         max_evals=max_evals, model=model, base_url=base_url, device=device, devices=devices, ray=ray,
                         on_progress=status)
    show = console()
    show.print(audit_table(done.report))
    for entry in done.report.entries:
        if entry.status != "ok":
            say(show, f"{entry.name}: {entry.status}: {entry.reason[:300]}")
        elif entry.note.startswith("optimisation stopped"):
            say(show, f"{entry.name}: {entry.note}")
    say(show, f"fleet report: {done.folder / 'audit.html'}")
    if any(e.status != "ok" for e in done.report.entries):
        raise typer.Exit(EXIT_FAILED)
