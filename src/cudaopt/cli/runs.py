"""``cudaopt verify``, ``replay`` and ``report``: the commands that take a run directory."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ..errors import ExperimentError
from .app import EXIT_FAILED, DeviceOpt, DevicesOpt, RayOpt, app, command, console, gpu_pool, gpus_chosen, say
from .flags import SEED_MAX, writable


@app.command()
@command()
def replay(
    target: Annotated[Path, typer.Argument(help="A run directory, or one best-case-N.json request.")],
    repeats: Annotated[int, typer.Option(min=1, help="Interleaved winner/baseline measurements per case.")] = 5,
    device: DeviceOpt = None,
    devices: DevicesOpt = None,
    ray: RayOpt = None,
) -> None:
    """Measure the winner again beside the baseline; exit 1 if a check fails or the GPU/driver differ.
    On several GPUs the cases are shared out, each case's pairs on one GPU."""
    from ..report.build import build
    from ..winner.replay import load_target
    from ..winner.replay import replay as run_replay
    from .render_runs import replay_lines, replay_table

    loaded = load_target(target)  # read once, before any GPU work
    with gpu_pool(gpus_chosen(device, devices, ray), ray) as pool:
        outcome = run_replay(loaded, pool, repeats)
    out = console()
    out.print(replay_table(outcome))
    for line in replay_lines(outcome):
        say(out, line)
    if target.is_dir() and (target / "summary.json").is_file():
        build(target)  # the report's verdict reads replay.json
    if not outcome.passed:
        raise typer.Exit(EXIT_FAILED)


@app.command()
@command()
def verify(
    run_dir: Annotated[Path, typer.Argument(help="A run directory (results/run-NNN).")],
    cases: Annotated[Path | None, typer.Option("--cases", help="Extra input cases (JSON) besides the holdout.")] = None,
    seed: Annotated[int | None, typer.Option(min=0, max=SEED_MAX, help="Base seed for the inputs (default: a fresh random one).")] = None,
    sanitize: Annotated[bool, typer.Option("--sanitize", help="Also run the winner under compute-sanitizer "
                                           "(memcheck, racecheck, initcheck, synccheck) on the correctness and "
                                           "holdout cases; any error fails verification.")] = False,
    shapes: Annotated[Path | None, typer.Option("--shapes", help='Also time the winner, the baseline and the vendor '
                                                "on every shape of this file: scalar sets, or a grid such as "
                                                '{"m": [256, 4096], "n": [...], "k": [...]}, on a template case '
                                                '({"template": CASE, "shapes": ...}; default: the first performance '
                                                "case). A shape slower than the baseline beyond noise fails.")] = None,
    repeats: Annotated[int, typer.Option(min=1, help="Interleaved winner/baseline measurements per timed holdout "
                                                     "case and per shape.")] = 3,
    device: DeviceOpt = None,
    devices: DevicesOpt = None,
    ray: RayOpt = None,
) -> None:
    """Check the winner on the holdout cases (and --cases) with fresh seeds, and time the holdout
    cases that declare their work (and --shapes) beside the baseline and the vendor; exit 1 on any
    failure or regression. On several GPUs the checks and the shapes are shared out."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from ..report.build import build
    from ..winner.verify import prepare
    from ..winner.verify import verify as run_verify
    from .render_runs import timed_table, verify_lines, verify_table

    err = console(stderr=True)
    chosen = gpus_chosen(device, devices, ray)
    prepared = prepare(run_dir, cases, shapes)  # read once, before any GPU work
    if sanitize:
        from ..winner.sanitize import find_sanitizer

        if ray is not None:
            raise ExperimentError("--sanitize", "", "runs compute-sanitizer on this machine's GPU; it does not "
                                                    "combine with --ray")
        find_sanitizer()  # before any GPU work: a missing tool is bad input, exit 2
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with gpu_pool(chosen, ray) as pool, Progress(*columns, console=err, transient=True) as bar:
        task = bar.add_task("verifying", total=None)

        def step(what: str, done: int, total: int) -> None:
            bar.update(task, description=f"timing {what}", completed=done, total=total)

        outcome = run_verify(run_dir, pool, cases, seed, sanitize_device=pool.gpus()[0].index if sanitize else None,
                             on_tool=lambda tool: bar.update(task, description=f"compute-sanitizer --tool {tool}"),
                             shapes=shapes, repeats=repeats, on_step=step, prepared=prepared)
    out = console()
    out.print(verify_table(outcome))
    if outcome.timed:
        out.print(timed_table(outcome))
    for line in verify_lines(outcome, run_dir):
        say(out, line)
    if (run_dir / "summary.json").is_file():
        build(run_dir)  # the report's verdict reads verify.json
    if not outcome.passed:
        raise typer.Exit(EXIT_FAILED)


@app.command()
@command()
def report(
    run_dir: Annotated[Path, typer.Argument(help="A run directory (results/run-NNN).")],
    engineer_hours: Annotated[float | None, typer.Option(min=0, help="Engineer time spent on the pilot.")] = None,
    engineer_rate_usd: Annotated[float | None, typer.Option(min=0, help="Engineer cost per hour.")] = None,
    gpu_hour_usd: Annotated[float | None, typer.Option(min=0, help="Price of one GPU hour.")] = None,
    calls_per_month: Annotated[float | None, typer.Option(min=0, help="Kernel calls per month in production.")] = None,
    payback_window_months: Annotated[float | None, typer.Option(help="Longest acceptable payback, in months "
                                                                   "(above 0).")] = None,
    roi_case: Annotated[str | None, typer.Option(help="The case whose latency the calls pay (default: the slowest).")] = None,
) -> None:
    """Rebuild report.html for a run: verdict, per-case table, charts, attempts, usage, ROI."""
    from pydantic import ValidationError

    from ..config import RoiInputs
    from ..errors import validation_message
    from ..record.runs import open_run, read_run_json
    from ..record.files import Summary
    from ..report.build import build, run_roi

    if not (run_dir / "summary.json").is_file() or not (run_dir / "history.json").is_file():
        raise ExperimentError(run_dir, "", "not a run directory (no summary.json)")
    if not writable(run_dir):
        raise ExperimentError(run_dir, "", "not writable: report.html is written in the run directory")
    if roi_case is not None:
        cases = [c.name for c in read_run_json(open_run(run_dir), "summary.json", Summary).cases]
        if roi_case not in cases:
            raise ExperimentError("--roi-case", "", f"{roi_case!r} is not a case of the run ({', '.join(cases)})")
    given = {"engineer_hours": engineer_hours, "engineer_rate_usd": engineer_rate_usd, "gpu_hour_usd": gpu_hour_usd,
             "calls_per_month": calls_per_month, "payback_window_months": payback_window_months, "case": roi_case}
    base = run_roi(open_run(run_dir)).model_dump()
    try:
        inputs = RoiInputs(**{**base, **{k: v for k, v in given.items() if v is not None}})
    except ValidationError as exc:
        field, message = validation_message(exc)
        raise ExperimentError(f"--{field.replace('_', '-')}" if given.get(field) is not None else run_dir,
                              "" if given.get(field) is not None else f"roi.{field}", message) from None
    try:
        written = build(run_dir, inputs)
    except PermissionError as exc:  # writable by the check above, yet refused (a mount's rules, say)
        raise ExperimentError(run_dir, "", f"report.html cannot be written: {exc.strerror}") from None
    say(console(), f"report written to {written}")
