"""The user's Python runs in child processes whose whole group is stopped: nothing it started is left running."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from cudaopt.children import run_child

STARTS_A_SLEEP = ("import subprocess, sys, time\n"
                  "p = subprocess.Popen(['sleep', '300'], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
                  "print(p.pid, flush=True)\n"
                  "{rest}")


def gone(pid: int, within_s: float = 5.0) -> bool:
    """Whether process ``pid`` has ended (a zombie waiting for init counts as ended)."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as stat:
                if stat.read().split(")")[-1].split()[0] == "Z":
                    return True
        except FileNotFoundError:
            return True
        time.sleep(0.05)
    return False


def test_a_child_that_times_out_is_stopped_with_what_it_started():
    code = STARTS_A_SLEEP.format(rest="time.sleep(300)\n")
    with pytest.raises(subprocess.TimeoutExpired) as stopped:
        run_child([sys.executable, "-c", code], input="", timeout=2)
    assert gone(int(stopped.value.stdout.split()[0]))


def test_what_a_child_started_is_stopped_when_it_ends():
    code = STARTS_A_SLEEP.format(rest="")
    done = run_child([sys.executable, "-c", code], input="", timeout=30)
    assert done.returncode == 0 and gone(int(done.stdout.split()[0]))
