"""NVRTC compilation to a cubin, with the compiler log and ptxas resource usage kept.

NVRTC needs no GPU, so everything here also runs (and is tested) on machines without one.
"""

from __future__ import annotations

import functools
import io
import re
import time
from dataclasses import dataclass

from .cubin import inspect_cubin
from .lru import Lru
from .protocol import KernelSpec
from .results import CompileInfo
from .sandbox import PROGRAM_NAME, IncludeError, check_includes, filter_log

DEFAULT_ARCH = "sm_90"


class CompileError(Exception):
    def __init__(self, log: str):
        super().__init__(log)
        self.log = log


@dataclass
class Compiled:
    cubin: object  # cuda.core ObjectCode
    info: CompileInfo


class CompileCache:
    """Compilations a worker has made, by source, defines and architecture, for requests that name
    the same kernel again (a guard's or a replay's interleaved pairs, a resumed run).

    What is kept is the cubin's bytes, never a loaded module: each hit loads a fresh one, so no
    request sees the __device__ globals an earlier request's launches left behind.
    """

    def __init__(self, limit_bytes: int = 64 << 20):
        self._kept = Lru(limit_bytes)  # key -> (cubin bytes, the first compile's report)

    def __contains__(self, key: str) -> bool:
        return key in self._kept.items

    def get(self, key: str) -> Compiled | None:
        kept = self._kept.get(key)
        if kept is None:
            return None
        code, info = kept
        from cuda.core import ObjectCode

        return Compiled(cubin=ObjectCode.from_cubin(code), info=info.model_copy(update={"cached": True}))

    def put(self, key: str, compiled: Compiled) -> None:
        if key not in self:
            code = bytes(compiled.cubin.code)
            self._kept.put(key, (code, compiled.info.model_copy()), len(code))


@functools.lru_cache(maxsize=1)
def header_options() -> dict:
    """Where NVRTC finds the CUDA headers (cuda_fp16.h, cuda_bf16.h, ...).

    A toolkit's include directory when one is found; otherwise the headers bundled with NVRTC.
    """
    try:
        from cuda.pathfinder import find_nvidia_header_directory

        found = find_nvidia_header_directory("cudart")
    except Exception:  # pathfinder absent or broken: use the bundled headers
        found = None
    if found:
        return {"include_path": [found]}
    return {"use_bundled_headers": True}


def program_options(spec: KernelSpec, arch: str, **extra):
    """NVRTC options for ``spec``: the same defines, flags and headers for a cubin and for PTX."""
    from cuda.core import ProgramOptions

    defines = [(k, str(v)) for k, v in sorted(spec.defines.items())]
    return ProgramOptions(
        name=PROGRAM_NAME,
        arch=arch,
        std="c++17",
        use_fast_math=spec.fast_math or None,
        max_register_count=spec.max_registers,
        define_macro=defines or None,
        **header_options(),
        **extra,
    )


def compile_ptx(spec: KernelSpec, arch: str = DEFAULT_ARCH) -> str:
    """The PTX NVRTC makes of ``spec``; raise :class:`CompileError` on failure.

    Through NVRTC itself: cuda.core's PTX target asks the driver whether it could load the PTX,
    and there is no driver on a machine without a GPU.
    """
    from cuda.bindings import nvrtc

    _sandbox(spec)
    options = program_options(spec, arch).as_bytes("nvrtc")
    _, program = nvrtc.nvrtcCreateProgram(spec.source.encode(), PROGRAM_NAME.encode(), 0, [], [])
    try:
        (status,) = nvrtc.nvrtcCompileProgram(program, len(options), options)
        if status != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            _, size = nvrtc.nvrtcGetProgramLogSize(program)
            log = b" " * size
            nvrtc.nvrtcGetProgramLog(program, log)
            raise CompileError(with_hints(_clean(log.decode(errors="replace"))))
        _, size = nvrtc.nvrtcGetPTXSize(program)
        ptx = b" " * size
        nvrtc.nvrtcGetPTX(program, ptx)
    finally:
        nvrtc.nvrtcDestroyProgram(program)
    return ptx.decode(errors="replace").replace("\x00", "").strip()


def compile_kernel(spec: KernelSpec, arch: str = DEFAULT_ARCH) -> Compiled:
    """Compile ``spec`` for ``arch``; raise :class:`CompileError` with the full log on failure."""
    from cuda.core import Program

    _sandbox(spec)
    # no_cache: a cached compile skips ptxas, and with it the resource report
    options = program_options(spec, arch, ptxas_options="--verbose", no_cache=True)
    log = io.StringIO()
    start = time.perf_counter()
    try:
        cubin = Program(spec.source, "c++", options).compile("cubin", logs=log)
    except Exception as exc:  # NVRTCError carries the compiler's message
        text = str(exc)
        if log.getvalue().strip():
            text += "\n" + log.getvalue()
        raise CompileError(with_hints(_clean(text))) from None
    seconds = time.perf_counter() - start
    text = _clean(log.getvalue())
    info = CompileInfo(ok=True, log=text, arch=arch, seconds=round(seconds, 4))
    _apply_ptxas(info, text, spec.entry)
    state = inspect_cubin(bytes(cubin.code))
    info.global_bytes, info.device_malloc = state.global_bytes, state.device_malloc
    return Compiled(cubin=cubin, info=info)


# Host-only names NVRTC does not know (it has no host C/C++ headers), and what to write instead.
_HINTS = {
    "INFINITY": "#include <math_constants.h> and use CUDART_INF_F",
    "NAN": "#include <math_constants.h> and use CUDART_NAN_F",
    "FLT_MAX": "#include <math_constants.h> and use CUDART_MAX_NORMAL_F",
    "M_PI": "#include <math_constants.h> and use CUDART_PI_F (or CUDART_PI for double)",
    "uint32_t": "use unsigned int (NVRTC has no <cstdint>)",
    "int32_t": "use int (NVRTC has no <cstdint>)",
    "uint64_t": "use unsigned long long (NVRTC has no <cstdint>)",
    "int64_t": "use long long (NVRTC has no <cstdint>)",
    "uint8_t": "use unsigned char (NVRTC has no <cstdint>)",
    "std": "the C++ standard library is not available to NVRTC kernels; use CUDA intrinsics",
}
_UNDEFINED = re.compile(r'(?:identifier|namespace) "([A-Za-z_]\w*)" is undefined')


def with_hints(log: str) -> str:
    """The compiler log, with one hint line per host-only name it reports as undefined."""
    hints = []
    for name in dict.fromkeys(_UNDEFINED.findall(log)):
        if name in _HINTS:
            hints.append(f"hint: {name} is a host-only name under NVRTC: {_HINTS[name]}")
    return "\n".join([log, *hints]) if hints else log


def _sandbox(spec: KernelSpec) -> None:
    """Refuse, before NVRTC opens anything, a source that includes more than CUDA headers."""
    try:
        check_includes(spec.source)
    except IncludeError as exc:
        raise CompileError(f"{PROGRAM_NAME}: {exc}") from None


def _clean(text: str) -> str:
    text = text.replace("\x00", "").strip()
    include = header_options().get("include_path") or []
    return filter_log(text, list(include))


_FUNC = re.compile(r"Function properties for (\S+)")
_STACK = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers(?:.*?(\d+) bytes smem)?")


def parse_ptxas(log: str) -> dict[str, dict[str, int]]:
    """Resource usage per function from a ``ptxas -v`` log."""
    usage: dict[str, dict[str, int]] = {}
    current: str | None = None
    for line in log.splitlines():
        if (m := re.search(r"Compiling entry function '([^']+)'", line)) or (m := _FUNC.search(line)):
            current = m.group(1)
            usage.setdefault(current, {})
        elif current and (m := _STACK.search(line)):
            usage[current].update(
                stack_bytes=int(m.group(1)), spill_stores=int(m.group(2)), spill_loads=int(m.group(3))
            )
        elif current and (m := _USED.search(line)):
            usage[current]["registers"] = int(m.group(1))
            usage[current]["static_shared_bytes"] = int(m.group(2) or 0)
    return usage


def _apply_ptxas(info: CompileInfo, log: str, entry: str) -> None:
    found = parse_ptxas(log).get(entry)
    if found:
        for key, value in found.items():
            setattr(info, key, value)
