"""Child processes that run the user's Python (references, KernelBench problems) on the CPU.

Each runs in a process group of its own, stopped whole when it times out and when it ends: what
the user's code started (a shell, a ``sleep``) is stopped with it, never left running. Each holds
the lifeline (compilekit/lifeline.py), so it and its group also end when this process is stopped by
a signal or killed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable

from .compilekit import lifeline

DRAIN_S = 5.0  # after a stop, how long the pipes may take to close (a process that left the group keeps them)
POLL_S = 1.0  # how often a limit that may change (a callable) is read again


def run_child(args: list[str], *, input: str, timeout: float | Callable[[], float]) -> subprocess.CompletedProcess:
    """``subprocess.run(args, input=..., capture_output=True, text=True, timeout=...)`` in a group
    of its own; ``timeout`` in seconds from the start, or a callable read again every second (a
    limit that grows once the child says what it needs). TimeoutExpired carries what the child
    wrote before it was stopped."""
    line = lifeline.spawn(group=True)
    child = lifeline.track(subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                            stderr=subprocess.PIPE, text=True, start_new_session=True,
                                            env=line.env, pass_fds=line.pass_fds), group=True)
    limit = timeout if callable(timeout) else (lambda: timeout)
    poll = POLL_S if callable(timeout) else float("inf")
    start, given = time.monotonic(), input
    try:
        while True:
            left = limit() - (time.monotonic() - start)
            try:
                out, err = child.communicate(given, timeout=max(0.0, min(left, poll)))
                break
            except subprocess.TimeoutExpired:
                given = None  # sent with the first call
                if time.monotonic() - start < limit():
                    continue
                _stop(child)
                try:
                    out, err = child.communicate(timeout=DRAIN_S)
                except subprocess.TimeoutExpired as late:
                    out, err = late.stdout or "", late.stderr or ""
                    child.kill()
                raise subprocess.TimeoutExpired(args, round(limit(), 3), output=out, stderr=err) from None
    finally:
        _stop(child)
        lifeline.forget(child)
    return subprocess.CompletedProcess(args, child.returncode, out, err)


def _stop(child: subprocess.Popen) -> None:
    try:
        os.killpg(child.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass  # the group is gone
