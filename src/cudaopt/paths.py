"""Where cudaopt keeps what outlives a run but belongs to no project (caches and crash logs), and
whether a path a user names can take what cudaopt writes there."""

from __future__ import annotations

import os
from pathlib import Path

from .errors import ExperimentError

_SYSTEM_TREES = (Path("/proc"), Path("/sys"), Path("/dev"))


def cache_root() -> Path:
    """``$CUDAOPT_CACHE_DIR``, else ``$XDG_CACHE_HOME/cudaopt`` (default ``~/.cache/cudaopt``)."""
    root = os.environ.get("CUDAOPT_CACHE_DIR")
    if root:
        return Path(root)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "cudaopt"


def in_system_tree(path: Path) -> bool:
    """Whether ``path`` lies in /proc, /sys or /dev (where root may "write" and nothing lands)."""
    resolved = path.expanduser().resolve()
    return any(resolved == tree or tree in resolved.parents for tree in _SYSTEM_TREES)


def writable(folder: Path) -> bool:
    """Whether files can be made in ``folder``: permitted, and not on a read-only mount (where
    root passes the permission check too)."""
    try:
        read_only = bool(os.statvfs(folder).f_flag & os.ST_RDONLY)
    except OSError:
        read_only = False
    return os.access(folder, os.W_OK | os.X_OK) and not read_only


def check_output_path(path: Path, option: str) -> None:
    """Refuse, before any work, an output path that cannot take a regular file: a device, a
    folder, a missing or read-only folder, a system folder (a symlink such as /dev/stdout is
    never replaced)."""
    if path.is_symlink() or (path.exists() and not path.is_file()):
        raise ExperimentError(option, "", f"{path}: exists and is not a regular file (use - for standard output)")
    folder = path.parent
    if in_system_tree(folder):
        raise ExperimentError(option, "", f"{path}: a system folder, not one to write results in")
    if not folder.is_dir():
        raise ExperimentError(option, "", f"{path}: folder {folder} does not exist")
    if not writable(folder) or (path.exists() and not os.access(path, os.W_OK)):
        raise ExperimentError(option, "", f"{path}: not writable")
