"""``cudaopt guard record`` and ``guard check``: a kernel regression guard for CI (docs/guard.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ..errors import ExperimentError
from ..paths import check_output_path
from .app import (
    EXIT_FAILED,
    CasesOpt,
    ConfigOpt,
    DescriptionOpt,
    DeviceOpt,
    InitialOpt,
    ReferenceOpt,
    SignatureOpt,
    app,
    checking,
    command,
    console,
    experiment_args,
    gpu_pool,
    say,
)
from .flags import SEED_MAX

guard_app = typer.Typer(help="A kernel regression guard for CI: record a kernel's figures once (guard.json, "
                             "committed), then check every change against them or against the old kernel.",
                        no_args_is_help=True)
app.add_typer(guard_app, name="guard")


@guard_app.command("record")
@command()
def record(
    run_dir: Annotated[Path | None, typer.Argument(help="A run directory: record its winner (best.cu, "
                                                        "best-launch.json). Or give an experiment.")] = None,
    config: ConfigOpt = None,
    description: DescriptionOpt = None,
    signature: SignatureOpt = None,
    reference: ReferenceOpt = None,
    initial_kernel: InitialOpt = None,
    input_cases: CasesOpt = None,
    kernel: Annotated[Path | None, typer.Option("--kernel", help="The kernel to guard (default: the initial kernel).")] = None,
    entry: Annotated[str | None, typer.Option("--entry", help="Entry point name (default: the signature's name).")] = None,
    launch: Annotated[str | None, typer.Option("--launch", help="Launch configuration as JSON or a JSON file "
                                                                "(grid and block, or a tier table: let, size, tiers).")] = None,
    out: Annotated[Path, typer.Option("--out", help="The guard file to write (commit it beside the kernel).")] = Path("guard.json"),
    repeats: Annotated[int, typer.Option(min=2, help="Timed evaluations of each performance case.")] = 5,
    warmup: Annotated[int | None, typer.Option(min=0, help="Warm-up launches per case (default: the experiment's).")] = None,
    iterations: Annotated[int | None, typer.Option(min=1, help="Timed launches per case (default: the experiment's).")] = None,
    seed: Annotated[int | None, typer.Option(min=0, max=SEED_MAX, help="Base seed for the checked inputs (default: a fresh random one).")] = None,
    device: DeviceOpt = 0,
) -> None:
    """Check a kernel on every case (holdout included) and record its figures in a guard file."""
    from ..guard.record import record as run_record
    from ..record.rundir import write_atomic
    from ..trial import prepare_trial, winner_trial
    from .render_guard import guard_record_table

    checks = dict(warmup=warmup, iterations=iterations, outputs=[(out, "--out")], checking=checking)
    if run_dir is not None:
        if any(v is not None for v in (config, description, signature, reference, initial_kernel, input_cases, kernel,
                                       launch)):
            raise ExperimentError(run_dir, "", "give a run directory or an experiment (--config, --kernel, ...), "
                                               "not both")
        trial = winner_trial(run_dir, what="record", **checks)
    else:
        args = experiment_args(config, description, signature, reference, initial_kernel, input_cases)
        trial = prepare_trial(args, kernel, entry=entry, launch=launch, **checks)
    path = trial.kernel
    err = console(stderr=True)
    with gpu_pool([device], None) as supervisor, err.status("recording") as status:
        done = run_record(trial, supervisor, out=out, repeats=repeats, seed=seed, on_progress=status.update)
    show = console()
    if done.baseline is None:
        for line in done.failures:
            say(show, line)
        say(show, f"nothing recorded: {path} must pass every case first ({out} left as it was)")
        raise typer.Exit(EXIT_FAILED)
    write_atomic(out, done.baseline.to_json(indent=2) + "\n")
    show.print(guard_record_table(done.baseline, out))
    say(show, f"guard written to {out}: commit it; `cudaopt guard check {out}` checks the kernel against it")


@guard_app.command("check")
@command()
def check(
    files: Annotated[list[Path], typer.Argument(help="Guard files, e.g. guards/*.json.")],
    against: Annotated[Path | None, typer.Option("--against", help="The old kernel file: measured interleaved with "
                                                 "the current one in the same worker (one guard file only).")] = None,
    against_ref: Annotated[str | None, typer.Option("--against-ref", help="A git commit, branch or tag: the old kernel "
                                                    "as it is there (with the launch of the guard file there), "
                                                    "measured interleaved with the current one.")] = None,
    max_slowdown: Annotated[str, typer.Option("--max-slowdown", help="A regression is a slowdown beyond this, with "
                                              "confidence: a percentage (3%) or a fraction (0.03).")] = "3%",
    confidence: Annotated[float, typer.Option(min=0.5, max=0.999, help="Level of the intervals.")] = 0.95,
    repeats: Annotated[int | None, typer.Option(min=2, help="Timed evaluations (pairs, in A/B) per performance "
                                                "case (default: the guard file's; 4 with --quick).")] = None,
    quick: Annotated[bool, typer.Option("--quick", help="Fewer repeats (and, in A/B, 30 timed launches instead of "
                                        "the protocol's): faster, catches only larger regressions.")] = False,
    other_gpu: Annotated[str, typer.Option("--other-gpu", help="Without --against/--against-ref, when the figures "
                                           "were recorded on another GPU model or driver: fail, or skip the timing "
                                           "(correctness is still checked).")] = "fail",
    seed: Annotated[int | None, typer.Option(min=0, max=SEED_MAX, help="Base seed for the checked inputs (default: a fresh random one).")] = None,
    junit: Annotated[Path | None, typer.Option("--junit", help="Write JUnit XML here (one test case per experiment case).")] = None,
    markdown: Annotated[Path | None, typer.Option("--markdown", help="Write a Markdown summary here (a CI job summary).")] = None,
    json_out: Annotated[Path | None, typer.Option("--json", help="Write the full report here (- for standard output; "
                                                                 "the tables then go to standard error).")] = None,
    device: DeviceOpt = 0,
) -> None:
    """Check kernels against their guard files: correct on every case, and not slower beyond --max-slowdown."""
    from ..guard.check import Settings
    from ..guard.check import check as run_check
    from ..guard.files import GuardReport
    from ..guard.junit import junit_xml
    from ..guard.load import load_guard
    from ..record.rundir import write_atomic
    from .render_guard import guard_lines, guard_markdown, guard_table

    if against is not None and against_ref is not None:
        raise ExperimentError("--against", "", "give --against or --against-ref, not both")
    if against is not None and len(files) > 1:
        raise ExperimentError("--against", "", f"names one old kernel, but {len(files)} guard files were given "
                                               "(use --against-ref for many)")
    if other_gpu not in ("fail", "skip"):
        raise ExperimentError("--other-gpu", "", f"{other_gpu!r} is not fail or skip")
    settings = Settings(max_slowdown=_fraction(max_slowdown), confidence=confidence, repeats=repeats, quick=quick,
                        other_gpu=other_gpu, seed=seed)
    to_stdout = json_out is not None and str(json_out) == "-"
    for path, option in ((junit, "--junit"), (markdown, "--markdown"), (None if to_stdout else json_out, "--json")):
        if path is not None:
            check_output_path(path, option)
    guarded = [load_guard(f, against, against_ref) for f in files]  # every file before any GPU work
    err = console(stderr=True)
    with gpu_pool([device], None) as supervisor, err.status("checking") as status:
        checks = [run_check(g, supervisor, settings, on_progress=status.update) for g in guarded]
    report = GuardReport(passed=all(c.passed for c in checks), checks=checks)
    show = console(stderr=to_stdout)
    for done in checks:
        show.print(guard_table(done))
        for line in guard_lines(done):
            say(show, line)
    if junit is not None:
        write_atomic(junit, junit_xml(report))
    if markdown is not None:
        write_atomic(markdown, guard_markdown(report))
    if to_stdout:
        typer.echo(report.to_json(indent=2))
    elif json_out is not None:
        write_atomic(json_out, report.to_json(indent=2) + "\n")
    say(show, f"guard: {'passed' if report.passed else 'FAILED'} ({len(checks)} guard file(s))")
    if not report.passed:
        raise typer.Exit(EXIT_FAILED)


def _fraction(text: str) -> float:
    """--max-slowdown as a fraction: "3%" and "0.03" both mean 3%; "3" is refused (300% or 3%?)."""
    try:
        value = float(text.removesuffix("%")) / (100 if text.endswith("%") else 1)
    except ValueError:
        raise ExperimentError("--max-slowdown", "", f"{text!r} is not a percentage (3%) or a fraction (0.03)") from None
    if not 0 <= value < 1:
        raise ExperimentError("--max-slowdown", "", f"{text!r}: give a percentage below 100% (3%) or a fraction "
                                                    "below 1 (0.03)")
    return value
