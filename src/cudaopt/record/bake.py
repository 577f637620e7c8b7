"""A winner's tunable values written into its files (best.cu, best-launch.json)."""

from __future__ import annotations

import re


def bake(source: str, defines: dict) -> str:
    """The source with its tunable values written in as #defines (what best.cu holds)."""
    if not defines:
        return source
    lines = [f"#define {k} {v}" for k, v in sorted(defines.items())]
    return "// tuned values, baked in by cudaopt\n" + "\n".join(lines) + "\n" + source


def bake_launch(launch: dict, defines: dict) -> dict:
    """Launch expressions with tunable names replaced by their values (in lets and tiers too;
    names of lets and tiers stay as they are)."""
    def sub(value):
        if not isinstance(value, str):
            return value
        parts = re.split(r"('[^']*'|\"[^\"]*\")", value)  # quoted kernel names (entry) stay as they are
        for i in range(0, len(parts), 2):
            for name, val in defines.items():
                parts[i] = re.sub(rf"\b{re.escape(name)}\b", str(val), parts[i])
        return "".join(parts)

    def baked(value):
        if isinstance(value, dict):
            return {key: (val if key == "name" else baked(val)) for key, val in value.items()}
        return [baked(v) for v in value] if isinstance(value, list) else sub(value)

    return baked(launch)
