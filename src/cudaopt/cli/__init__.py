"""The ``cudaopt`` command line: a thin shell over the Python API (``cudaopt.api``). Each command
parses its flags, makes one API call and renders what comes back; every check lives behind the API.

One module per group of commands; tables come from render_*.py, one per group; errors become exit
statuses in one place (app.command). ``main`` is the console entry point.
"""

from __future__ import annotations

import sys

from rich.markup import escape

from .. import api
from . import audit, experiments, export, guard, kernelbench, runs, tools  # noqa: F401  (the commands register themselves)
from .app import EXIT_INTERNAL, EXIT_INTERRUPTED, app, console

__all__ = ["app", "console", "main"]


def main() -> None:
    """The console entry point. An unexpected error (a bug) never ends in a traceback: one line
    says what happened and names a log file holding the traceback; exit status 4. Nothing here may
    fail in turn: text that is no valid UTF-8 (a file name in another encoding) is printed escaped."""
    try:
        app(prog_name="cudaopt")
    except SystemExit:
        raise
    except KeyboardInterrupt:
        console(stderr=True).print("interrupted")
        sys.exit(EXIT_INTERRUPTED)
    except Exception as exc:
        where = _crash_log(exc)
        text = " ".join(str(exc).split())[:300] or "(no message)"
        line = f"error: unexpected {type(exc).__name__}: {text} (a bug: {where})"
        line = line.encode("utf-8", "backslashreplace").decode("utf-8")  # a name in another encoding, escaped
        try:
            console(stderr=True).print(f"[bold red]error:[/] {escape(line.removeprefix('error: '))}", highlight=False,
                                       soft_wrap=True)
        except Exception:  # a terminal that cannot take the text as it is
            sys.stderr.write(line.encode("ascii", "backslashreplace").decode("ascii") + "\n")
        sys.exit(EXIT_INTERNAL)


def _crash_log(exc: BaseException) -> str:
    """Where the traceback was written, in words; what went wrong when it could not be."""
    try:
        return f"the traceback is in {api.crash_log(exc, sys.argv[1:])}"
    except Exception as failed:  # a full disk, a cache folder that cannot be made
        return f"its traceback could not be written ({type(failed).__name__}: {failed})"
