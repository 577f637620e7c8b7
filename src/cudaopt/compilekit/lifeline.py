"""Every child process ends with the process that started it, however that one ends.

A child cudaopt starts (a GPU worker, a compiler process, the user's Python run on the CPU, a
KernelBench import) must not outlive its parent: a parent stopped with SIGTERM (``timeout``, a CI
runner, a job scheduler), SIGHUP (a closed terminal) or SIGKILL would otherwise leave it running,
reparented to init, holding a CPU or a GPU. Three mechanisms, each covering what the others miss:

- **the lifeline** (every POSIX system): the parent holds the write end of a pipe for as long as it
  lives and gives every child the read end (:func:`spawn`); the child's :func:`hold` waits on it
  in a thread, and when the parent is gone (the kernel closes the write end, whatever killed it)
  ends itself, and its whole process group when it leads one (what the user's code started);
- **PR_SET_PDEATHSIG** (Linux): a child that leads no group and was started from its parent's
  main thread (the signal follows the thread that started it) is also sent SIGKILL by the kernel
  when its parent dies, even while its own threads cannot run;
- **the parent's handler** (installed when this module is imported, and again by :func:`spawn`,
  from the main thread, where SIGTERM and SIGHUP still have their default action): it kills every
  child and group it started, then ends by the same signal, so its exit status still says what
  stopped it; a process that started nothing ends as it would have without it.
"""

from __future__ import annotations

import os
import signal
import stat
import sys
import threading

# kept to the few modules a process imports anyway: a worker imports this first, on every start

ENV = "CUDAOPT_LIFELINE"  # "<read fd>:<pdeathsig 0|1>", for the child's hold()
STOPPING = (signal.SIGTERM, signal.SIGHUP)
_PR_SET_PDEATHSIG = 1

_lock = threading.RLock()  # the handler may run while the main thread holds it
_pipe: tuple[int, int] | None = None  # this process's lifeline: (read end, write end), open until it exits
_children: dict[int, bool] = {}  # pid -> whether it leads a process group of its own
_handled: set[int] = set()  # the signals whose handler is installed


class Spawn:
    """What ``subprocess.Popen`` needs for a child that holds the lifeline: its environment (the
    caller's, with :data:`ENV` added) and the descriptor it inherits."""

    __slots__ = ("env", "pass_fds")

    def __init__(self, env: dict[str, str], pass_fds: tuple[int, ...]):
        self.env, self.pass_fds = env, pass_fds


def spawn(env: dict[str, str] | None = None, *, group: bool = False, direct: bool = True) -> Spawn:
    """The lifeline for a child about to start: ``group`` when it will lead a process group of its
    own (``start_new_session``), ``direct`` False when another program starts it (a profiler), so
    its parent is not this process. Installs the parent's handler where it can (:func:`_install`)."""
    global _pipe
    with _lock:
        if _pipe is None:
            _pipe = os.pipe()  # not inheritable: only children given the read end (pass_fds) hold it
    _install()
    pdeathsig = direct and not group and threading.current_thread() is threading.main_thread()
    made = dict(os.environ if env is None else env)
    made[ENV] = f"{_pipe[0]}:{int(pdeathsig)}"
    return Spawn(env=made, pass_fds=(_pipe[0],))


def track(proc, *, group: bool = False):
    """Remember a started child (a ``subprocess.Popen``), so the handler stops it (and its group,
    ``group``); returns it."""
    with _lock:
        _children[proc.pid] = group
    return proc


def forget(proc) -> None:
    """A child that has ended (and been waited for): the handler must not signal its reused pid."""
    with _lock:
        _children.pop(proc.pid, None)


def _install() -> None:
    """The handler of SIGTERM and SIGHUP, installed from the main thread where the signal still has
    its default action (an application embedding cudaopt keeps a handler of its own)."""
    if threading.current_thread() is not threading.main_thread():
        return
    for signum in STOPPING:
        if signum not in _handled and signal.getsignal(signum) == signal.SIG_DFL:
            signal.signal(signum, _stop_children_and_exit)
            _handled.add(signum)


def stop_children() -> None:
    """SIGKILL to every child still tracked (to its whole group when it leads one)."""
    with _lock:
        children = list(_children.items())
    for pid, group in children:
        try:
            if group:
                os.killpg(pid, signal.SIGKILL)
            else:
                os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass  # already gone


def _stop_children_and_exit(signum, frame) -> None:
    stop_children()
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)  # ended by the signal that stopped it, as without the handler


_install()  # a parent that starts its children from other threads has its handler all the same


# --- the child's side ------------------------------------------------------------------------


def hold() -> None:
    """In a child started with :func:`spawn`, first thing: end when the parent ends. Nothing
    without the lifeline (a process started by hand)."""
    given = os.environ.pop(ENV, None)  # not passed on: this process's own children get its lifeline
    if not given:
        return
    fd_text, _, pdeathsig = given.partition(":")
    try:
        fd = int(fd_text)
        is_pipe = stat.S_ISFIFO(os.fstat(fd).st_mode)
    except (ValueError, OSError):  # a program between parent and child did not pass the descriptor on
        return
    if not is_pipe:
        return
    if pdeathsig == "1" and sys.platform.startswith("linux"):
        _parent_death_signal()
    threading.Thread(target=_watch, args=(fd,), name="cudaopt-lifeline", daemon=True).start()


def _parent_death_signal() -> None:
    """PR_SET_PDEATHSIG: SIGKILL from the kernel when the parent dies (checked once after setting
    it, for a parent that died before)."""
    import ctypes  # only here: a worker starts faster without it

    parent = os.getppid()
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        return  # no prctl here: the lifeline alone
    if os.getppid() != parent or parent == 1:
        _end()


def _watch(fd: int) -> None:
    """Block on the lifeline until the parent's write end closes (its exit, however it came)."""
    try:
        while os.read(fd, 1):
            pass
    except OSError:
        return  # closed under it (code run in this process closed every descriptor): no longer watched
    _end()


def _end() -> None:
    """End this process, with its group when it leads one (what the user's code started in it)."""
    if os.getpgrp() == os.getpid():
        os.killpg(os.getpid(), signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)
