"""One NVRTC compilation in this process: options, in-memory host headers, log and resources.

This runs inside the compiler process (compile_process.py), after Landlock has confined it to
reading the header roots :func:`header_roots` names; compiler.py is what callers use.
"""

from __future__ import annotations

import functools
import re
import time

from ..wire.protocol import KernelSpec
from ..wire.results import CompileInfo
from .cubin import inspect_cubin
from .host_headers import HEADERS, PRELUDE_NAME
from .math_units import fast_math_options
from .sandbox import PROGRAM_NAME, filter_log

# Header families a kernel may include, each with the CUDA wheel that ships it (cuda-toolkit extras,
# declared in pyproject.toml): cuda.pathfinder's name for it, and the header that proves it found.
HEADER_LIBS = ("cudart", "cccl", "curand")


class CompileError(Exception):
    def __init__(self, log: str):
        super().__init__(log)
        self.log = log


@functools.lru_cache(maxsize=1)
def header_roots() -> tuple[tuple[str, str, str], ...]:
    """``(library, directory, how it was found)`` for each header family cuda.pathfinder finds:
    the pip wheels first (site-packages), a system toolkit only when no wheel is installed."""
    try:
        from cuda.pathfinder import locate_nvidia_header_directory
    except ImportError:
        return ()
    found = []
    for lib in HEADER_LIBS:
        try:
            located = locate_nvidia_header_directory(lib)
        except Exception:  # pathfinder could not search (reported by doctor as not found)
            located = None
        if located is not None and located.abs_path:
            found.append((lib, located.abs_path, located.found_via))
    return tuple(found)


def include_dirs() -> list[str]:
    """The include path, each directory once, in header_roots' order."""
    return list(dict.fromkeys(directory for _, directory, _ in header_roots()))


def nvrtc_version() -> str:
    from cuda.bindings import nvrtc

    _, major, minor = nvrtc.nvrtcVersion()
    return f"{major}.{minor}"


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
        include_path=include_dirs() or None,
        pre_include=PRELUDE_NAME,
        **extra,
    )


def build(spec: KernelSpec, arch: str, target: str) -> tuple[bytes, CompileInfo | None]:
    """Compile ``spec`` to ``target`` ("cubin" with its report, or "ptx"); raise :class:`CompileError`."""
    from cuda.bindings import nvrtc

    extra = {"ptxas_options": "--verbose", "no_cache": True} if target == "cubin" else {}
    options = program_options(spec, arch, **extra).as_bytes("nvrtc")
    names, texts = list(HEADERS), [text.encode() for text in HEADERS.values()]
    start = time.perf_counter()
    status, program = nvrtc.nvrtcCreateProgram(spec.source.encode(), PROGRAM_NAME.encode(), len(names), texts,
                                               [n.encode() for n in names])
    _ok(status, nvrtc)
    try:
        (status,) = nvrtc.nvrtcCompileProgram(program, len(options), options)
        log = _get(nvrtc, program, nvrtc.nvrtcGetProgramLogSize, nvrtc.nvrtcGetProgramLog)
        if status != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            raise CompileError(with_hints(clean(f"{status.name}: compilation log:\n{log}")))
        if target == "ptx":
            ptx = _get(nvrtc, program, nvrtc.nvrtcGetPTXSize, nvrtc.nvrtcGetPTX)
            return ptx.encode(), None
        code = _get(nvrtc, program, nvrtc.nvrtcGetCUBINSize, nvrtc.nvrtcGetCUBIN, binary=True)
    finally:
        nvrtc.nvrtcDestroyProgram(program)
    text = clean(log)
    info = CompileInfo(ok=True, log=text, arch=arch, seconds=round(time.perf_counter() - start, 4))
    _apply_ptxas(info, text, spec.entry)
    state = inspect_cubin(code)
    info.global_bytes, info.device_malloc, info.global_symbols = state.global_bytes, state.device_malloc, state.symbols
    info.fast_math = fast_math_options(o.decode() for o in options)
    return code, info


def _ok(status, nvrtc) -> None:
    if status != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise CompileError(f"NVRTC failed: {status.name}")


def _get(nvrtc, program, size_of, fetch, binary: bool = False):
    status, size = size_of(program)
    _ok(status, nvrtc)
    buffer = b" " * size
    _ok(fetch(program, buffer)[0], nvrtc)
    return buffer if binary else buffer.decode(errors="replace").replace("\x00", "").strip()


# Host-only names NVRTC does not know and the prelude (host_headers.py) cannot give, and what to
# write instead.
_HINTS = {
    "std": "the C++ standard library is not available to NVRTC kernels; use libcu++ "
           "(#include <cuda/std/...>, cuda::std::) or CUDA intrinsics",
}
_UNDEFINED = re.compile(r'(?:identifier|namespace) "([A-Za-z_]\w*)" (?:is undefined|has no member)')


def with_hints(log: str) -> str:
    """The compiler log, with one hint line per host-only name it reports as undefined."""
    hints = []
    for name in dict.fromkeys(_UNDEFINED.findall(log)):
        if name in _HINTS:
            hints.append(f"hint: {name} is a host-only name under NVRTC: {_HINTS[name]}")
    return "\n".join([log, *hints]) if hints else log


def clean(text: str) -> str:
    return filter_log(text.replace("\x00", "").strip(), include_dirs())


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
