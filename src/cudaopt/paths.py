"""Where cudaopt keeps what outlives a run but belongs to no project: caches and crash logs."""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    """``$CUDAOPT_CACHE_DIR``, else ``$XDG_CACHE_HOME/cudaopt`` (default ``~/.cache/cudaopt``)."""
    root = os.environ.get("CUDAOPT_CACHE_DIR")
    if root:
        return Path(root)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "cudaopt"
