"""The KernelBench importer run out of the CLI's process, under a time limit.

A problem file is the user's program: its module level runs when it is read and its ``forward``
runs while it is translated (importer.py, translate.py), and either may hang, crash or exhaust
memory. So ``cudaopt import kernelbench`` runs the whole import in a child process
(``python -m cudaopt.kernelbench.isolated``) and stops it at the limit; the parent only reads
back what was written, as any experiment is read (no code of the problem runs there).
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

IMPORT_TIMEOUT_S = 300.0  # what one problem may take to import (its forward runs on the CPU at several sizes)


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


class ImportAnswer(WireModel):
    """The child's answer: the notes of a done import, or the bad input that stopped it."""
    notes: list[str] = []
    error: tuple[str, str, str] | None = None  # file, field, message


def import_isolated(path: Path, out: Path, *, name: str | None = None, seed: int = 42, rtol: float | None = None,
                    atol: float | None = None, force: bool = False, timeout_s: float = IMPORT_TIMEOUT_S):
    """:func:`~.importer.import_problem` in a child process stopped after ``timeout_s``; the
    experiment it wrote, loaded here (an :class:`~.importer.Imported`)."""
    if not path.is_file():
        raise ExperimentError(path, "", "not found")
    with tempfile.TemporaryDirectory(prefix="cudaopt-import-") as tmp:
        answer = Path(tmp) / "answer.json"
        job = ImportJob(path=str(path.resolve()), out=str(out.resolve()), name=name, seed=seed, rtol=rtol, atol=atol,
                        force=force, answer=str(answer))
        try:
            done = run_child([sys.executable, "-m", "cudaopt.kernelbench.isolated"], input=job.to_json(),
                             timeout=timeout_s)
        except subprocess.TimeoutExpired:
            raise ExperimentError(path, "", f"the import did not finish within {timeout_s:g} s: its module-level "
                                            "code or Model.forward never returned (--time-limit raises the "
                                            "limit)") from None
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
    try:
        imported = import_problem(Path(job.path), Path(job.out), name=job.name, seed=job.seed, rtol=job.rtol,
                                  atol=job.atol, force=job.force)
        answer = ImportAnswer(notes=imported.notes)
    except ExperimentError as exc:
        answer = ImportAnswer(error=(exc.file, exc.field, exc.message))
    except SystemExit as exc:  # the problem's own code called exit()
        answer = ImportAnswer(error=(job.path, "", f"the problem called exit({exc.code}) while it was imported"))
    Path(job.answer).write_text(answer.to_json())
    return 0


if __name__ == "__main__":
    sys.exit(_child())
