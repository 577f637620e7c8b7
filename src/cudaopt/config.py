"""The files a user writes: the experiment config, its input cases, a tunable space.

Schemas only (pydantic), importing nothing of cudaopt but wire/: the cases, launches, timing
protocol and limits are the wire's own types (wire/protocol.py), so what a user writes is
what a worker receives. Loading, resolving paths and the checks that need the signature live in
experiment.py.
"""

from __future__ import annotations

import json
import math
import random
import re
from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator, model_validator

from .wire import expr
from .wire.protocol import (CaseSpec, CaseTimeouts, FileName, InitSpec, LaunchSpec, Limits, WireModel, Timeouts,
                            TimingProtocol)


class CasesFile(WireModel):
    """An input-cases file: a list of cases, or ``{"launch": default, "cases": [...]}``."""

    launch: LaunchSpec | None = None  # default for cases that give none
    cases: list[CaseSpec] = Field(min_length=1)

    @model_validator(mode="before")
    @classmethod
    def _bare_list(cls, data: Any) -> Any:
        return {"cases": data} if isinstance(data, list) else data


def plain_tunables(value: Any) -> Any:
    """Tunable values as written: true/false would pass as 1/0, NaN as a number no restriction allows."""
    for name, values in (value.items() if isinstance(value, dict) else ()):
        for item in values if isinstance(values, list) else ():
            if isinstance(item, bool) or (isinstance(item, float) and not math.isfinite(item)):
                raise ValueError(f"{name}: {json.dumps(item)} is not a value a tunable takes (a number or a string)")
    return value


MAX_CONFIGURATIONS = 100_000  # a tune space above this is refused before anything is built
MAX_VISITED = 300_000  # partial configurations counting may visit
_SAMPLE = 2000


class TuneSpace(WireModel):
    """Tunable parameters: the values each may take and the restrictions between them.

    Tunables reach the kernel as preprocessor defines; launch expressions may use them; a
    restriction is an expression over them (``BLOCK_X == BLOCK_Y * TILE_Y``). Declared in the
    experiment's ``tune`` section or in a ``/* cudaopt-tune {...} */`` comment of the kernel.
    """

    tunables: dict[str, list[int | float | str]] = Field(min_length=1)
    restrictions: list[str] = Field(default_factory=list)
    launch: LaunchSpec | None = None

    _plain = field_validator("tunables", mode="before")(plain_tunables)

    @field_validator("tunables")
    @classmethod
    def _names(cls, value: dict) -> dict:
        for name, values in value.items():
            if not re.fullmatch(r"[A-Za-z_]\w*", name):
                raise ValueError(f"{name!r} is not a valid macro name")
            if not values:
                raise ValueError(f"{name}: needs at least one value")
            twice = sorted({repr(v) for v in values if sum(w == v and type(w) is type(v) for w in values) > 1})
            if twice:  # the same configuration would be compiled and timed twice
                raise ValueError(f"{name}: {', '.join(twice)} given more than once")
        return value

    @field_validator("restrictions")
    @classmethod
    def _restrictions(cls, value: list[str]) -> list[str]:
        for text in value:
            expr.parse(text)
        return value

    @model_validator(mode="after")
    def _known_names(self) -> TuneSpace:
        for i, text in enumerate(self.restrictions):
            unknown = sorted(expr.names_in(text) - set(self.tunables))
            if unknown:
                raise ValueError(f"restrictions[{i}]: {', '.join(unknown)} in {text!r} is not a tunable "
                                 f"({', '.join(self.tunables)})")
            for name in sorted(expr.names_in(text)):
                strings = [v for v in self.tunables[name] if isinstance(v, str)]
                if strings:
                    raise ValueError(f"restrictions[{i}]: {name} takes the string {strings[0]!r}, and a restriction "
                                     "compares numbers (write numbers without quotes)")
        return self

    def allows(self, config: dict) -> bool:
        try:
            return all(bool(expr.evaluate(r, config)) for r in self.restrictions)
        except expr.ExprError:
            return False  # e.g. a division by zero for this combination: not a valid point

    def combinations(self) -> int:
        """The size of the lists' product (the space before its restrictions)."""
        return math.prod(len(v) for v in self.tunables.values())

    def _walk(self):
        """Every allowed configuration, in declaration order, each restriction tested as soon as
        the tunables it names are set (so whole branches are cut at once); yields None for each
        partial configuration visited, so a caller can bound the work."""
        names = list(self.tunables)
        at: dict[int, list[str]] = {}
        for text in self.restrictions:
            depth = max((names.index(n) for n in expr.names_in(text)), default=0)
            at.setdefault(depth, []).append(text)

        def ok(config: dict, depth: int) -> bool:
            try:
                return all(bool(expr.evaluate(r, config)) for r in at.get(depth, ()))
            except expr.ExprError:
                return False

        def visit(depth: int, config: dict):
            for value in self.tunables[names[depth]]:
                config[names[depth]] = value
                yield None
                if not ok(config, depth):
                    continue
                if depth + 1 == len(names):
                    yield dict(config)
                else:
                    yield from visit(depth + 1, config)
            del config[names[depth]]

        yield from visit(0, {})

    def count(self, limit: int | None = None) -> int:
        """How many configurations the restrictions allow, counted without building them; a
        :class:`SpaceError` (with the count, or an estimate, and how to narrow it) above ``limit``
        (default :data:`MAX_CONFIGURATIONS`)."""
        if not self.restrictions:
            total = self.combinations()
            if total > self._limit(limit):
                raise SpaceError(self._too_large(f"{total:,}", self._limit(limit)))
            return total
        return sum(1 for _ in self._bounded(limit))

    def _limit(self, limit: int | None) -> int:
        return MAX_CONFIGURATIONS if limit is None else limit

    def _bounded(self, limit: int | None):
        """The allowed configurations, one walk: a SpaceError past ``limit`` of them, or when the
        restrictions refuse too many partial configurations to finish."""
        limit = self._limit(limit)
        found = visited = 0
        for config in self._walk():
            if config is None:
                visited += 1
                if visited > MAX_VISITED:
                    raise SpaceError(self._too_large(self._estimate(), limit, visited=True))
            else:
                found += 1
                if found > limit:
                    raise SpaceError(self._too_large(f"more than {limit:,}", limit))
                yield config

    def _estimate(self) -> str:
        """The allowed count, estimated from a seeded sample of the lists' product."""
        rng = random.Random(0)
        sample = [{k: rng.choice(v) for k, v in self.tunables.items()} for _ in range(_SAMPLE)]
        share = sum(self.allows(c) for c in sample) / _SAMPLE
        if share == 0:
            return f"an unknown number of (none in a sample of {_SAMPLE})"
        return f"about {share * self.combinations():,.0f} (estimated from a sample)"

    def _too_large(self, count: str, limit: int, visited: bool = False) -> str:
        sizes = " x ".join(str(len(v)) for v in self.tunables.values())
        why = (f"too many to search: the lists give {self.combinations():,} combinations ({sizes}) and the "
               f"restrictions cut too few of them early") if visited else f"above the limit of {limit:,}"
        return (f"{count} configurations, {why}; narrow it: fewer values per tunable, or restrictions that "
                "rule out whole ranges")

    def why_empty(self) -> str:
        """Why the first combination of the lists is refused when a restriction cannot even be
        evaluated on it (a division by zero, say); empty when every restriction evaluates."""
        config = {k: v[0] for k, v in self.tunables.items()}
        for text in self.restrictions:
            try:
                expr.evaluate(text, config)
            except expr.ExprError as exc:
                return f" ({exc} with {config})"
        return ""

    def first(self) -> dict:
        """The first allowed configuration (a SpaceError when there is none)."""
        for config in self._walk():
            if config is not None:
                return config
        raise SpaceError("no configuration satisfies the restrictions")

    def configurations(self, limit: int | None = None) -> list[dict]:
        """Every combination that satisfies the restrictions, in declaration order (a SpaceError
        above ``limit``, by default :data:`MAX_CONFIGURATIONS`)."""
        if not self.restrictions:
            self.count(limit)  # the lists' product, refused before it is built
        return list(self._bounded(limit))

    def sweep(self, max_evals: int) -> list[dict]:
        """What a tune run measures, when it knows it up front: every configuration, when there are
        no more than ``max_evals`` (a larger space is sampled as the search goes)."""
        configs = self.configurations()
        return configs if len(configs) <= max_evals else []


class SpaceError(ValueError):
    """A search space that cannot be used; the message names the field."""


_TUNE_BLOCK = re.compile(r"/\*\s*cudaopt-tune\s*(\{.*?\})\s*\*/", re.DOTALL)


def space_in_source(source: str) -> TuneSpace | None:
    """The space declared in a ``/* cudaopt-tune {...} */`` comment of a kernel source, if any."""
    match = _TUNE_BLOCK.search(source)
    if not match:
        return None
    try:
        return TuneSpace.model_validate(json.loads(match.group(1)))
    except json.JSONDecodeError as exc:
        raise SpaceError(f"cudaopt-tune block: not valid JSON: {exc.msg}") from None
    except ValidationError as exc:  # before ValueError, which it is
        err = exc.errors()[0]
        raise SpaceError(f"cudaopt-tune block: {'.'.join(map(str, err['loc']))}: {err['msg']}") from None
    except (ValueError, RecursionError) as exc:  # a number of thousands of digits, nesting thousands deep
        raise SpaceError(f"cudaopt-tune block: not valid JSON: {str(exc)[:120]}") from None


class DispatchClass(WireModel):
    """A shape class of a tune run's dispatch table: ``when`` a boolean expression over the
    case's scalars (omitted on the last class only: every other shape)."""

    name: str = Field(min_length=1)
    when: str | None = None


class TuneSection(WireModel):
    """The tunable kernel for --strategy tune; the space may instead sit in the kernel's
    ``/* cudaopt-tune {...} */`` comment block. ``dispatch``: shape classes for a winner per
    class (record/dispatch_table.py)."""

    kernel: FileName
    tunables: dict[str, list[int | float | str]] | None = None
    restrictions: list[str] = Field(default_factory=list)
    dispatch: list[DispatchClass] = Field(default_factory=list)

    _plain = field_validator("tunables", mode="before")(plain_tunables)
    launch: LaunchSpec | None = None


class VendorSection(WireModel):
    """A library call timed beside the candidate as the bar to beat (e.g. cuBLAS through cupy)."""

    file: FileName  # a .py file, relative to the config
    function: str | None = None  # default: the signature's name
    label: str = ""  # how tables name it (default: file:function)
    arrays: Literal["cupy", "torch"] = "cupy"
    allow_tf32: bool = False
    returns: bool = False  # it returns its outputs (copied into the outputs outside the timing) instead of writing them
    pytorch: Literal["eager", "compile"] | None = None  # which PyTorch baseline it is (KernelBench metrics)


# which of a case's recorded ``phases`` (worker/runner.py) belong to the supervisor's phases
CHECK_STEPS = ("setup_s", "reference_s", "controls_s", "check_s")
TIMING_STEPS = ("timing_s", "timed_checks_s")


class TimeoutPolicy(WireModel):
    """Phase limits scaled from what a run measured, so a hanging candidate costs seconds.

    Before anything is measured (a run's first evaluation, ``cudaopt evaluate``, ``verify``)
    each phase gets the fixed limits. Once the run's baseline has passed, each case's check and
    timing limits become ``multiple`` times the baseline's wall time in that phase of that
    case, never below ``floor_s`` nor above the fixed limit. The baseline's first evaluation
    includes the one-off work a fresh worker repeats after a kill (host inputs, the reference's
    answers), so the scaled limits cover a candidate that runs right after a respawn.
    """

    compile_s: float = Field(60.0, gt=0, allow_inf_nan=False)
    check_s: float = Field(300.0, gt=0, allow_inf_nan=False)  # before anything is measured, and the ceiling after
    timing_s: float = Field(300.0, gt=0, allow_inf_nan=False)
    multiple: float | None = Field(20.0, ge=1, allow_inf_nan=False)  # None: the fixed limits always
    floor_s: float = Field(10.0, gt=0, allow_inf_nan=False)

    def fixed(self) -> Timeouts:
        """The limits before a baseline: fixed, but each of a candidate's checked launches (the kernel
        alone) is held to ``multiple`` times the reference's time on the case (``floor_s`` at least)."""
        return Timeouts(compile_s=self.compile_s, check_s=self.check_s, timing_s=self.timing_s,
                        launch_multiple=self.multiple, launch_floor_s=self.floor_s)

    def scaled(self, cases: list) -> Timeouts:
        """Limits from a passing evaluation's cases (``CaseResult`` with ``phases``)."""
        timeouts = self.fixed()
        if self.multiple is None:
            return timeouts
        for case in cases:
            if case.status != "ok" or not case.phases:
                continue
            phases = case.phases
            check = self._limit(sum(phases.get(k, 0.0) for k in CHECK_STEPS), self.check_s)
            timed = [phases[k] for k in TIMING_STEPS if k in phases]
            timing = self._limit(sum(timed), self.timing_s) if timed else self.timing_s
            timeouts.cases[case.name] = CaseTimeouts(check_s=check, timing_s=timing)
        if timeouts.cases:
            timeouts.basis = (f"{self.multiple:g}x the baseline's time in this phase, at least {self.floor_s:g} s, "
                              f"at most the fixed limit; set in the experiment's timeouts section")
        return timeouts

    def _limit(self, measured_s: float, ceiling_s: float) -> float:
        return round(min(ceiling_s, max(self.floor_s, self.multiple * measured_s)), 3)


class RoiInputs(WireModel):
    """What only the user knows; given in the experiment's ``roi`` section or as flags."""

    engineer_hours: float = Field(2.0, ge=0, allow_inf_nan=False)
    engineer_rate_usd: float = Field(100.0, ge=0, allow_inf_nan=False)
    gpu_hour_usd: float = Field(3.0, ge=0, allow_inf_nan=False)
    calls_per_month: float = Field(1e6, ge=0, allow_inf_nan=False)
    payback_window_months: float = Field(3.0, gt=0, allow_inf_nan=False)
    case: str | None = None  # the case whose latency the calls pay; default: the slowest performance case


class KernelBenchCase(WireModel):
    """One case of an imported KernelBench problem as KernelBench itself would check it: the
    tolerances the import started from (KernelBench's 1e-2, the problem's ``TASK_CONFIG``, or
    ``--rtol``/``--atol``), and each input's distribution fitted to the problem's ``get_inputs()``."""

    rtol: float
    atol: float
    inputs: dict[str, InitSpec] = Field(default_factory=dict)
    changes: list[str] = Field(default_factory=list)  # what input_cases.json does otherwise, and why
    added: bool = False  # not one of KernelBench's: inputs drawn to exercise every branch


class KernelBenchOrigin(WireModel):
    """What ``cudaopt import kernelbench`` changed from KernelBench's own checks so that every case
    discriminates (negative controls), beside what KernelBench uses: ``fast-p`` says which held."""

    problem: str
    cases: dict[str, KernelBenchCase] = Field(default_factory=dict)

    @property
    def changes(self) -> list[str]:
        return [f"{name}: {change}" for name, case in self.cases.items() for change in case.changes]


class ExperimentConfig(WireModel):
    """An experiment config file (``--config``); paths are relative to it, flags override it."""

    description: str | None = None
    signature: str | None = None
    reference: FileName | None = None
    reference_entry: str | None = None
    reference_kind: Literal["numpy", "torch"] | None = None  # a .py reference's kind (default: torch if it imports torch)
    initial_kernel: FileName | None = None
    input_cases: FileName | None = None
    max_iterations: int | None = Field(None, ge=1, le=10_000)
    timing: TimingProtocol = Field(default_factory=TimingProtocol)
    tune: TuneSection | None = None
    vendor: list[VendorSection] = Field(default_factory=list)  # one (an object) or several (a list), side by side
    limits: Limits = Field(default_factory=Limits)
    timeouts: TimeoutPolicy = Field(default_factory=TimeoutPolicy)
    roi: RoiInputs = Field(default_factory=RoiInputs)
    kernelbench: KernelBenchOrigin | None = None  # an imported KernelBench problem: its own checks

    @field_validator("vendor", mode="before")
    @classmethod
    def _one_vendor(cls, value: Any) -> Any:
        return [value] if isinstance(value, dict) else [] if value is None else value

    @field_validator("timing")
    @classmethod
    def _no_seed(cls, value: TimingProtocol) -> TimingProtocol:
        if value.seed is not None:
            raise ValueError("an experiment has no timing seed: a fixed seed would make the checked launches "
                             "predictable (a request's protocol.seed reproduces one evaluation)")
        return value
