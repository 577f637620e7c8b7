"""The supervisor: worker processes, one per GPU of this machine, with per-phase timeouts and respawn.

A candidate that hangs is killed with SIGKILL when its phase (compile, check, timing) runs past
its timeout; one that crashes the GPU context retires its worker. Either way the failure is
recorded with its type, what had finished is kept, and a fresh worker serves the next request.
Requests are spread over the workers by the dispatcher (dispatch.py); a Ray actor owns a
:class:`Worker` the same way (ray_cluster.py).
"""

from __future__ import annotations

import os
import select
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from pydantic import ValidationError

import cudaopt

from ..compilekit import lifeline
from ..compilekit.sandbox import worker_environment
from ..wire.messages import (
    CaseDone,
    Compiled,
    Done,
    Fatal,
    PhaseStarted,
    Prefetch,
    Ready,
    WorkerMessage,
    read_message,
)
from ..wire.protocol import EvalRequest, KernelSpec
from ..wire.results import DeviceInfo, EvalResult
from .dispatch import Dispatcher, GpuRef, WorkerError, unfinished

STARTUP_TIMEOUT_S = 120.0
WORKER_COMMAND = [sys.executable, "-m", "cudaopt.worker.main"]


__all__ = ["STARTUP_TIMEOUT_S", "WORKER_COMMAND", "Supervisor", "Worker", "WorkerError"]


class Worker:
    """One worker process pinned to one GPU (a lane of the dispatcher)."""

    def __init__(self, device: int, log_path: Path, command: list[str] | None = None,
                 env: dict[str, str] | None = None):
        self.device = device
        self.log_path = log_path
        self.command = command or WORKER_COMMAND
        self.extra_env = dict(env or {})
        self.proc: subprocess.Popen | None = None
        self.info = DeviceInfo()
        self._buffer = b""
        self._workdir: tempfile.TemporaryDirectory | None = None

    # --- process management --------------------------------------------------------------

    def start(self) -> None:
        """Start the process: allow-listed environment (no secrets), an empty working directory."""
        env = worker_environment(dict(os.environ), CUDA_VISIBLE_DEVICES=str(self.device), PYTHONUNBUFFERED="1",
                                 **self.extra_env)
        env.pop("CUDA_DEVICE_ORDER", None)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (*_package_roots(), env.get("PYTHONPATH", "")) if p)
        self._workdir = tempfile.TemporaryDirectory(prefix="cudaopt-worker-")
        line = lifeline.spawn(env)  # the worker, and what it starts, end with this process
        log = open(self.log_path, "ab")
        try:
            self.proc = lifeline.track(subprocess.Popen(
                self.command,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                env=line.env,
                pass_fds=line.pass_fds,
                cwd=self._workdir.name,
            ))
        finally:
            log.close()
        self._buffer = b""
        try:
            message = self._read(time.monotonic() + STARTUP_TIMEOUT_S)
        except WorkerError as exc:
            message = Fatal(message=str(exc))
        if not isinstance(message, Ready):
            detail = message.message if isinstance(message, Fatal) else "no answer"
            self.kill()
            tail = self._tail()
            log_part = "" if tail == "(empty)" else f"; log: {tail}"  # an empty log says nothing
            raise WorkerError(f"GPU worker {self.device} did not start: {detail}{log_part}")
        self.info = message.device

    @property
    def ref(self) -> GpuRef:
        return GpuRef.of(self.info, self.device)

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.wait()
            lifeline.forget(self.proc)
            for stream in (self.proc.stdin, self.proc.stdout):
                if stream:
                    stream.close()
        self.proc = None
        if self._workdir is not None:
            self._workdir.cleanup()
            self._workdir = None

    def stop(self) -> None:
        """End the worker politely (close its input), killing it if it does not exit."""
        if self.proc is None:
            return
        try:
            self.proc.stdin.close()
            self.proc.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            pass
        self.kill()

    # --- one request ---------------------------------------------------------------------

    def evaluate(self, request: EvalRequest, on_event: Callable[[WorkerMessage], None] | None = None) -> EvalResult:
        """Run one request; ``on_event`` sees the worker's phase and partial-result messages."""
        if not self.alive:
            self.start()
        assert self.proc is not None
        start = time.monotonic()
        partial = EvalResult(status="ok", request_id=request.id, device=self.info)
        timeouts = request.timeouts
        phase, case, measure = "compile", "", None
        deadline = start + timeouts.limit(phase)
        try:
            self.proc.stdin.write((request.to_json() + "\n").encode())
            self.proc.stdin.flush()
            while True:
                message = self._read(deadline)
                if message is None:
                    self.kill()
                    why = timeouts.why(phase, case, measure)
                    basis = f" ({why})" if why else ""
                    limit = timeouts.limit(phase, case, measure)
                    reason = (f"{phase} phase ran past its {limit:.3g} s timeout{basis}; "
                              "the worker was killed")
                    return unfinished(request, "timeout", reason, case, partial, start)
                if on_event is not None:
                    on_event(message)
                if isinstance(message, PhaseStarted):
                    phase, case, measure = message.phase, message.case, message.reference_s
                    deadline = time.monotonic() + timeouts.limit(phase, case, measure)
                elif isinstance(message, Compiled):
                    partial.compile = message.compile
                elif isinstance(message, CaseDone):
                    partial.cases.append(message.case)
                elif isinstance(message, Done):
                    if _retired(message.result):  # the worker exits after a sticky CUDA error
                        self._reap_if_exiting()
                    return message.result
        except (WorkerError, BrokenPipeError, OSError) as exc:
            self.kill()
            reason = f"the worker died during the {phase} phase ({exc}); log: {self._tail()}"
            return unfinished(request, "crashed", reason, case, partial, start)

    def prefetch(self, kernels: list[KernelSpec]) -> None:
        """Have the worker compile these kernels in the background; no answer is awaited."""
        if not self.alive:
            self.start()
        assert self.proc is not None
        try:
            self.proc.stdin.write((Prefetch(prefetch=kernels).to_json() + "\n").encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            self.kill()  # the next request starts a fresh worker and compiles as usual

    def _reap_if_exiting(self) -> None:
        if self.proc is None:
            return
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            return
        self.kill()

    def _read(self, deadline: float) -> WorkerMessage | None:
        """The next message, None at the deadline; WorkerError if the process closed its output or
        wrote a line that is no message."""
        assert self.proc is not None and self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        while True:
            if b"\n" in self._buffer:
                line, self._buffer = self._buffer.split(b"\n", 1)
                if line.lstrip().startswith(b"{"):  # a tool wrapping the worker may print banners
                    try:
                        return read_message(line)
                    except ValidationError as exc:
                        raise WorkerError(f"the worker sent a line that is no message: {exc.errors()[0]['msg']}") from None
                continue
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            ready, _, _ = select.select([fd], [], [], remaining)
            if ready:
                chunk = os.read(fd, 1 << 20)
                if not chunk:
                    raise WorkerError(f"worker exited with code {self.proc.wait()}")
                self._buffer += chunk

    def _tail(self, limit: int = 1500) -> str:
        try:
            data = self.log_path.read_bytes()[-limit:].decode(errors="replace").strip()
        except OSError:
            return "(no log)"
        return data.replace("\n", " | ") or "(empty)"


def _package_roots() -> list[str]:
    """Where this process imports cudaopt from: the worker runs in an empty directory, so a source
    checkout used without installation still finds its code."""
    return [str(Path(cudaopt.__file__).resolve().parent.parent)]


def _retired(result: EvalResult) -> bool:
    return any(c.status == "crashed" for c in result.cases)


class Supervisor(Dispatcher):
    """Evaluates requests on this machine's GPUs, one worker each; use as a context manager."""

    def __init__(self, devices: list[int] | None = None, log_dir: Path | None = None,
                 command: list[str] | None = None, env: dict[str, str] | None = None):
        """``command`` starts a worker (default: this Python's ``cudaopt.worker.main``); ``env``
        adds variables to its allow-listed environment."""
        self.devices = devices if devices is not None else [0]
        if len(set(self.devices)) != len(self.devices):
            raise ValueError(f"devices {self.devices}: one worker per GPU")
        self._tmp = None
        if log_dir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="cudaopt-workers-")
            log_dir = Path(self._tmp.name)
        log_dir.mkdir(parents=True, exist_ok=True)
        self.log_dir = log_dir
        self.workers = [Worker(d, log_dir / f"worker-gpu{d}.log", command, env) for d in self.devices]
        super().__init__(self.workers)

    def close(self) -> None:
        super().close()
        if self._tmp is not None:
            self._tmp.cleanup()
