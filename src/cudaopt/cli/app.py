"""The typer app, the options several commands share, and the one mapping from errors to exit
statuses (:func:`command`): 0 pass, 1 a kernel failed, 2 bad input, 3 no GPU worker, 4 an
unexpected error (a bug, with a crash log), 5 the model kept failing, 130 interrupted.
"""

from __future__ import annotations

import contextlib
import functools
from pathlib import Path
from typing import Annotated

import typer
import typer.rich_utils
from rich.console import Console
from rich.markup import escape

from ..errors import ExperimentError, shortened
from ..pool.dispatch import WorkerError

app = typer.Typer(
    help="Turn a workload description into a fast CUDA kernel you can trust.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)

EXIT_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_NO_GPU = 3
EXIT_INTERNAL = 4
EXIT_MODEL_FAILED = 5
EXIT_INTERRUPTED = 130
PIPED_WIDTH = 240


class ModelFailed(Exception):
    """optimize stopped because the model kept failing (exit 5)."""


def console(stderr: bool = False) -> Console:
    """Made per command, so the terminal width is read when the command runs. Output that is not
    a terminal (a pipe, a CI log) gets room for the widest table: no case name is cut short."""
    made = Console(stderr=stderr, emoji=False)  # ":x:" in a path is a path, not an emoji
    return made if made.is_terminal else Console(stderr=stderr, emoji=False, width=max(made.width, PIPED_WIDTH))


def say(out: Console, line: str) -> None:
    """A plain line (no markup, no highlighting, never cut)."""
    out.print(line, markup=False, highlight=False, soft_wrap=True)


def fail(message: str, code: int = EXIT_BAD_INPUT) -> typer.Exit:
    console(stderr=True).print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)
    return typer.Exit(code)


def command(interrupted: str = "interrupted"):
    """Wrap a command so that every error a user can act on ends with one line and its exit status;
    the options' values are checked (:func:`~.flags.check_flags`) before the command does anything."""
    def wrap(fn):
        @functools.wraps(fn)
        def run(*args, **kwargs):
            from .flags import check_flags

            try:
                check_flags(fn, kwargs)
                return fn(*args, **kwargs)
            except ExperimentError as exc:
                raise fail(str(exc), EXIT_BAD_INPUT) from None
            except WorkerError as exc:  # what failed, and what to do: doctor says what is missing
                reason = str(exc).removesuffix("; log: (empty)")
                raise fail(f"{reason} — `cudaopt doctor` shows what this machine lacks; `cudaopt check` checks an "
                           "experiment without a GPU", EXIT_NO_GPU) from None
            except ModelFailed as exc:
                raise fail(str(exc), EXIT_MODEL_FAILED) from None
            except KeyboardInterrupt:
                console(stderr=True).print(interrupted, highlight=False, soft_wrap=True)
                raise typer.Exit(EXIT_INTERRUPTED) from None
        return run
    return wrap


def _usage_error(exc) -> None:
    """A mistyped option, like any bad input, is one line: what is wrong and where --help is."""
    if type(exc).__name__ == "NoArgsIsHelpError":
        return
    ctx = getattr(exc, "ctx", None)
    hint = f" (see {ctx.command_path} --help)" if ctx is not None else ""
    console(stderr=True).print(f"[bold red]error:[/] {escape(' '.join(exc.format_message().split()))}{hint}",
                               highlight=False, soft_wrap=True)


typer.rich_utils.rich_format_error = _usage_error  # typer prints these as a boxed usage screen otherwise


def _folded(highlight):
    """Option names in --help wrap instead of being cut (``--payback-window-mont…``) on a narrow terminal."""
    def fold(text):
        made = highlight(text)
        made.overflow = "fold"
        return made
    return fold


typer.rich_utils.highlighter = _folded(typer.rich_utils.highlighter)
typer.rich_utils.negative_highlighter = _folded(typer.rich_utils.negative_highlighter)


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import version

        typer.echo(f"cudaopt {version('cudaopt')}")
        raise typer.Exit()


@app.callback()
def _main(
    show_version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                               help="Print the version and exit.")] = False,
) -> None:
    """Turn a workload description into a fast CUDA kernel you can trust."""


ConfigOpt = Annotated[Path | None, typer.Option("--config", help="Experiment config file (JSON); flags override it.")]
DescriptionOpt = Annotated[str | None, typer.Option("--description", help="What the kernel computes.")]
SignatureOpt = Annotated[str | None, typer.Option("--signature", help='Kernel signature: extern "C" __global__ void name(...).')]
ReferenceOpt = Annotated[Path | None, typer.Option("--reference", help="Trusted reference: a .cu kernel or a .py NumPy function.")]
InitialOpt = Annotated[Path | None, typer.Option("--initial-kernel", help="The kernel to start from (.cu).")]
CasesOpt = Annotated[Path | None, typer.Option("--input-cases", help="Input cases (JSON).")]
DeviceOpt = Annotated[int | None, typer.Option(min=0, help="GPU ordinal (default 0; the same as --devices N).")]
DevicesOpt = Annotated[str | None, typer.Option("--devices", help="GPUs to use, one worker each: all, or ordinals "
                                                                  "such as 0,1.")]
RayOpt = Annotated[str | None, typer.Option("--ray", help="Run the workers on a Ray cluster, one per free GPU: its "
                                                          "ADDRESS, auto (the cluster this machine is part of) or "
                                                          "local (start one here).")]


def gpus_chosen(device: int | None, devices: str | None, ray: str | None) -> list[int] | None:
    """The ordinals --device, --devices and --ray ask for (None: all); bad input before any work."""
    from ..pool.devices import choose

    return choose(device, devices, ray)


@contextlib.contextmanager
def gpu_pool(chosen: list[int] | None, ray: str | None):
    """The GPU workers a command evaluates on; what left the pool is said on stderr at the end."""
    from ..pool import pools

    pool = pools.open_pool(chosen, ray)
    try:
        with pool:
            yield pool
    finally:
        for line in pool.notices:
            say(console(stderr=True), f"notice: {line}")


def checking():
    """The spinner the checks before any GPU work run under (bad input: exit 2)."""
    return console(stderr=True).status("checking the experiment…")


def preflight(exp, **kwargs):
    """The checks of ``cudaopt check``, before any GPU work (bad input: exit 2)."""
    from ..preflight import preflight as run_checks

    with checking():
        return run_checks(exp, **kwargs)


def experiment(config, description, signature, reference, initial_kernel, input_cases):
    from ..experiment import load_experiment

    return load_experiment(config, description=description, signature=signature, reference=reference,
                           initial_kernel=initial_kernel, input_cases=input_cases)


def experiment_args(config, description, signature, reference, initial_kernel, input_cases, max_iterations=None, *,
                    resolve: bool = True):
    """How the experiment was given on the command line; its paths absolute (``resolve``: what a run
    and a guard file keep), else as typed (what errors then name)."""
    from ..record.runs import ExperimentArgs

    absolute = lambda p: (str(p.resolve()) if resolve else str(p)) if p else None
    return ExperimentArgs(config=absolute(config), description=description, signature=signature,
                          reference=absolute(reference), initial_kernel=absolute(initial_kernel),
                          input_cases=absolute(input_cases), max_iterations=max_iterations)


def check_model(settings) -> None:
    """A model string the provider cannot build is bad input, before any GPU work or run directory."""
    from ..agent.model import make_chat_model

    try:
        make_chat_model(settings)
    except Exception as exc:
        raise ExperimentError(f"--model {settings.model}", "", shortened(str(exc))) from None


def resolve_strategy(requested: str, settings) -> str:
    """The strategy ``requested`` stands for (``auto``: by the model's credentials, said on stderr);
    bad input when it needs a model without credentials."""
    from .. import strategies
    from ..agent.model import credentials_problem

    if requested not in strategies.names():
        raise ExperimentError("--strategy", "", f"{requested!r} is not one of {', '.join(strategies.names())}")
    needs_model = requested == strategies.AUTO or strategies.get(requested).needs_model
    problem = credentials_problem(settings) if needs_model else None
    strategy, why = strategies.choose(requested, problem, settings.model)
    if why:
        say(console(stderr=True), f"strategy: {strategy} ({why})")
    elif problem:
        raise ExperimentError("--model", "", problem)
    return strategy
