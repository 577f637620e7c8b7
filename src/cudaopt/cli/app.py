"""The typer app, the consoles, and the one mapping from errors to exit statuses (:func:`command`;
the README's table): 0 ok, 1 a kernel failed a case or regressed, 2 bad input, 3 no GPU worker, 4 an
unexpected error (a bug, with a crash log), 5 the model kept failing, 130 interrupted.
"""

from __future__ import annotations

import difflib
import functools
import inspect
import re
from typing import Annotated

import typer
import typer.core
import typer.rich_utils
from rich.console import Console
from rich.markup import escape

from ..errors import ExperimentError, WorkerError

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
    """Wrap a command so that every error a user can act on ends with one line and its exit status."""
    def wrap(fn):
        @functools.wraps(fn)
        def run(*args, **kwargs):
            try:
                return fn(*args, **kwargs)
            except ExperimentError as exc:
                raise fail(str(exc), EXIT_BAD_INPUT) from None
            except WorkerError as exc:  # what failed, and what to do: doctor says what is missing
                raise fail(f"{exc} — `cudaopt doctor` shows what this machine lacks; `cudaopt check` checks an "
                           "experiment without a GPU", EXIT_NO_GPU) from None
            except ModelFailed as exc:
                raise fail(str(exc), EXIT_MODEL_FAILED) from None
            except KeyboardInterrupt:
                console(stderr=True).print(interrupted, highlight=False, soft_wrap=True)
                raise typer.Exit(EXIT_INTERRUPTED) from None
        return run
    return wrap


def _usage_error(exc) -> None:
    """A mistyped option, like any bad input, is one line: what is wrong, the closest option there
    is, and where --help is."""
    if type(exc).__name__ == "NoArgsIsHelpError":
        return
    ctx = getattr(exc, "ctx", None)
    message = exc.format_message()
    option = getattr(exc, "option_name", None)
    if type(exc).__name__ == "NoSuchOption" and option and ctx is not None:
        message = f"No such option: {option}"
        known = [name for param in ctx.command.params for name in (*param.opts, *param.secondary_opts)]
        close = difflib.get_close_matches(option, known, n=1, cutoff=0.6)
        if close:
            message += f"; did you mean {close[0]}?"
    hint = f" (see {ctx.command_path} --help)" if ctx is not None else ""
    console(stderr=True).print(f"[bold red]error:[/] {escape(' '.join(message.split()))}{hint}",
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
_value_type = typer.core.TyperOption.display_type_rich
typer.core.TyperOption.display_type_rich = lambda self, ctx: None if self.is_flag else _value_type(self, ctx)
# (a flag takes no value: --help shows no <bool> beside it)


def _one_value(display_type):
    """A repeatable option or an argument of several values takes one value at a time: --help shows
    ``<float>``, not ``<list[float]>`` (which reads as if a list were typed)."""
    def shown(self, ctx):
        made = display_type(self, ctx)
        if isinstance(made, str):
            made = re.sub(r"<list\[(\w+)\]>", lambda m: f"<{m.group(1).lower()}>", made)
        return made
    return shown


typer.core.TyperOption.display_type = _one_value(typer.core.TyperOption.display_type)
typer.core.TyperArgument.display_type = _one_value(typer.core.TyperArgument.display_type)
_command_help = typer.rich_utils._make_command_help


def _flowing_command_help(*, help_text: str, markup_mode):
    """A command's line in its group's --help flows as one paragraph: the line breaks of its
    docstring are not kept (they cut the list's lines mid-sentence)."""
    first, _, rest = inspect.cleandoc(help_text).partition("\n\n")
    return _command_help(help_text=" ".join(first.split()) + ("\n\n" + rest if rest else ""), markup_mode=markup_mode)


typer.rich_utils._make_command_help = _flowing_command_help


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
