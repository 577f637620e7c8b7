"""NVRTC in a process of its own, which Landlock confines to reading the CUDA headers.

The include scan (sandbox.py) is the first defence against a kernel that makes NVRTC open a host
file; this is the second, for a scan that is ever fooled. Each process that compiles (a GPU
worker, ``cudaopt check``, the SASS summaries) starts compiler processes as it needs them, one
per concurrent compilation, each long-lived. A compiler process imports NVRTC, compiles a
trivial kernel (so every library NVRTC loads lazily is loaded), then restricts itself with
Landlock (landlock.py) to reading the header roots (nvrtc_build.header_roots) and nothing else:
no other file, no write, no exec, no TCP. Only then does it read a request. NVRTC's headers for
the host macros are in memory (host_headers.py). It also runs in an empty directory with the
worker's allow-listed environment, so it holds no secret it could leak.

Where the kernel has no Landlock (Linux before 5.13, Landlock off, another OS) the process says
so when it starts and compiles unconfined: the scan alone then stands between a kernel and the
host's files (docs/evaluation.md, ``cudaopt doctor``).

Requests and answers are JSON lines on the process's stdin/stdout. A compilation that outlives
``timeout`` seconds, or a process that dies, is a :class:`CompileError` for that request; the
process is replaced on the next one, so a caller never hangs on it.
"""

from __future__ import annotations

import atexit
import base64
import json
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading

from ..wire.protocol import KernelSpec
from ..wire.results import CompileInfo
from . import lifeline
from .nvrtc_build import CompileError
from .sandbox import worker_environment
from .target import DEFAULT_ARCH

START_TIMEOUT = 120.0  # importing NVRTC and the warm-up compilation
TIMEOUT = 600.0  # one compilation (a worker's supervisor has its own, shorter, compile_s)


class CompilerUnavailable(RuntimeError):
    """No compiler process could start: the installation is broken, not the kernel."""


class CompilerProcess:
    """One confined compiler process and the pipe to it."""

    def __init__(self, workdir: str):
        line = lifeline.spawn(worker_environment(dict(os.environ)))
        self.proc = lifeline.track(subprocess.Popen(
            [sys.executable, "-m", "cudaopt.compilekit.compile_process"], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=workdir, env=line.env, pass_fds=line.pass_fds,
        ))
        self.lines: queue.Queue[bytes | None] = queue.Queue()
        self.stderr: list[bytes] = []
        threading.Thread(target=self._pump, args=(self.proc.stdout, self.lines.put), daemon=True).start()
        threading.Thread(target=self._pump, args=(self.proc.stderr, self._keep_err), daemon=True).start()
        try:
            self.hello = self._answer(START_TIMEOUT, "starting")
        except CompileError as exc:
            raise CompilerUnavailable(exc.log) from None

    @staticmethod
    def _pump(stream, put) -> None:
        for line in iter(stream.readline, b""):
            put(line)
        put(None)

    def _keep_err(self, line: bytes | None) -> None:
        if line is not None:
            self.stderr = (self.stderr + [line])[-20:]

    def request(self, message: dict, timeout: float) -> dict:
        try:
            self.proc.stdin.write(json.dumps(message).encode() + b"\n")
            self.proc.stdin.flush()
        except OSError:
            pass  # the process has died: _answer reports how
        return self._answer(timeout, "compiling")

    def _answer(self, timeout: float, doing: str) -> dict:
        try:
            line = self.lines.get(timeout=timeout)
        except queue.Empty:
            self.stop()
            raise CompileError(f"the compiler was stopped after {timeout:.0f} s {doing}") from None
        if line is None:
            code = self.proc.wait()
            why = b"".join(self.stderr).decode(errors="replace").strip().splitlines()[-1:] or [""]
            raise CompileError(f"the compiler process ended (exit status {code}) while {doing} {why[0]}".strip())
        return json.loads(line)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        lifeline.forget(self.proc)


class Compilers:
    """The compiler processes of this process: an idle one per request, a new one when none is idle."""

    def __init__(self):
        self._idle: list[CompilerProcess] = []
        self._all: list[CompilerProcess] = []
        self._lock = threading.Lock()
        self._workdir: tempfile.TemporaryDirectory | None = None

    def run(self, kind: str, spec: KernelSpec, arch: str, timeout: float = TIMEOUT) -> dict:
        proc = self._take()
        try:
            answer = proc.request({"kind": kind, "spec": spec.model_dump(), "arch": arch}, timeout)
        except CompileError:
            self._drop(proc)
            raise
        self._give_back(proc)
        if "error" in answer:
            raise CompileError(answer["error"])
        return answer

    def status(self) -> dict:
        """What a compiler process reports when it starts: Landlock's ABI or why not, header roots."""
        proc = self._take()
        self._give_back(proc)
        return proc.hello

    def _take(self) -> CompilerProcess:
        with self._lock:
            while self._idle:
                proc = self._idle.pop()
                if proc.alive():
                    return proc
                self._all.remove(proc)
            if self._workdir is None:
                self._workdir = tempfile.TemporaryDirectory(prefix="cudaopt-nvrtc-")
            workdir = self._workdir.name
        proc = CompilerProcess(workdir)
        with self._lock:
            self._all.append(proc)
        return proc

    def _give_back(self, proc: CompilerProcess) -> None:
        with self._lock:
            self._idle.append(proc)

    def _drop(self, proc: CompilerProcess) -> None:
        proc.stop()
        with self._lock:
            if proc in self._all:
                self._all.remove(proc)

    def close(self) -> None:
        with self._lock:
            procs, self._all, self._idle = self._all, [], []
        for proc in procs:
            proc.stop()


COMPILERS = Compilers()
atexit.register(COMPILERS.close)


def compile_remote(kind: str, spec: KernelSpec, arch: str) -> tuple[bytes, CompileInfo | None]:
    """``spec`` compiled to ``kind`` ("cubin" or "ptx") by a confined compiler process."""
    answer = COMPILERS.run(kind, spec, arch)
    info = CompileInfo.model_validate(answer["info"]) if answer.get("info") else None
    return base64.b64decode(answer["code"]), info


# --- the compiler process -------------------------------------------------------------------


def _serve() -> None:
    from . import landlock, nvrtc_build

    roots = nvrtc_build.header_roots()
    # everything a request touches, once, before the file system closes: NVRTC's lazily loaded
    # libraries, and the Python modules that decode and encode a request
    warm = KernelSpec(source='extern "C" __global__ void k(float* x) { x[0] = INFINITY; }', entry="k")
    for kind in ("cubin", "ptx"):
        _handle(json.loads(json.dumps({"kind": kind, "spec": warm.model_dump(), "arch": DEFAULT_ARCH})))
    _handle({"kind": "cubin", "spec": {**warm.model_dump(), "source": "#error warm-up"}, "arch": DEFAULT_ARCH})
    hello = {"roots": [list(r) for r in roots], "nvrtc": nvrtc_build.nvrtc_version()}
    try:
        hello["landlock"] = landlock.confine(nvrtc_build.include_dirs())
    except landlock.LandlockUnavailable as exc:
        hello["landlock"], hello["why"] = None, str(exc)
    out = sys.stdout.buffer
    out.write(json.dumps(hello).encode() + b"\n")
    out.flush()
    for line in sys.stdin.buffer:
        out.write(json.dumps(_handle(json.loads(line))).encode() + b"\n")
        out.flush()


def _handle(request: dict) -> dict:
    from . import nvrtc_build

    try:
        code, info = nvrtc_build.build(KernelSpec.model_validate(request["spec"]), request["arch"], request["kind"])
    except CompileError as exc:
        return {"error": exc.log}
    return {"code": base64.b64encode(code).decode(), "info": info.model_dump() if info else None}


if __name__ == "__main__":
    # A Ctrl-C in a terminal reaches the whole process group: the process this one compiles for
    # decides what an interrupt ends, and this one ends with it (the lifeline, or its stdin closing),
    # even in the middle of a compilation that would never end.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    lifeline.hold()
    _serve()
