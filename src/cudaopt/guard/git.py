"""A file as it is in another commit (``guard check --against-ref``), read with ``git show``."""

from __future__ import annotations

import subprocess
from pathlib import Path

from ..errors import ExperimentError

OPTION = "--against-ref"


def file_at(ref: str, path: Path, folder: Path) -> str | None:
    """The text of ``path`` in commit ``ref`` of the repository holding ``folder``; None when the
    commit has no such file. A ref git does not know, or a folder outside a repository, is bad input."""
    top = Path(_git(folder, "rev-parse", "--show-toplevel")).resolve()
    commit = _git(folder, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}",
                  missing=f"{ref!r} is not a commit of {top}")
    try:
        name = path.resolve().relative_to(top).as_posix()
    except ValueError:
        raise ExperimentError(OPTION, "", f"{path} is not inside the repository {top}") from None
    if subprocess.run(["git", "-C", str(folder), "cat-file", "-e", f"{commit}:{name}"],
                      capture_output=True).returncode != 0:
        return None
    data = subprocess.run(["git", "-C", str(folder), "show", f"{commit}:{name}"], capture_output=True).stdout
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise ExperimentError(OPTION, "", f"{name} at {ref} is not a UTF-8 text file") from None


def _git(folder: Path, *args: str, missing: str = "") -> str:
    try:
        done = subprocess.run(["git", "-C", str(folder), *args], capture_output=True, text=True, timeout=60)
    except FileNotFoundError:
        raise ExperimentError(OPTION, "", "git is not installed (needed to read the old kernel)") from None
    if done.returncode != 0:
        why = missing or " ".join(done.stderr.split()) or f"git {args[0]} failed"
        raise ExperimentError(OPTION, "", why)
    return done.stdout.strip()
