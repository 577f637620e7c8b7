"""``cudaopt audit``: a fleet of experiments ranked by what optimising each kernel would return."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ..errors import ExperimentError
from .app import (
    EXIT_FAILED,
    DeviceOpt,
    DevicesOpt,
    RayOpt,
    app,
    check_model,
    command,
    console,
    gpu_pool,
    gpus_chosen,
    preflight,
    resolve_strategy,
    say,
)
from .flags import check_writable_folder


@app.command()
@command(interrupted="interrupted: audit.json holds what was measured and every finished run")
def audit(
    source: Annotated[Path, typer.Argument(help="A folder of experiments (every experiment.json below it), or a "
                                                "list file: one config path a line.")],
    out: Annotated[Path | None, typer.Option("--out", help="Where audit.json, audit.html and the runs go "
                                                           "(default: the next results/audit-NNN).")] = None,
    roof_target: Annotated[float, typer.Option(min=0.01, max=1.0, help="The share of its bounding roof a tuned "
                                               "kernel is assumed to reach, when no faster vendor shows the way.")] = 0.7,
    optimize: Annotated[bool, typer.Option("--optimize", help="Then run --strategy on the --top experiments with "
                                           "headroom, within the total budget.")] = False,
    top: Annotated[int, typer.Option(min=1, help="How many experiments --optimize runs.")] = 3,
    strategy: Annotated[str, typer.Option(help="auto | agent | agent+tune | tune, as for optimize.")] = "auto",
    max_cost_usd: Annotated[float | None, typer.Option(min=0, help="Total model cost of the runs.")] = None,
    time_limit: Annotated[float | None, typer.Option(min=1, help="Total wall time of the audit, in seconds.")] = None,
    max_iterations: Annotated[int | None, typer.Option(min=1, help="Iterations per run (default: each "
                                                                   "experiment's).")] = None,
    max_evals: Annotated[int, typer.Option(min=1, help="Configurations the tuner may evaluate per run.")] = 40,
    model: Annotated[str, typer.Option(help="provider:model for the agent strategies.")] = "openai:gpt-5-mini",
    base_url: Annotated[str | None, typer.Option(help="An OpenAI-compatible server.")] = None,
    device: DeviceOpt = None,
    devices: DevicesOpt = None,
    ray: RayOpt = None,
) -> None:
    """Measure every experiment's kernel beside its vendor baseline (the vendor alone without an initial
    kernel), estimate its headroom and return on investment, rank the fleet; exit 1 when an experiment
    fails to load or its kernel fails its own experiment (the others are still measured)."""
    from ..agent.model import ModelSettings
    from ..fleet.audit import Plan, load_fleet
    from ..fleet.audit import audit as run_audit
    from ..fleet.files import create_audit_dir
    from .render_audit import audit_table

    chosen = gpus_chosen(device, devices, ray)
    members = load_fleet(source)
    plan = None
    if optimize:
        settings = ModelSettings(model=model, base_url=base_url)
        name = resolve_strategy(strategy, settings)
        if name != "tune":
            check_model(settings)
        plan = Plan(strategy=name, top=top, max_cost_usd=max_cost_usd, time_limit_s=time_limit,
                    max_iterations=max_iterations, settings=settings, options={"max_evals": max_evals})
    elif max_cost_usd is not None or time_limit is not None:
        raise ExperimentError("--max-cost-usd" if max_cost_usd is not None else "--time-limit", "",
                              "budgets the runs of --optimize; give --optimize too")
    if out is not None and out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ExperimentError("--out", "", f"{out}: exists and is not an empty folder")
    if out is not None:
        check_writable_folder(out, "--out")
    for member in members:  # a member that fails its checks is its row's outcome, not the audit's end
        if not member.error:
            try:
                preflight(member.experiment)
            except ExperimentError as exc:
                member.error = str(exc)
    failed = [m for m in members if m.error]
    if members and len(failed) == len(members):  # nothing to measure: say why before any GPU work
        more = f" (and {len(failed) - 1} more kernel(s) that fail their checks)" if len(failed) > 1 else ""
        raise ExperimentError(source, "", f"no kernel of the fleet can be measured: {failed[0].error}{more}")
    err = console(stderr=True)
    with gpu_pool(chosen, ray) as pool:
        gpus = pool.gpus()  # the workers start before anything is written
        folder = out or create_audit_dir(Path("results"))
        folder.mkdir(parents=True, exist_ok=True)
        with err.status(f"measuring {len(members)} kernel(s) on {len(gpus)} GPU(s)…"):
            report = run_audit(members, pool, folder, source, roof_target=roof_target, plan=plan,
                               on_line=lambda line: say(err, line))
    out_console = console()
    out_console.print(audit_table(report))
    for entry in report.entries:
        if entry.status != "ok":
            say(out_console, f"{entry.name}: {entry.status}: {entry.reason[:300]}")
        elif entry.note.startswith("optimisation stopped"):
            say(out_console, f"{entry.name}: {entry.note}")
    say(out_console, f"fleet report: {folder / 'audit.html'}")
    if any(e.status != "ok" for e in report.entries):
        raise typer.Exit(EXIT_FAILED)
