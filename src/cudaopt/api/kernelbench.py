"""``import_kernelbench`` and ``fast_p``: KernelBench problems in, KernelBench's metrics out
(``cudaopt import kernelbench`` and ``cudaopt fast-p``, docs/kernelbench.md)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ..errors import ExperimentError
from ..kernelbench.importer import Imported
from ..kernelbench.isolated import import_isolated
from ..kernelbench.metrics import THRESHOLDS, FastPReport, report
from ..paths import check_output_path, check_writable_folder
from ..record.rundir import write_atomic
from ..wire.expr import IDENTIFIER
from .arguments import check as check_arguments
from .arguments import path_of
from .experiments import PathArg


def import_kernelbench(problem: PathArg, out: PathArg, *, name: str | None = None, seed: int = 42,
                       rtol: float | None = None, atol: float | None = None, force: bool = False,
                       time_limit: float | None = None) -> Imported:
    """Write a complete experiment for a KernelBench problem file into the folder ``out``: the
    PyTorch reference, PyTorch eager and torch.compile as vendors, the problem's sizes as the
    performance case, smaller odd correctness cases and a holdout; no initial kernel (a model
    writes the first one). The problem runs in a process of its own, stopped at the limit its sizes
    need, at most ``time_limit`` seconds (default 1800). The experiment written, loaded, and the
    import's notes."""
    check_arguments({"seed": seed, "rtol": rtol, "atol": atol, "time_limit": time_limit})
    source, folder = path_of(problem, "problem", True), path_of(out, "out", True)
    if name is not None and not (isinstance(name, str) and IDENTIFIER.fullmatch(name)):
        raise ExperimentError("--name", "", f"{name!r} is not a C identifier")
    if not (folder.exists() and not folder.is_dir()):  # a file in the way is said by the importer, naming it
        check_writable_folder(folder, "--out")
    return import_isolated(source, folder, name=name, seed=seed, rtol=rtol, atol=atol, force=force,
                           timeout_s=time_limit)


def fast_p(runs: PathArg | Sequence[PathArg], *, p: Sequence[float] | None = None, baseline: str = "eager",
           json_out: PathArg | None = None) -> FastPReport:
    """KernelBench's metrics over runs (one per problem; a results folder stands for its runs): each
    run correct or not and its speed-ups over PyTorch eager and torch.compile, and ``fast_p``, the
    fraction correct and faster than the ``baseline`` by more than each ``p`` (default 0, 1, 1.5, 2).
    Written to ``json_out`` when given."""
    if p is not None and not isinstance(p, (list, tuple)):
        raise ExperimentError("--p", "", f"{p!r}: give a list of thresholds, such as [1, 2]")
    check_arguments({"p": list(p) if p is not None else None})
    if baseline not in ("eager", "compile"):
        raise ExperimentError("--baseline", "", f"{baseline!r} is not eager or compile")
    paths = [path_of(r, "runs", True) for r in (runs if isinstance(runs, (list, tuple)) else [runs])]
    if not paths:
        raise ExperimentError("RUNS", "", "give at least one run directory or results folder")
    out = path_of(json_out, "json_out")
    if out is not None:
        check_output_path(out, "--json")
    result = report(paths, list(p or THRESHOLDS), baseline)  # type: ignore[arg-type]
    if out is not None:
        write_atomic(out, result.to_json(indent=2) + "\n")
    return result
