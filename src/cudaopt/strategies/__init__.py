"""Optimisation strategies as plug-ins: each registers itself by name and implements :class:`Strategy`.

``optimize.py`` compiles what the strategy will measure first (its ``ahead``) while it evaluates the
baseline (the recorder's ``ensure_baseline``), then hands the run to the chosen strategy until it
returns a stop reason; every candidate it evaluates goes
through the recorder, so the run directory means the same whichever strategy ran. To add one:
a module here with a class decorated ``@register("name")`` (strategies/base.py), imported here.
"""

from __future__ import annotations

from . import agent, tune  # noqa: F401  (the strategies register themselves)
from .base import AUTO, REGISTRY, Context, Strategy, choose, get, names, register

__all__ = ["AUTO", "REGISTRY", "Context", "Strategy", "choose", "get", "names", "register"]
