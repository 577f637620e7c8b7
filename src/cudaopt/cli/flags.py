"""Option values every command checks the same way, before it does anything (exit 2, one line
naming the flag): numbers are finite, a model is named, a server is a URL, a reasoning effort
is one the providers know, a folder that will be written is writable. Typer checks types and
ranges (``min``/``max``); these are the rules it has no words for.
"""

from __future__ import annotations

import math
import typing
from pathlib import Path
from urllib.parse import urlparse

from ..errors import ExperimentError
from ..paths import in_system_tree, writable
from ..wire.protocol import MAX_LAUNCHES

REASONING_EFFORTS = ("minimal", "low", "medium", "high")
SEED_MAX = 2**32 - 1  # seeds are non-negative 32-bit numbers
URL_FLAGS = {"base_url": "http://localhost:8000/v1", "page": "https://docs.nvidia.com/cuda/..."}  # and an example
WRITTEN_FOLDERS = ("results_dir",)  # options naming a folder the command creates and writes into


def flag_name(fn, name: str) -> str:
    """The flag a parameter of a typer command is given by (``threshold`` -> ``--p``)."""
    try:
        hints = typing.get_type_hints(fn, include_extras=True)
    except Exception:  # an annotation that cannot be resolved: the parameter's own name
        hints = {}
    for meta in getattr(hints.get(name), "__metadata__", ()):
        given = [getattr(meta, "default", None), *(getattr(meta, "param_decls", None) or ())]  # typer.Option("--p")
        decls = [d for d in given if isinstance(d, str) and d.startswith("--")]
        if decls:
            return decls[0].split("/")[0]
    return "--" + name.replace("_", "-")


def check_flags(fn, values: dict) -> None:
    """Raise :class:`ExperimentError` naming the first option whose value is unusable."""
    for name, value in values.items():
        items = value if isinstance(value, (list, tuple)) else [value]
        for item in items:
            if isinstance(item, float) and not math.isfinite(item):
                raise ExperimentError(flag_name(fn, name), "", f"{item} is not a finite number")
        if value is None:
            continue
        if name == "reasoning_effort" and value not in REASONING_EFFORTS:
            raise ExperimentError("--reasoning-effort", "", f"{value!r} is not one of {', '.join(REASONING_EFFORTS)}")
        if name == "model" and (not value.strip() or any(c.isspace() for c in value)):
            raise ExperimentError("--model", "", f"{value!r} is not a model name such as openai:gpt-5-mini")
        if name in URL_FLAGS:
            for item in items:
                url = urlparse(item)
                if url.scheme not in ("http", "https") or not url.hostname or any(c.isspace() for c in item):
                    raise ExperimentError(flag_name(fn, name), "", f"{item!r} is not an http(s) URL such as "
                                                                   f"{URL_FLAGS[name]}")
        if name == "entry" and not value.isidentifier():
            raise ExperimentError("--entry", "", f"{value!r} is not a kernel name (a C identifier)")
        if name == "ray" and not value.strip():
            raise ExperimentError("--ray", "", "empty: give an ADDRESS, auto or local")
        if name == "query" and not value.strip():
            raise ExperimentError("QUERY", "", "empty: give words to search for")
        if name in ("warmup", "iterations") and value > MAX_LAUNCHES:
            raise ExperimentError(flag_name(fn, name), "", f"{value} launches a case: at most {MAX_LAUNCHES:,}")
        if name in WRITTEN_FOLDERS:
            check_writable_folder(Path(value), flag_name(fn, name))


def check_writable_folder(path: Path, flag: str) -> None:
    """A folder that will be created (with its parents) and written: not in /proc, /sys or /dev,
    not a file, and its nearest existing folder writable (a read-only mount is not)."""
    resolved = path.expanduser().resolve()
    if in_system_tree(resolved):
        raise ExperimentError(flag, "", f"{path}: a system folder, not one to write results in")
    existing = resolved
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise ExperimentError(flag, "", f"{path}: {existing} exists and is not a folder")
    if not writable(existing):
        raise ExperimentError(flag, "", f"{path}: {existing} is not writable")
