"""Finding NVIDIA's command-line tools (ncu, nvdisasm, cuobjdump) on this machine, and cudaopt's own cache."""

from __future__ import annotations

import importlib.util
import os
import shutil
from pathlib import Path

CUDA_BIN = Path("/usr/local/cuda/bin")


def find_tool(name: str) -> str | None:
    """PATH first, then /usr/local/cuda/bin, $CUDA_HOME/bin, and NVIDIA's pip wheels (nvidia/cu13/bin)."""
    found = shutil.which(name)
    if found:
        return found
    folders = [CUDA_BIN]
    if os.environ.get("CUDA_HOME"):
        folders.append(Path(os.environ["CUDA_HOME"]) / "bin")
    folders.extend(_wheel_bins())
    for folder in folders:
        candidate = folder / name
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return None


def _wheel_bins() -> list[Path]:
    """Where wheels such as nvidia-cuda-nvdisasm put their executables."""
    spec = importlib.util.find_spec("nvidia")
    if spec is None:
        return []
    return [Path(p) / "cu13" / "bin" for p in spec.submodule_search_locations or []]


def cache_root() -> Path:
    """``$CUDAOPT_CACHE_DIR``, else ``$XDG_CACHE_HOME/cudaopt`` (default ``~/.cache/cudaopt``)."""
    root = os.environ.get("CUDAOPT_CACHE_DIR")
    if root:
        return Path(root)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "cudaopt"
