"""``cudaopt verify``, ``replay`` and ``report``: the commands that take a run directory."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from .. import api
from .app import EXIT_FAILED, app, command, console, say
from .options import DeviceOpt, DevicesOpt, RayOpt, SeedOpt
from .progress import Status
from .render_runs import replay_lines, replay_table, timed_table, verify_lines, verify_table


@app.command()
@command()
def replay(
    target: Annotated[Path, typer.Argument(metavar="RUN_DIR|best-case-N.json",
                                           help="A run directory, or one best-case-N.json request.")],
    repeats: Annotated[int, typer.Option(help="Interleaved winner/baseline measurements per case.")] = 5,
    device: DeviceOpt = None,
    devices: DevicesOpt = None,
    ray: RayOpt = None,
) -> None:
    """Measure the winner again beside the baseline; exit 1 if a check fails or the GPU/driver differ.
    On several GPUs the cases are shared out, each case's pairs on one GPU."""
    with Status("replaying") as status:
        outcome = api.replay(target, repeats=repeats, device=device, devices=devices, ray=ray, on_progress=status)
    out = console()
    out.print(replay_table(outcome))
    for line in replay_lines(outcome):
        say(out, line)
    if not outcome.passed:
        raise typer.Exit(EXIT_FAILED)


@app.command()
@command()
def verify(
    run_dir: Annotated[Path, typer.Argument(metavar="RUN_DIR", help="A run directory (results/run-NNN).")],
    cases: Annotated[Path | None, typer.Option("--cases", help="Extra input cases (JSON) besides the holdout.")] = None,
    seed: SeedOpt = None,
    sanitize: Annotated[bool, typer.Option("--sanitize", help="Also run the winner under compute-sanitizer "
                                           "(memcheck, racecheck, initcheck, synccheck) on the correctness and "
                                           "holdout cases; any error fails verification.")] = False,
    shapes: Annotated[Path | None, typer.Option("--shapes", help='Also time the winner, the baseline and the vendor '
                                                "on every shape of this file: scalar sets, or a grid such as "
                                                '{"m": [256, 4096], "n": [...], "k": [...]}, on a template case '
                                                '({"template": CASE, "shapes": ...}; default: the first performance '
                                                "case). A shape slower than the baseline beyond noise fails.")] = None,
    repeats: Annotated[int, typer.Option(help="Interleaved winner/baseline measurements per timed holdout case and "
                                              "per shape.")] = 3,
    device: DeviceOpt = None,
    devices: DevicesOpt = None,
    ray: RayOpt = None,
) -> None:
    """Check the winner on the holdout cases (and --cases) with fresh seeds, and time the holdout
    cases that declare their work (and --shapes) beside the baseline and the vendor; exit 1 on any
    failure or regression. On several GPUs the checks and the shapes are shared out."""
    with Status("verifying") as status:
        outcome = api.verify(run_dir, cases=cases, shapes=shapes, repeats=repeats, seed=seed, sanitize=sanitize,
                             device=device, devices=devices, ray=ray, on_progress=status)
    out = console()
    out.print(verify_table(outcome))
    if outcome.timed:
        out.print(timed_table(outcome))
    for line in verify_lines(outcome):
        say(out, line)
    if not outcome.passed:
        raise typer.Exit(EXIT_FAILED)


@app.command()
@command()
def report(
    run_dir: Annotated[Path, typer.Argument(metavar="RUN_DIR", help="A run directory (results/run-NNN).")],
    engineer_hours: Annotated[float | None, typer.Option(help="Engineer time spent on the pilot.")] = None,
    engineer_rate_usd: Annotated[float | None, typer.Option(help="Engineer cost per hour.")] = None,
    gpu_hour_usd: Annotated[float | None, typer.Option(help="Price of one GPU hour.")] = None,
    calls_per_month: Annotated[float | None, typer.Option(help="Kernel calls per month in production.")] = None,
    payback_window_months: Annotated[float | None, typer.Option(help="Longest acceptable payback, in months "
                                                                   "(above 0).")] = None,
    roi_case: Annotated[str | None, typer.Option(help="The case whose latency the calls pay (default: the "
                                                      "slowest).")] = None,
) -> None:
    """Rebuild report.html for a run: verdict, per-case table, charts, attempts, usage, ROI."""
    written = api.report(run_dir, engineer_hours=engineer_hours, engineer_rate_usd=engineer_rate_usd,
                         gpu_hour_usd=gpu_hour_usd, calls_per_month=calls_per_month,
                         payback_window_months=payback_window_months, roi_case=roi_case)
    say(console(), f"report written to {written}")
