"""Child processes that run the user's Python (references, KernelBench problems) on the CPU.

Each runs in a process group of its own, stopped whole when it times out and when it ends: what
the user's code started (a shell, a ``sleep``) is stopped with it, never left running.
"""

from __future__ import annotations

import os
import signal
import subprocess

DRAIN_S = 5.0  # after a stop, how long the pipes may take to close (a process that left the group keeps them)


def run_child(args: list[str], *, input: str, timeout: float) -> subprocess.CompletedProcess:
    """``subprocess.run(args, input=..., capture_output=True, text=True, timeout=...)`` in a group
    of its own; TimeoutExpired carries what the child wrote before it was stopped."""
    child = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             start_new_session=True)
    try:
        out, err = child.communicate(input, timeout=timeout)
    except subprocess.TimeoutExpired:
        _stop(child)
        try:
            out, err = child.communicate(timeout=DRAIN_S)
        except subprocess.TimeoutExpired as late:
            out, err = late.stdout or "", late.stderr or ""
            child.kill()
        raise subprocess.TimeoutExpired(args, timeout, output=out, stderr=err) from None
    finally:
        _stop(child)
    return subprocess.CompletedProcess(args, child.returncode, out, err)


def _stop(child: subprocess.Popen) -> None:
    try:
        os.killpg(child.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass  # the group is gone
