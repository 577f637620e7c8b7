"""``export``: a verified kernel handed over as code that runs without cudaopt (``cudaopt export``,
docs/export.md)."""

from __future__ import annotations

from pathlib import Path

from .. import exporter
from ..errors import ExperimentError
from ..trial import LaunchGiven
from .experiments import Given, PathArg, experiment_of
from .arguments import check as check_arguments
from .arguments import path_of


def export(run: PathArg | None = None, *, to: str, out: PathArg, experiment: Given | None = None,
           kernel: PathArg | None = None, entry: str | None = None, launch: LaunchGiven = None,
           unverified: bool = False, force: bool = False) -> list[Path]:
    """Write a run's verified winner (or, with ``experiment``, a kernel: default its initial kernel,
    checked as ``cudaopt check`` checks it) as target ``to`` (``torch``, ``cuda``, ``kernelbench``)
    into the folder ``out``; the paths written. A winner that did not pass verify, and any kernel
    given with an experiment, needs ``unverified``."""
    check_arguments({"entry": entry})
    if to not in exporter.TARGETS:
        raise ExperimentError("--to", "", f"{to!r} is not one of {', '.join(exporter.TARGETS)}")
    if run is None and experiment is None:
        raise ExperimentError("RUN_DIR", "", "give a run directory or an experiment (--config, --kernel, ...)")
    if run is not None and experiment is not None:
        raise ExperimentError(run, "", "give a run directory or an experiment (--config, --kernel, ...), not both")
    if run is not None and any(v is not None for v in (kernel, entry, launch)):
        raise ExperimentError(run, "", "give a run directory or an experiment (--config, --kernel, ...), not both: "
                                       "the kernel, entry and launch come from the run")
    if run is not None:
        source = exporter.from_run(path_of(run, "run"), unverified=unverified)
    else:
        source = exporter.from_flags(experiment_of(experiment), kernel=path_of(kernel, "kernel"), entry=entry,
                                     launch=launch, unverified=unverified)
    return exporter.write(source, to, path_of(out, "out", required=True), force=force)
