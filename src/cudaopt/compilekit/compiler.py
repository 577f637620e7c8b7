"""NVRTC compilation to a cubin, with the compiler log and ptxas resource usage kept.

Every source passes the include scan (sandbox.py) here, in the caller's process, and is then
compiled by a confined compiler process (compile_process.py; the compilation itself is
nvrtc_build.py); the math units of the cubin that comes back are read here (math_units.py: nvdisasm
is a program of its own, which the confined process may not start). A cubin compiled once on this
machine is read from disk after that (kept_cubins.py). NVRTC needs no GPU, so everything here also
runs (and is tested) on machines without one.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..wire.protocol import KernelSpec
from ..wire.results import CompileInfo
from . import kept_cubins
from .compile_process import compile_remote
from .math_units import read_math
from .nvrtc_build import CompileError, parse_ptxas, with_hints  # noqa: F401 (callers import them here)
from .sandbox import PROGRAM_NAME, IncludeError, check_includes
from .target import DEFAULT_ARCH


@dataclass
class Compiled:
    cubin: object  # cuda.core ObjectCode
    info: CompileInfo


def ready() -> None:
    """Import, in the calling thread, what a compilation imports (cuda.core, NVRTC's bindings and
    header roots for the cubin cache's key): compilations started side by side in threads would
    otherwise import them together, and a thread can be handed a module another has half made."""
    import cuda.core  # noqa: F401

    kept_cubins.key_of(KernelSpec(source="", entry="k"), DEFAULT_ARCH)


def compile_ptx(spec: KernelSpec, arch: str = DEFAULT_ARCH) -> str:
    """The PTX NVRTC makes of ``spec``; raise :class:`CompileError` on failure.

    Through NVRTC itself: cuda.core's PTX target asks the driver whether it could load the PTX,
    and there is no driver on a machine without a GPU.
    """
    _sandbox(spec)
    code, _ = compile_remote("ptx", spec, arch)
    return code.decode()


def compile_kernel(spec: KernelSpec, arch: str = DEFAULT_ARCH, *, math: bool = True) -> Compiled:
    """Compile ``spec`` for ``arch``; raise :class:`CompileError` with the full log on failure.
    ``math``: read the math units of the cubin's SASS into the report (a candidate's; the trusted
    reference's need not be)."""
    from cuda.core import ObjectCode

    _sandbox(spec)
    key = kept_cubins.key_of(spec, arch)
    kept = kept_cubins.load(key)
    if kept is not None:
        code, info = kept
    else:
        code, info = compile_remote("cubin", spec, arch)
        kept_cubins.store(key, code, info)
    if math:
        read_math(code, info)
    return Compiled(cubin=ObjectCode.from_cubin(code), info=info)


def _sandbox(spec: KernelSpec) -> None:
    """Refuse, before NVRTC opens anything, a source that includes more than CUDA headers."""
    try:
        check_includes(spec.source, spec.defines)
    except IncludeError as exc:
        raise CompileError(f"{PROGRAM_NAME}: {exc}") from None
