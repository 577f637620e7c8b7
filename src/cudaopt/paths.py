"""Where cudaopt keeps what outlives a run but belongs to no project (caches and crash logs), and
whether a path a user names can take what cudaopt writes there."""

from __future__ import annotations

import datetime as dt
import os
import traceback
from pathlib import Path

from .compilekit.locate import cache_root
from .errors import ExperimentError

__all__ = ["cache_root"]  # kept beside the compiler, which the GPU worker's side may import

_SYSTEM_TREES = (Path("/proc"), Path("/sys"), Path("/dev"))


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


def check_writable_folder(path: Path, option: str) -> None:
    """Refuse, before any work, a folder that will be created (with its parents) and written: one
    in /proc, /sys or /dev, a file, or one whose nearest existing folder is not writable (a
    read-only mount is not)."""
    resolved = path.expanduser().resolve()
    if in_system_tree(resolved):
        raise ExperimentError(option, "", f"{path}: a system folder, not one to write results in")
    existing = resolved
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise ExperimentError(option, "", f"{path}: {existing} exists and is not a folder")
    if not writable(existing):
        raise ExperimentError(option, "", f"{path}: {existing} is not writable")


def crash_log(exc: BaseException, command: list[str]) -> Path:
    """Write the traceback of ``exc`` (an unexpected error: a bug) to a new file under the cache
    root; its path. Text that is no valid UTF-8 (a file name in another encoding) is written
    escaped, so writing the log never fails on it."""
    folder = cache_root() / "crashes"
    folder.mkdir(parents=True, exist_ok=True)
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    path = folder / f"crash-{stamp}-{os.getpid()}.log"
    text = f"cudaopt {' '.join(command)}\n" + "".join(traceback.format_exception(exc))
    path.write_text(text, encoding="utf-8", errors="backslashreplace")
    return path
