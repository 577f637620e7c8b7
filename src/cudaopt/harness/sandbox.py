"""What a candidate's compilation may reach: CUDA headers only, no host files, no secrets.

NVRTC opens any file an ``#include`` names, and its log (which quotes the file) goes back to
the model. So, before anything is compiled, every include directive must name a CUDA or NVRTC
header by an allowed name (``<cuda_fp16.h>``, ``<cooperative_groups.h>``, ``<cuda/std/...>``);
quoted or absolute paths, ``..``, and includes computed from macros are refused. The scan is
deliberately conservative: it reads every line after line splicing, also lines inside comments
or strings, so no lexer disagreement can hide a directive from it.

The worker process also gets a minimal environment (an allow-list of variable names) and an
empty temporary working directory, and compile logs keep only diagnostics about the candidate's
own source and the CUDA headers.
"""

from __future__ import annotations

import re

PROGRAM_NAME = "kernel.cu"  # what NVRTC calls the candidate's source in its diagnostics

# Headers a kernel may include: the CUDA toolkit's device headers, libcu++, CUB and cooperative
# groups. Angle or quoted form alike; the name is matched, never a path outside these roots.
_ALLOWED_HEADER = re.compile(
    r"(?:cuda_[\w.]+\.h(?:pp)?|math_constants\.h|mma\.h|cooperative_groups(?:\.h|/[\w/.]+)"
    r"|cuda/[\w/.]+|cub/[\w/.]+|nv/[\w/.]+|thrust/[\w/.]+|crt/[\w/.]+|sm_\d+_[\w.]+\.h(?:pp)?"
    r"|vector_types\.h|vector_functions\.h(?:pp)?|device_types\.h|device_functions\.h|builtin_types\.h"
    r"|curand_[\w.]+\.h|curand\.h|cstdint|stdint\.h|climits|limits\.h|cfloat|float\.h|cstddef|stddef\.h)"
)
_DIRECTIVE = re.compile(r"^\s*(?:#|%:|\?\?=)\s*(?:/\*.*?\*/\s*)*(include_next|include|import)\b(.*)$")
_TARGET = re.compile(r"^\s*(?:/\*.*?\*/\s*)*(?:<([^<>\n]*)>|\"([^\"\n]*)\")\s*(?://.*|/\*.*)?$")

ALLOWED_INCLUDES_HINT = ("only CUDA headers may be included, by name: <cuda_fp16.h>, <cuda_bf16.h>, "
                         "<math_constants.h>, <mma.h>, <cooperative_groups.h>, <cuda/...>, <cub/...>")


class IncludeError(ValueError):
    """An include directive the sandbox refuses; the message names the line."""


def check_includes(source: str) -> None:
    """Raise :class:`IncludeError` for the first include that is not an allowed CUDA header."""
    spliced = source.replace("\\\r\n", "").replace("\\\n", "")
    for number, line in enumerate(spliced.splitlines(), 1):
        match = _DIRECTIVE.match(line)
        if not match:
            continue
        directive, rest = match.groups()
        target = _TARGET.match(rest)
        if target is None:
            raise IncludeError(f"line {number}: '#{directive}' must name a header as <name>: "
                               f"computed includes are not allowed; {ALLOWED_INCLUDES_HINT}")
        name = target.group(1) if target.group(1) is not None else target.group(2)
        if directive != "include":
            raise IncludeError(f"line {number}: '#{directive}' is not allowed; {ALLOWED_INCLUDES_HINT}")
        if name.startswith("/") or ".." in name.split("/") or "\\" in name:
            raise IncludeError(f"line {number}: #include of a path ({name!r}) is not allowed; {ALLOWED_INCLUDES_HINT}")
        if not _ALLOWED_HEADER.fullmatch(name):
            raise IncludeError(f"line {number}: #include {name!r} is not an allowed header; {ALLOWED_INCLUDES_HINT}")


_LOCATION = re.compile(r"^(.+?)\(\d+\): ")


def filter_log(log: str, include_dirs: list[str]) -> str:
    """Only diagnostics located in the candidate's source or in the CUDA headers, with their
    quoted source lines; anything located elsewhere is replaced by one line saying so."""
    kept: list[str] = []
    keep = True
    for line in log.splitlines():
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
