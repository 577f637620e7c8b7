"""The ``cudaopt`` command line: commands parse their options and call the core.

One module per group of commands; tables come from render_*.py, one per group; errors become exit statuses in
one place (app.command). ``main`` is the console entry point.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from rich.markup import escape

from . import audit, experiments, export, guard, kernelbench, runs, tools  # noqa: F401  (the commands register themselves)
from .app import EXIT_INTERNAL, EXIT_INTERRUPTED, app, console

__all__ = ["app", "console", "main"]


def main() -> None:
    """The console entry point. An unexpected error (a bug) never ends in a traceback: one line
    says what happened and names a log file holding the traceback; exit status 4."""
    try:
        app(prog_name="cudaopt")
    except SystemExit:
        raise
    except KeyboardInterrupt:
        console(stderr=True).print("interrupted")
        sys.exit(EXIT_INTERRUPTED)
    except Exception as exc:
        log = crash_log(exc)
        text = " ".join(str(exc).split())[:300] or "(no message)"
        console(stderr=True).print(f"[bold red]error:[/] unexpected {type(exc).__name__}: {escape(text)} "
                                   f"(a bug: the traceback is in {log})", highlight=False, soft_wrap=True)
        sys.exit(EXIT_INTERNAL)


def crash_log(exc: BaseException) -> Path:
    """Write the traceback of ``exc`` to a new file under the cache directory; its path."""
    import datetime as dt
    import traceback

    from ..paths import cache_root

    folder = cache_root() / "crashes"
    folder.mkdir(parents=True, exist_ok=True)
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    path = folder / f"crash-{stamp}-{os.getpid()}.log"
    path.write_text(f"cudaopt {' '.join(sys.argv[1:])}\n" + "".join(traceback.format_exception(exc)))
    return path
