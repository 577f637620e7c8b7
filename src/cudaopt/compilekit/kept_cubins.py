"""Cubins kept on disk between processes, so that a kernel is compiled once per machine.

The pre-flight compiles the initial kernel, the reference and the tunable kernel's first
configuration before any GPU worker starts; the worker then needs the same cubins, and a second
run of the same experiment needs all of them again. Each is kept under a key made of everything
that decides NVRTC's output (the kernel's source, entry, defines and options, the target
architecture, NVRTC's version, the header roots, and the code of this package, which sets NVRTC's
options and reads its report), in ``<cache root>/cubins``.

Only successful compilations are kept, each with its compile report as it came from the
compiler process; the math units are read again from the cubin on every use (compiler.py), so
the precision policy never rests on a stored verdict. The cache never decides an outcome: an
entry that cannot be read, or a folder that cannot be written, means the kernel is compiled.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import tempfile
from pathlib import Path

from ..wire.protocol import KernelSpec
from ..wire.results import CompileInfo
from .locate import cache_root

MAX_ENTRIES = 2048  # beyond it the least recently written quarter is removed


def folder() -> Path:
    return cache_root() / "cubins"


@functools.lru_cache(maxsize=1)
def _compiler_code() -> str:
    """A digest of this package's sources: a change to how kernels are compiled is a new key."""
    digest = hashlib.sha256()
    for path in sorted(Path(__file__).parent.glob("*.py")):
        digest.update(path.read_bytes())
    return digest.hexdigest()


def key_of(spec: KernelSpec, arch: str) -> str:
    from .nvrtc_build import header_roots, nvrtc_version

    identity = {"kernel": spec.to_data(), "arch": arch, "nvrtc": nvrtc_version(), "code": _compiler_code(),
                "roots": [list(root) for root in header_roots()]}
    return hashlib.sha256(json.dumps(identity, sort_keys=True, default=str).encode()).hexdigest()


def load(key: str) -> tuple[bytes, CompileInfo] | None:
    """The kept cubin and compile report under ``key``; None when absent or unreadable."""
    base = folder() / key
    try:
        code = base.with_suffix(".cubin").read_bytes()
        report = json.loads(base.with_suffix(".json").read_text())
        info = CompileInfo.model_validate(report["info"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if hashlib.sha256(code).hexdigest() != report.get("cubin_sha256"):  # a torn or replaced entry
        return None
    return code, info.model_copy(update={"kept": True, "seconds": 0.0})


def store(key: str, code: bytes, info: CompileInfo) -> None:
    """Keep ``code`` and its report under ``key``, each file written whole (a reader never sees a
    partial one); nothing happens where the cache folder cannot be written."""
    try:
        where = folder()
        where.mkdir(parents=True, exist_ok=True)
        report = json.dumps({"cubin_sha256": hashlib.sha256(code).hexdigest(), "info": info.model_dump(mode="json")})
        for suffix, data in ((".cubin", code), (".json", report.encode())):
            handle, tmp = tempfile.mkstemp(dir=where, prefix=".tmp-")
            with os.fdopen(handle, "wb") as out:
                out.write(data)
            os.replace(tmp, where / f"{key}{suffix}")
        _prune(where)
    except OSError:
        return


def _prune(where: Path) -> None:
    cubins = sorted(where.glob("*.cubin"), key=lambda p: p.stat().st_mtime)
    if len(cubins) <= MAX_ENTRIES:
        return
    for path in cubins[: len(cubins) // 4]:
        path.unlink(missing_ok=True)
        path.with_suffix(".json").unlink(missing_ok=True)
