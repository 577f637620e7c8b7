"""``cudaopt export``: a verified kernel handed over as code that runs without cudaopt (docs/export.md).

Targets, one module each: ``torch`` (a Python module registering a PyTorch custom operator),
``cuda`` (a header and a ``.cu`` with a host launcher), ``kernelbench`` (a ``ModelNew`` file for an
imported KernelBench problem). Each is made from an :class:`~.source.ExportSource` (source.py: a
run's verified winner, or a kernel given by flags) and records where it came from in its header.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import ExperimentError
from .lower import LowerError
from .source import ExportSource, from_flags, from_run
from . import cuda_target, kernelbench_target, torch_target
from ..record.rundir import write_atomic

TARGETS: tuple[str, ...] = ("torch", "cuda", "kernelbench")

__all__ = ["TARGETS", "ExportSource", "files", "from_flags", "from_run", "write"]


def files(src: ExportSource, to: str) -> dict[str, str]:
    """The files of target ``to``: name -> text (nothing written)."""
    name = src.name
    try:
        if to == "torch":
            return {f"{name}.py": torch_target.generate(src)}
        if to == "cuda":
            return {f"{name}.h": cuda_target.header(src), f"{name}.cu": cuda_target.source(src)}
        if to == "kernelbench":
            return {f"{name}_model_new.py": kernelbench_target.generate(src)}
    except LowerError as exc:
        raise ExperimentError(src.provenance.origin, "launch", str(exc)) from None
    raise ExperimentError("--to", "", f"{to!r} is not one of {', '.join(TARGETS)}")


def write(src: ExportSource, to: str, out: Path, *, force: bool = False) -> list[Path]:
    """Write target ``to`` into folder ``out``; existing files are replaced only with ``force``."""
    made = files(src, to)
    if out.exists() and not out.is_dir():
        raise ExperimentError("--out", "", f"{out}: exists and is not a folder")
    present = [n for n in made if (out / n).exists()]
    if present and not force:
        raise ExperimentError("--out", "", f"{out} already holds {', '.join(present)} (--force replaces them)")

    paths = []
    try:
        for name, text in made.items():
            write_atomic(out / name, text)
            paths.append(out / name)
    except OSError as exc:
        raise ExperimentError("--out", "", f"{out}: {exc.strerror or exc}") from None
    return paths
