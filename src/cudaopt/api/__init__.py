"""The Python API (docs/api.md): the one door to cudaopt. The command line is a thin shell over it:
each command parses its flags, makes one call here and renders what comes back.

One function per command, each returning the typed result the command renders: ``check``,
``evaluate``, ``optimize``, ``verify``, ``replay``, ``report``, ``export``, ``guard_record``,
``guard_check``, ``audit``, ``import_kernelbench``, ``fast_p``, ``docs``, ``doctor``; and
``experiment`` (an experiment built in Python from a reference function and example inputs),
``load``, ``prepare_trial`` and ``gpus`` (a pool kept open between calls). Every check runs behind
these functions, before any GPU work, whichever door a user takes: bad input raises
:class:`~cudaopt.errors.ExperimentError` (one line naming the file, or the argument as its
command's flag, and the field), no GPU worker :class:`~cudaopt.errors.WorkerError`. Progress goes
to ``on_progress(event)`` (the events of record/events.py). Paths may be ``str`` or ``Path``.

Names are loaded on first use, so ``import cudaopt`` and the command line's start stay fast.
"""

from __future__ import annotations

import importlib

# name -> the module of cudaopt that defines it (relative to this package)
_WHERE = {
    "load": ".experiments", "check": ".experiments", "evaluate": ".experiments",
    "experiment": ".from_python", "optimize": ".optimizing", "RunResult": ".optimizing",
    "verify": ".winners", "replay": ".winners", "report": ".winners", "export": ".shipping",
    "guard_record": ".guards", "guard_check": ".guards", "audit": ".fleets", "Audited": ".fleets",
    "import_kernelbench": ".kernelbench", "fast_p": ".kernelbench", "docs": ".tools", "doctor": ".tools",
    "DocsAnswer": ".tools", "DoctorReport": ".tools", "gpus": ".workers", "SEED_MAX": ".arguments",
    "prepare_trial": ".experiments", "Trial": "..trial", "Experiment": "..experiment", "ExperimentArgs": "..experiment",
    "Checked": "..preflight", "Evaluation": "..evaluate", "Summary": "..record.files",
    "VerifyOutcome": "..record.files", "ReplayOutcome": "..record.files", "Recorded": "..guard.record",
    "GuardReport": "..guard.files", "AuditReport": "..fleet.files", "Imported": "..kernelbench.importer",
    "FastPReport": "..kernelbench.metrics", "ExperimentError": "..errors", "WorkerError": "..errors",
    "AttemptStarted": "..record.events", "AttemptFinished": "..record.events", "PhaseProgress": "..record.events",
    "UsageProgress": "..record.events", "StepProgress": "..record.events", "Notice": "..record.events",
    "crash_log": "..paths", "math_text": "..wire.precision",
}
__all__ = sorted(_WHERE)


def __getattr__(name: str):
    if name not in _WHERE:
        raise AttributeError(f"module 'cudaopt.api' has no attribute {name!r}")
    value = getattr(importlib.import_module(_WHERE[name], __name__), name)
    globals()[name] = value  # loaded once
    return value


def __dir__() -> list[str]:
    return __all__
