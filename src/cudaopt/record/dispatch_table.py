"""A tuned winner per shape class: the dispatch table of a tune run (``dispatch.json``).

A tune run measures every configuration on every performance case, so it knows which one won
where; one winner applies a single configuration everywhere. When the experiment declares shape
classes (``tune.dispatch``: an ordered list of ``name`` and ``when``, a boolean expression over
the case's scalars, the last one's ``when`` optional, the first that holds is taken, exactly as a
launch's tiers are chosen), the table gives each class the configuration with the best geometric
mean over the performance cases of that class, when it beats the single winner there by more than
``MARGIN`` (else the class keeps the winner). Trust and generalisation:

- only configurations that passed every case of the run (correctness and performance) enter it;
- a class no performance case fell into keeps the single winner, and so does a shape that falls
  into no class: the table never guesses beyond what was measured;
- it is *adopted* only when its geometric mean over the performance cases beats the single
  winner's by more than ``MARGIN``; ``verify`` then checks and times each shape with its class's
  configuration, beside the single winner where they differ, on shapes the run never measured.

A request carries one kernel: each shape is evaluated with its class's configuration (the same
source, other defines), so nothing new is compiled that the run did not already check.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

from pydantic import Field

from ..config import DispatchClass
from ..wire import expr
from ..wire.protocol import WireModel
from .rundir import RunDir
from .runs import read_run_json
from ..wire.fields import version_field

MARGIN = 0.02  # the table must beat the single winner's geometric mean by more than this

Defines = dict[str, int | float | str]


class DispatchRow(WireModel):
    """One shape class: the configuration chosen there and how it compared on the class's cases."""

    name: str
    when: str | None = None
    attempt: int  # the attempt whose configuration this class uses (the winner's when unseen)
    defines: Defines = Field(default_factory=dict)
    cases: list[str] = Field(default_factory=list)  # the performance cases of this class (none: unseen)
    class_us: float | None = None  # the chosen configuration's geometric mean over those cases
    single_us: float | None = None  # the single winner's there


class DispatchTable(WireModel):
    """dispatch.json (version 1): the shape classes of a tune run and the configuration of each."""

    schema_version: int = version_field(1)
    winner_attempt: int
    winner_defines: Defines = Field(default_factory=dict)
    rows: list[DispatchRow]
    single_score_us: float  # the winner's geometric mean over the performance cases
    table_score_us: float  # the table's: each case timed with its class's configuration
    adopted: bool
    reason: str  # why it is (or is not) adopted, in a sentence

    def row_for(self, scalars: Mapping[str, int | float]) -> DispatchRow | None:
        """The class of a shape (the first whose ``when`` holds); None: no class, the single winner."""
        return classify(self.rows, scalars)

    def choose(self, scalars: Mapping[str, int | float]) -> tuple[str | None, int, Defines]:
        """The class, attempt and defines a shape runs with: its class's when adopted, else the winner's."""
        row = self.row_for(scalars) if self.adopted else None
        if row is None:
            return None, self.winner_attempt, dict(self.winner_defines)
        return row.name, row.attempt, dict(row.defines)


def classify(classes: Iterable[DispatchClass | DispatchRow], scalars: Mapping[str, int | float]):
    """The first class whose ``when`` holds for these scalars (a class without ``when`` always does)."""
    for item in classes:
        if item.when is None or expr.evaluate(item.when, scalars):
            return item
    return None


def _geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def build_table(classes: list[DispatchClass], cases: list[tuple[str, Mapping[str, int | float]]],
                passed: list[tuple[int, Defines, Mapping[str, float]]], winner: int,
                margin: float = MARGIN) -> DispatchTable | None:
    """The table from a run's measurements; a pure function of its arguments.

    ``cases``: the performance cases (name, scalars); ``passed``: every attempt that passed every
    case, as (id, defines, median per case); ``winner``: the single winner's id (among them).
    Within a class, ties go to the lower attempt id. None without classes or a measured winner.
    """
    attempts = {a: (defines, medians) for a, defines, medians in passed
                if all(medians.get(name) for name, _ in cases)}
    if not classes or not cases or winner not in attempts:
        return None
    win_defines, win_medians = attempts[winner]
    members: dict[str, list[str]] = {c.name: [] for c in classes}
    chosen: dict[str, str | None] = {}
    for name, scalars in cases:
        found = classify(classes, scalars)
        chosen[name] = found.name if found else None
        if found is not None:
            members[found.name].append(name)
    rows = []
    for spec in classes:
        names = members[spec.name]
        if not names:
            rows.append(DispatchRow(name=spec.name, when=spec.when, attempt=winner, defines=dict(win_defines)))
            continue
        best = min(sorted(attempts), key=lambda a: _geomean([attempts[a][1][n] for n in names]))
        single = _geomean([win_medians[n] for n in names])
        if single <= _geomean([attempts[best][1][n] for n in names]) * (1 + margin):
            best = winner  # not faster there beyond the margin: a switch would follow the noise
        rows.append(DispatchRow(name=spec.name, when=spec.when, attempt=best, defines=dict(attempts[best][0]),
                                cases=names, class_us=_geomean([attempts[best][1][n] for n in names]),
                                single_us=single))
    by_name = {r.name: r for r in rows}
    table_us = _geomean([attempts[by_name[chosen[n]].attempt if chosen[n] else winner][1][n] for n, _ in cases])
    single_us = _geomean([win_medians[n] for n, _ in cases])
    gain = single_us / table_us
    adopted = gain > 1 + margin
    reason = (f"the table's geometric mean is {gain:.3f}x the single winner's "
              + (f"(above the {margin:.0%} margin): adopted" if adopted else f"(not above the {margin:.0%} margin): "
                 "the single winner applies everywhere"))
    if all(r.attempt == winner for r in rows):
        adopted, reason = False, "every class chose the single winner's configuration"
    return DispatchTable(winner_attempt=winner, winner_defines=dict(win_defines), rows=rows,
                         single_score_us=single_us, table_score_us=table_us, adopted=adopted, reason=reason)


def write_dispatch(recorder) -> DispatchTable | None:
    """Build the run's table when the experiment declares shape classes and a tuned configuration
    won, write it to ``dispatch.json`` (with whether it is adopted) and log it; else remove a
    stale one (a resumed run whose winner is no longer tuned)."""
    tuning, best = recorder.exp.tuning, recorder.best
    table = None
    if tuning is not None and tuning.dispatch and best is not None and best.kind == "tune":
        perf = [(c.name, c.scalars) for c in recorder.cases if c.role == "performance"]
        passed = [(a.id, a.defines, a.medians()) for a in recorder.attempts
                  if a.kind == "tune" and a.score_us is not None and recorder.comparable(a)]
        table = build_table(tuning.dispatch, perf, passed, best.id)
    if table is None:
        recorder.run.file(RunDir.DISPATCH).unlink(missing_ok=True)
        return None
    recorder.run.write_model(RunDir.DISPATCH, table)
    recorder.run.log("dispatch table: " + "; ".join(f"{r.name} -> attempt {r.attempt}" for r in table.rows)
                     + f"; {table.reason}")
    return table


def read_dispatch(run) -> DispatchTable | None:
    """A run's adopted-or-not table (None when the run has none)."""
    path = run.file(RunDir.DISPATCH)
    if not path.is_file():
        return None
    return read_run_json(run, RunDir.DISPATCH, DispatchTable)
