"""``cudaopt guard record`` and ``guard check``: a kernel regression guard for CI (docs/guard.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from .. import api
from .app import EXIT_FAILED, app, command, console, say
from .options import EntryOpt, IterationsOpt, JsonOpt, KernelOpt, LaunchOpt, SeedOpt, WarmupOpt, takes_experiment, \
    to_stdout
from .progress import Status
from .render_guard import guard_record_table, guard_table

guard_app = typer.Typer(help="A kernel regression guard for CI: record a kernel's figures once (guard.json, "
                             "committed), then check every change against them or against the old kernel.",
                        no_args_is_help=True)
app.add_typer(guard_app, name="guard")
GuardDeviceOpt = Annotated[int, typer.Option(help="GPU ordinal.")]


@guard_app.command("record")
@command()
@takes_experiment
def record(
    experiment,
    run_dir: Annotated[Path | None, typer.Argument(metavar="RUN_DIR", help="A run directory: record its winner "
                                                                           "(best.cu, best-launch.json). Or give an "
                                                                           "experiment.")] = None,
    kernel: KernelOpt = None,
    entry: EntryOpt = None,
    launch: LaunchOpt = None,
    out: Annotated[Path, typer.Option("--out", help="The guard file to write (commit it beside the kernel).")] = Path(
        "guard.json"),
    repeats: Annotated[int, typer.Option(help="Timed evaluations of each performance case (at least 2).")] = 5,
    warmup: WarmupOpt = None,
    iterations: IterationsOpt = None,
    seed: SeedOpt = None,
    device: GuardDeviceOpt = 0,
) -> None:
    """Check a kernel on every case (holdout included) and record its figures in a guard file."""
    with Status("recording") as status:
        done = api.guard_record(run_dir, experiment=experiment, kernel=kernel, entry=entry, launch=launch, out=out,
                                repeats=repeats, warmup=warmup, iterations=iterations, seed=seed, device=device,
                                on_progress=status)
    show = console()
    if done.baseline is None:
        for line in done.failures:
            say(show, line)
        say(show, f"nothing recorded: the kernel must pass every case first ({out} left as it was)")
        raise typer.Exit(EXIT_FAILED)
    show.print(guard_record_table(done.baseline, out))
    say(show, f"guard written to {out}: commit it; `cudaopt guard check {out}` checks the kernel against it")


@guard_app.command("check")
@command()
def check(
    files: Annotated[list[Path], typer.Argument(metavar="FILES", help="Guard files, e.g. guards/*.json.")],
    against: Annotated[Path | None, typer.Option("--against", help="The old kernel file: measured interleaved with "
                                                 "the current one in the same worker (one guard file only).")] = None,
    against_ref: Annotated[str | None, typer.Option("--against-ref", help="A git commit, branch or tag: the old kernel "
                                                    "as it is there (with the launch of the guard file there), "
                                                    "measured interleaved with the current one.")] = None,
    max_slowdown: Annotated[str, typer.Option("--max-slowdown", help="A regression is a slowdown beyond this, with "
                                              "confidence: a percentage (3%) or a fraction (0.03).")] = "3%",
    confidence: Annotated[float, typer.Option(help="Level of the intervals (0.5 to 0.999).")] = 0.95,
    repeats: Annotated[int | None, typer.Option(help="Timed evaluations (pairs, in A/B) per performance case "
                                                     "(default: the guard file's; 4 with --quick).")] = None,
    quick: Annotated[bool, typer.Option("--quick", help="Fewer repeats (and, in A/B, 30 timed launches instead of "
                                        "the protocol's): faster, catches only larger regressions.")] = False,
    other_gpu: Annotated[str, typer.Option("--other-gpu", help="Without --against/--against-ref, when the figures "
                                           "were recorded on another GPU model or driver: fail, or skip the timing "
                                           "(correctness is still checked).")] = "fail",
    seed: SeedOpt = None,
    junit: Annotated[Path | None, typer.Option("--junit", help="Write JUnit XML here (one test case per experiment "
                                                               "case).")] = None,
    markdown: Annotated[Path | None, typer.Option("--markdown", help="Write a Markdown summary here (a CI job "
                                                                     "summary).")] = None,
    json_out: JsonOpt = None,
    device: GuardDeviceOpt = 0,
) -> None:
    """Check kernels against their guard files: correct on every case, and not slower beyond --max-slowdown."""
    stdout = to_stdout(json_out)
    with Status("checking") as status:
        report = api.guard_check(files, against=against, against_ref=against_ref, max_slowdown=max_slowdown,
                                 confidence=confidence, repeats=repeats, quick=quick, other_gpu=other_gpu, seed=seed,
                                 junit=junit, markdown=markdown, json_out=None if stdout else json_out, device=device,
                                 on_progress=status)
    show = console(stderr=stdout)
    for done in report.checks:
        show.print(guard_table(done))
        for line in done.lines():
            say(show, line)
    if stdout:
        typer.echo(report.to_json(indent=2))
    say(show, f"guard: {'passed' if report.passed else 'FAILED'} ({len(report.checks)} guard file(s))")
    if not report.passed:
        raise typer.Exit(EXIT_FAILED)
