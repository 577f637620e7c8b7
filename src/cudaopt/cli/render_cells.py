"""Table cells every command group writes the same way."""

from __future__ import annotations


def num(value, spec: str = ".2f") -> str:
    return format(value, spec) if isinstance(value, (int, float)) else "-"
