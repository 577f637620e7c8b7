"""What a candidate's compilation may reach: CUDA headers only, no host files, no secrets.

NVRTC opens any file an ``#include`` names, and its log (which quotes the file) goes back to
the model. So, before anything is compiled, every include directive must name a CUDA or NVRTC
header by an allowed name (``<cuda_fp16.h>``, ``<cooperative_groups.h>``, ``<cuda/std/...>``);
quoted or absolute paths, ``..``, includes computed from macros, ``#include_next``, ``#import``,
``#embed`` and ``__has_include`` (which tells whether any host file exists) are refused. The scan
reads the source as the preprocessor does (pp_lines.py: splices, comments, literals), so a
comment before ``#`` or between ``#`` and ``include`` hides nothing, and it refuses what compilers
read differently rather than guess. It is the first line of defence; the second is the compiler
process itself, which Landlock confines to reading the CUDA headers (compile_process.py).

The worker process also gets a minimal environment (an allow-list of variable names) and an
empty temporary working directory, and compile logs keep only diagnostics about the candidate's
own source and the CUDA headers.
"""

from __future__ import annotations

import re

from .pp_lines import SourceError, logical_lines

PROGRAM_NAME = "kernel.cu"  # what NVRTC calls the candidate's source in its diagnostics

# Headers a kernel may include: the CUDA toolkit's device headers, libcu++, CUB and cooperative
# groups. Angle or quoted form alike; the name is matched, never a path outside these roots.
_ALLOWED_HEADER = re.compile(
    r"(?:cuda_[\w.]+\.h(?:pp)?|math_constants\.h|mma\.h|cooperative_groups(?:\.h|/[\w/.]+)"
    r"|cuda/[\w/.]+|cub/[\w/.]+|nv/[\w/.]+|thrust/[\w/.]+|crt/[\w/.]+|sm_\d+_[\w.]+\.h(?:pp)?"
    r"|vector_types\.h|vector_functions\.h(?:pp)?|device_types\.h|device_functions\.h|builtin_types\.h"
    r"|curand_[\w.]+\.h|curand\.h|cstdint|stdint\.h|climits|limits\.h|cfloat|float\.h|cstddef|stddef\.h)"
)
# NVRTC reads neither a byte-order mark nor a no-break space as white space; taking them as such
# here only refuses more
_DIRECTIVE = re.compile(r"^[\s\ufeff\u00a0]*(?:#|%:)[\s\ufeff\u00a0#%:]*([A-Za-z_]\w*)")
_TARGET = re.compile(r"^\s*(?:<([^<>\n]*)>|\"([^\"\n]*)\")\s*$")
_REFUSED_DIRECTIVES = {"include_next", "import", "embed"}
# Names that ask the preprocessor whether a file exists; any prefix of them is refused too, since
# token pasting (``__has_ ## include``) builds the name from pieces each written in the source.
_PROBES = ("__has_include_next", "__has_embed")
_PROBE_PIECES = {probe[:n] for probe in _PROBES for n in range(1, len(probe) + 1)}
_WORD = re.compile(r"(?<![\w$])[A-Za-z_$][\w$]*")

ALLOWED_INCLUDES_HINT = ("only CUDA headers may be included, by name: <cuda_fp16.h>, <cuda_bf16.h>, "
                         "<math_constants.h>, <mma.h>, <cooperative_groups.h>, <cuda/...>, <cub/...>")


class IncludeError(ValueError):
    """An include directive the sandbox refuses; the message names the line."""


def check_includes(source: str, defines: dict[str, object] | None = None) -> None:
    """Raise :class:`IncludeError` for the first include that is not an allowed CUDA header, any
    ``__has_include``, and any source the scan cannot read as NVRTC would (pp_lines.py).

    ``defines`` (the -D macros of the compile) are scanned as ``#define`` lines of their own.
    """
    for name, value in (defines or {}).items():
        _check(f"#define {name} {value}\n", f"the define {name}: ")
    _check(source, "")


def _check(source: str, where: str) -> None:
    try:
        lines = logical_lines(source)
    except SourceError as exc:
        raise IncludeError(where + str(exc)) from None
    for number, code, text in lines:
        at = where or f"line {number}: "
        for word in _WORD.findall(code):
            if word in _PROBE_PIECES:
                what = f"'{word}'" if word in ("__has_include", *_PROBES) else f"'{word}' (it can build __has_include)"
                raise IncludeError(f"{at}{what} is not allowed: a kernel may not ask which files exist")
        match = _DIRECTIVE.match(code)
        if not match or match.group(1) not in ("include", *_REFUSED_DIRECTIVES):
            continue
        directive = match.group(1)
        if directive != "include":
            raise IncludeError(f"{at}'#{directive}' is not allowed; {ALLOWED_INCLUDES_HINT}")
        # the directive's name holds no literal, so code and text agree up to its end
        target = _TARGET.match(text[match.end():])
        if target is None:
            raise IncludeError(f"{at}'#include' must name a header as <name>: "
                               f"computed includes are not allowed; {ALLOWED_INCLUDES_HINT}")
        name = target.group(1) if target.group(1) is not None else target.group(2)
        if name.startswith("/") or ".." in name.split("/") or "\\" in name:
            raise IncludeError(f"{at}#include of a path ({name!r}) is not allowed; {ALLOWED_INCLUDES_HINT}")
        if not _ALLOWED_HEADER.fullmatch(name):
            raise IncludeError(f"{at}#include {name!r} is not an allowed header; {ALLOWED_INCLUDES_HINT}")


_LOCATION = re.compile(r"^(.+?)\(\d+\): ")
# "cannot open source file "x": Permission denied" (under Landlock) would tell a file that exists
# from one that does not; both read "cannot open source file "x""
_CANNOT_OPEN = re.compile(r'(cannot open source file "[^"\n]*")[^\n]*')


def filter_log(log: str, include_dirs: list[str]) -> str:
    """Only diagnostics located in the candidate's source or in the CUDA headers, with their
    quoted source lines; anything located elsewhere is replaced by one line saying so."""
    kept: list[str] = []
    keep = True
    for line in _CANNOT_OPEN.sub(r"\1", log).splitlines():
        located = _LOCATION.match(line)
        if located:
            where = located.group(1)
            keep = where == PROGRAM_NAME or any(where.startswith(d.rstrip("/") + "/") for d in include_dirs)
            kept.append(line if keep else "(a diagnostic located outside the kernel source was removed)")
            continue
        if keep:
            kept.append(line)
    return "\n".join(kept)


# The worker's environment: these names (and prefixes) only, so no API key or token reaches a
# process that runs model-written code or whose output goes back to the model.
_ENV_NAMES = {
    "PATH", "HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "TZ", "TMPDIR", "TERM", "PYTHONPATH", "PYTHONHOME",
    "PYTHONUNBUFFERED", "VIRTUAL_ENV", "LD_LIBRARY_PATH", "XDG_CACHE_HOME", "SYSTEMROOT",
}
_ENV_PREFIXES = ("LC_", "CUDA_", "CUDAOPT_", "CUPY_", "NVIDIA_", "NCCL_", "NVSHMEM_", "TORCH_", "OMP_",
                 "OPENBLAS_", "MKL_", "CCCL_")
_SECRET_WORDS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "CREDENTIAL", "AUTH")


def looks_secret(name: str) -> bool:
    """A variable name such as OPENAI_API_KEY or HF_TOKEN: never handed to anything the run starts."""
    return any(word in name.upper() for word in _SECRET_WORDS)


def worker_environment(parent: dict[str, str], **overrides: str) -> dict[str, str]:
    """The allow-listed part of ``parent`` (never a name that looks like a secret), plus ``overrides``."""
    env = {
        name: value for name, value in parent.items()
        if (name in _ENV_NAMES or name.startswith(_ENV_PREFIXES)) and not looks_secret(name)
    }
    env.update(overrides)
    return env
