"""The checks every API function runs on its arguments before it does anything (bad input: one
line naming the argument as its command's flag, ``--repeats``, and what is wrong). The command
line has no checks of its own: a flag's value reaches the API as the argument of that name, so
both doors refuse the same values with the same words.

Ranges are declared once, here (:data:`RANGES`); the rules for text arguments (a model name, a
URL, a kernel name) next to them.
"""

from __future__ import annotations

import math
import numbers
import os
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import urlparse

from ..errors import ExperimentError
from ..paths import check_writable_folder
from ..wire.fields import unusable_name
from ..wire.protocol import MAX_LAUNCHES

SEED_MAX = 2**32 - 1  # seeds given by a user are non-negative 32-bit numbers
REASONING_EFFORTS = ("minimal", "low", "medium", "high")

# argument -> (lowest, highest, whether the lowest is excluded); None: no bound
RANGES: dict[str, tuple[float | None, float | None, bool]] = {
    "seed": (0, SEED_MAX, False), "repeats": (1, None, False), "device": (0, None, False),
    "warmup": (0, MAX_LAUNCHES, False), "iterations": (1, MAX_LAUNCHES, False),
    "max_iterations": (1, None, False), "max_model_calls": (1, None, False), "max_cost_usd": (0, None, False),
    "time_limit": (1, None, False), "patience": (1, None, False), "max_model_errors": (1, None, False),
    "proposals": (1, None, False), "max_evals": (1, None, False), "top": (1, None, False),
    "roof_target": (0.01, 1.0, False), "confidence": (0.5, 0.999, False), "rtol": (0, None, False),
    "atol": (0, None, False), "engineer_hours": (0, None, False), "engineer_rate_usd": (0, None, False),
    "gpu_hour_usd": (0, None, False), "calls_per_month": (0, None, False),
    "payback_window_months": (0, None, True), "p": (None, None, False),
}
WHOLE = {"seed", "repeats", "device", "warmup", "iterations", "max_iterations", "max_model_calls", "patience",
         "max_model_errors", "proposals", "max_evals", "top"}  # counts and ordinals
TEXT = {"model", "reasoning_effort", "base_url", "entry", "ray", "query", "arch", "pages", "description",
        "signature"}
SEVERAL = {"p", "pages"}  # the arguments that take a list
FLAGS = {"json_out": "--json", "results": "--results-dir", "run": "RUN_DIR", "query": "QUERY", "target": "TARGET",
         "source": "SOURCE", "problem": "PROBLEM", "files": "FILES", "runs": "RUNS", "pages": "--page",
         "folder": "folder"}  # api.experiment's, which no flag gives
URLS = {"base_url": "http://localhost:8000/v1", "pages": "https://docs.nvidia.com/cuda/..."}  # and an example


def flag(name: str) -> str:
    """How an argument is named in an error: its command's flag (``json_out`` -> ``--json``)."""
    return FLAGS.get(name, "--" + name.replace("_", "-"))


def path_of(value: str | os.PathLike | None, name: str, required: bool = False) -> Path | None:
    """The path argument ``name`` given as ``str`` or ``Path`` (None stays None, unless
    ``required``). Any other type, or a name the operating system would refuse (too long, a NUL
    byte), is bad input naming the argument: the OS would raise on it deep inside, naming nothing."""
    if value is None and required:
        raise ExperimentError(flag(name), "", "missing: give a path")
    if value is None:
        return None
    path = Path(value) if isinstance(value, str) or (isinstance(value, os.PathLike)
                                                     and isinstance(os.fspath(value), str)) else None
    if path is None:
        raise ExperimentError(flag(name), "", f"a value of type {type(value).__name__} is not a path: give a str or "
                                              "Path")
    why = unusable_name(str(path))
    if why is not None:
        raise ExperimentError(flag(name), "", why)
    return path


def check(values: Mapping[str, object], *, lowest: Mapping[str, float] | None = None) -> None:
    """Raise :class:`ExperimentError` naming the first argument whose value is unusable: a number
    that is not finite or out of its range (``lowest`` raises a command's own minimum), a model name,
    a reasoning effort, a URL, a kernel name, a Ray address or a query that cannot be used, a
    folder that will be written but cannot be."""
    for name, value in values.items():
        if value is None:
            continue
        for item in value if name in SEVERAL and isinstance(value, (list, tuple)) else [value]:
            _kind(name, item)
            _number(name, item, (lowest or {}).get(name))
        _text(name, value)


def _kind(name: str, value) -> None:
    """A value of the type its flag takes: the command line's parser converts a flag's text, but a
    Python caller's value arrives as it is, and a string where a number belongs would otherwise
    pass every range check and fail deep inside, after the GPU workers started."""
    if name in TEXT:
        fits, kind = isinstance(value, str), "a string"
    elif name in RANGES:
        fits = isinstance(value, numbers.Real) and not isinstance(value, bool) and (
            name not in WHOLE or isinstance(value, numbers.Integral))
        kind = "a whole number" if name in WHOLE else "a number"
    else:
        return
    if not fits:
        shown = repr(value) if len(repr(value)) <= 40 else f"a {type(value).__name__}"
        raise ExperimentError(flag(name), "", f"{shown} is not {kind}")


def _number(name: str, value, lowest: float | None) -> None:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return
    if not math.isfinite(value):
        raise ExperimentError(flag(name), "", f"{value} is not a finite number")
    low, high, open_low = RANGES.get(name, (None, None, False))
    low = lowest if lowest is not None else low
    if low is not None and (value < low or (open_low and value == low)):
        raise ExperimentError(flag(name), "", f"{value} is {'not above' if open_low else 'below'} {low:g}")
    if high is not None and value > high:
        what = " launches a case" if name in ("warmup", "iterations") else ""
        raise ExperimentError(flag(name), "", f"{value:,}{what}: at most {high:,}")


def _text(name: str, value) -> None:
    if name == "reasoning_effort" and value not in REASONING_EFFORTS:
        raise ExperimentError(flag(name), "", f"{value!r} is not one of {', '.join(REASONING_EFFORTS)}")
    if name == "model" and (not value.strip() or any(c.isspace() for c in value)):
        raise ExperimentError(flag(name), "", f"{value!r} is not a model name such as openai:gpt-5-mini")
    if name in URLS:
        for item in value if isinstance(value, (list, tuple)) else [value]:
            url = urlparse(item)
            if url.scheme not in ("http", "https") or not url.hostname or any(c.isspace() for c in item):
                raise ExperimentError(flag(name), "", f"{item!r} is not an http(s) URL such as {URLS[name]}")
    if name == "entry" and not value.isidentifier():
        raise ExperimentError(flag(name), "", f"{value!r} is not a kernel name (a C identifier)")
    if name == "ray" and not value.strip():
        raise ExperimentError(flag(name), "", "empty: give an ADDRESS, auto or local")
    if name == "query" and not value.strip():
        raise ExperimentError(flag(name), "", "empty: give words to search for")
    if name == "results":
        check_writable_folder(path_of(value, name), flag(name))
