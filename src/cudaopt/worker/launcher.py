"""Launching and synchronising kernels, and turning every CUDA error into an outcome.

Any driver error during a request, wherever it surfaces (a launch, a synchronisation, staging
inputs, a vendor call), ends as a :class:`CaseFailure`. A sticky error, or any error after which
the context no longer answers, marks the launcher ``dead``: the worker reports ``crashed`` and is
replaced, and nothing measured after that point is trusted.
"""

from __future__ import annotations

from ..wire.results import Occupancy, ResolvedLaunch
from .device import Device
from .driver import CudaCallError, is_sticky


class CaseFailure(Exception):
    """The end of a case (or of a request) with one of the harness's outcomes."""

    def __init__(self, status: str, reason: str):
        super().__init__(reason)
        self.status, self.reason = status, reason


class Launcher:
    def __init__(self, gpu: Device):
        self.gpu = gpu
        self.dead = False

    def launch(self, kernel, launch: ResolvedLaunch, args: list) -> None:
        try:
            self.gpu.launch(kernel, launch.grid, launch.block, launch.shared_bytes, args)
        except Exception as exc:
            raise self.failure(exc, "launch_error") from None

    def sync(self) -> None:
        try:
            self.gpu.stream.sync()
        except Exception as exc:
            raise self.failure(exc, "launch_error") from None

    def failure(self, exc: BaseException, status: str) -> CaseFailure:
        """The outcome of a CUDA error: ``crashed`` (and ``dead``) when the context may be lost."""
        text = str(exc).strip()
        message = text.splitlines()[0] if text else exc.__class__.__name__
        if is_sticky(text) or not self.gpu.context_alive():
            self.dead = True
            return CaseFailure("crashed", message)
        return CaseFailure(status, message)


def occupancy(kernel, launch: ResolvedLaunch, max_threads_per_sm: int) -> Occupancy:
    """How many blocks of this launch fit on an SM, and the warps they keep busy."""
    threads = launch.threads
    try:
        blocks = kernel.occupancy.max_active_blocks_per_multiprocessor(threads, launch.shared_bytes)
    except Exception as exc:  # e.g. more threads than the kernel can take; the launch will say
        return Occupancy(error=str(exc).splitlines()[0])
    warps = blocks * -(-threads // 32)
    return Occupancy(blocks_per_sm=int(blocks), warps_per_sm=warps,
                     occupancy=round(warps / (max_threads_per_sm // 32), 3))


def is_cuda_error(exc: BaseException) -> bool:
    """A failure of the driver or of cuda-core (as opposed to a bug in the harness's Python)."""
    return isinstance(exc, CudaCallError) or type(exc).__module__.startswith(("cuda.", "cupy", "torch"))

