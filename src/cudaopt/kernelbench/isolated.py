"""The KernelBench importer run out of the CLI's process, under a time limit.

A problem file is the user's program: its module level runs when it is read and its ``forward``
runs while it is translated (importer.py, translate.py), and either may hang, crash or exhaust
memory. So ``cudaopt import kernelbench`` runs the whole import in a child process
(``python -m cudaopt.kernelbench.isolated``) and stops it at the limit; the parent only reads
back what was written, as any experiment is read (no code of the problem runs there).

The limit follows what the problem's sizes need (:func:`needed_s`): :data:`READ_S` while the file
is read and its inputs made, then, as the child learns the sizes (the inputs, before ``forward``
runs; then everything that crosses the boundary and the flops counted), what the CPU runs of the
import cost at those sizes, never more than the cap (``--time-limit``, else :data:`CAP_S`).
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

from ..children import run_child
from ..errors import ExperimentError, shortened
from ..experiment import load_experiment
from ..wire.protocol import WireModel
from .importer import FILES, Imported, import_problem
from .problem import CPU_BYTES, Layout

READ_S = 120.0  # reading the problem and making its inputs; also the least any import is given
CAP_S = 1800.0  # the most an import is given unless the caller says otherwise
CPU_RUNS = 10  # forward runs on the CPU an import makes, about (layouts, determinism, cases, negative controls)
CPU_BYTES_PER_S = 0.25e9  # what one CPU forward moves per second, at the least (one core, an elementwise op)
CPU_FLOPS_PER_S = 10e9  # what one CPU forward computes per second, at the least (one core, a matrix product)


class Sizes(WireModel):
    """What the child has learnt of the problem's sizes: the bytes that cross the boundary (its
    inputs, then with its parameters and outputs) and the flops torch's counter counts."""

    nbytes: int
    flops: int = 0


def needed_s(sizes: Sizes) -> float:
    """What importing a problem of these sizes may take: :data:`READ_S`, plus :data:`CPU_RUNS`
    forward runs on the CPU over its bytes and flops. A problem larger than the CPU takes
    (``CPU_BYTES``) runs there at smaller sizes only: its bytes count up to that limit and its
    flops in proportion."""
    share = min(1.0, CPU_BYTES / sizes.nbytes) if sizes.nbytes else 1.0
    work = min(sizes.nbytes, CPU_BYTES) / CPU_BYTES_PER_S + sizes.flops * share / CPU_FLOPS_PER_S
    return READ_S + CPU_RUNS * work


class ImportJob(WireModel):
    """What the child is asked to import, and where it writes its answer."""
    path: str
    out: str
    name: str | None = None
    seed: int = 42
    rtol: float | None = None
    atol: float | None = None
    force: bool = False
    answer: str
    sizes: str  # where the child writes the problem's Sizes, as it learns them


class ImportAnswer(WireModel):
    """The child's answer: the notes of a done import, or the bad input that stopped it."""
    notes: list[str] = []
    error: tuple[str, str, str] | None = None  # file, field, message


def import_isolated(path: Path, out: Path, *, name: str | None = None, seed: int = 42, rtol: float | None = None,
                    atol: float | None = None, force: bool = False, timeout_s: float | None = None):
    """:func:`~.importer.import_problem` in a child process stopped at the limit its sizes need,
    at most ``timeout_s`` (default :data:`CAP_S`); the experiment it wrote, loaded here (an
    :class:`~.importer.Imported`)."""
    if not path.is_file():
        raise ExperimentError(path, "", "not found")
    cap = CAP_S if timeout_s is None else timeout_s
    with tempfile.TemporaryDirectory(prefix="cudaopt-import-") as tmp:
        answer, sizes = Path(tmp) / "answer.json", Path(tmp) / "sizes.json"
        job = ImportJob(path=str(path.resolve()), out=str(out.resolve()), name=name, seed=seed, rtol=rtol, atol=atol,
                        force=force, answer=str(answer), sizes=str(sizes))

        def limit() -> float:
            return min(cap, _needed(sizes))

        try:
            done = run_child([sys.executable, "-m", "cudaopt.kernelbench.isolated"], input=job.to_json(),
                             timeout=limit)
        except subprocess.TimeoutExpired as stopped:
            raise ExperimentError(path, "", _stopped(stopped.timeout, sizes, cap, timeout_s)) from None
        if not answer.is_file():
            lines = [line for line in done.stderr.splitlines() if line.strip()]
            why = f"signal {-done.returncode}" if done.returncode < 0 else f"exit status {done.returncode}"
            last = f": {shortened(lines[-1])}" if lines else ""
            if "Traceback" in done.stderr:  # the importer's own error: a bug
                raise RuntimeError(f"the KernelBench importer failed ({why}{last})")
            # killed (for memory, a crash in native code the problem called) or ended by the problem (os._exit)
            raise ExperimentError(path, "", f"running the problem ended the importer ({why}{last}) before it "
                                            "finished")
        result = ImportAnswer.model_validate_json(answer.read_text())
    if result.error is not None:
        error = ExperimentError(*result.error)
        if Path(error.file).parent.resolve() == out.resolve():
            raise _discarded(path, out, error)
        raise error
    try:
        experiment = load_experiment(out / "experiment.json")
    except ExperimentError as exc:
        raise _discarded(path, out, exc) from None
    return Imported(experiment=experiment, folder=out, notes=result.notes)


def _needed(sizes: Path) -> float:
    """What the sizes the child last wrote need; :data:`READ_S` before it knows them."""
    try:
        return needed_s(Sizes.model_validate_json(sizes.read_text()))
    except (OSError, ValueError):
        return READ_S


def _stopped(after: float, sizes: Path, cap: float, given: float | None) -> str:
    """Why an import was stopped where it was: a cap short of what the problem's sizes need says so,
    rather than call a slow problem one that never returns."""
    needed = _needed(sizes)
    if cap <= needed:
        by = "--time-limit" if given is not None else "the most any import is given"
        if sizes.is_file():
            return (f"the import did not finish within {after:g} s ({by}), short of the {needed:.0f} s its sizes "
                    "may need on this CPU (--time-limit raises the limit)")
        return (f"the import did not finish within {after:g} s ({by}), before get_inputs() had made its inputs "
                "(--time-limit raises the limit)")
    basis = "what its sizes need" if sizes.is_file() else "reading the problem and making its inputs"
    return (f"the import did not finish within {after:g} s ({basis}): its module-level code or Model.forward never "
            "returned (--time-limit raises the limit)")


def _discarded(path: Path, out: Path, error: ExperimentError) -> ExperimentError:
    """An experiment written from the problem that does not load (its sizes, say): the problem's
    fault, named as such, and no half-made experiment kept in ``out``."""
    for written in FILES:
        (out / written).unlink(missing_ok=True)
    return ExperimentError(path, "", f"the experiment made from it does not load, so none was kept in {out}: {error}")


def _child() -> int:
    """The child's side: import, and answer with the notes or the bad input (anything else is a
    bug: its traceback goes to standard error)."""
    job = ImportJob.model_validate_json(sys.stdin.read())

    def tell(layout: Layout) -> None:  # the parent polls the file: written whole, then renamed over it
        partial = Path(job.sizes + ".part")
        partial.write_text(Sizes(nbytes=layout.nbytes(), flops=layout.flops).to_json())
        partial.replace(job.sizes)

    try:
        imported = import_problem(Path(job.path), Path(job.out), name=job.name, seed=job.seed, rtol=job.rtol,
                                  atol=job.atol, force=job.force, on_layout=tell)
        answer = ImportAnswer(notes=imported.notes)
    except ExperimentError as exc:
        answer = ImportAnswer(error=(exc.file, exc.field, exc.message))
    except SystemExit as exc:  # the problem's own code called exit()
        answer = ImportAnswer(error=(job.path, "", f"the problem called exit({exc.code}) while it was imported"))
    Path(job.answer).write_text(answer.to_json())
    return 0


if __name__ == "__main__":
    from ..compilekit import lifeline

    lifeline.hold()
    sys.exit(_child())
