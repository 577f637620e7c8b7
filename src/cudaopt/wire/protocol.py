"""Evaluation requests: what the supervisor asks a worker to measure.

A request is self-contained: kernel source, entry, compile options, launch expressions, the
cases with their seeds, the reference source and the timing protocol. Replaying a saved
request needs nothing else (input ``.npy`` files are named by path and pinned by SHA-256).

These models are the one declaration of each type: the experiment's input-cases file is read
into :class:`CaseSpec` and :class:`LaunchSpec` directly, requests travel to the worker as their
JSON, and ``best-case-N.json`` holds one. What comes back is declared in ``results.py``.
Long because every type a request holds is declared here, once.
"""

from __future__ import annotations

import json
import math
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_serializer, model_validator

from . import expr
from .fields import CaseName, CIdentifier, FileName

HARNESS_VERSION = "2"
MAX_SEED = 2**63 - 1  # seeds are non-negative and fit 64 bits (numpy's generators take them)
MAX_LAUNCHES = 100_000  # warm-up or timed launches per case a request (or a command's flag) may ask for

Role = Literal["correctness", "performance", "holdout"]
Expr = str | int | float
# Math a kernel may use beyond plain FP32/FP64 and integer ALU math (wire/precision.py, compilekit/math_units.py)
MathClass = Literal["tf32", "fp16", "bf16", "int8", "fp8", "approx"]
MATH_CLASSES: tuple[str, ...] = MathClass.__args__


class WireModel(BaseModel):
    """Every wire and file type: unknown fields are errors; NaN and Infinity survive JSON."""

    model_config = ConfigDict(extra="forbid", ser_json_inf_nan="constants")

    def to_json(self, indent: int | None = None) -> str:
        return self.model_dump_json(indent=indent)

    def to_data(self) -> dict[str, Any]:
        """Plain JSON data (lists, not tuples)."""
        return self.model_dump(mode="json")


def drop_unset_entry(data: Any) -> Any:
    """A launch without ``entry`` is written as before it existed: no ``"entry": null``."""
    if isinstance(data, dict) and data.get("entry", "") is None:
        data.pop("entry")
    return data


def check_exprs(values: list[Expr]) -> list[Expr]:
    """Each string is a valid expression (its names are resolved later, per case)."""
    for value in values:
        if isinstance(value, str):
            expr.parse(value)
    return values


class InitSpec(WireModel):
    """How an input is filled: a seeded distribution or a ``.npy`` file."""

    dist: Literal["uniform", "normal", "integers", "file"] = "uniform"
    low: float = Field(-1.0, allow_inf_nan=False)
    high: float = Field(1.0, allow_inf_nan=False)
    mean: float = Field(0.0, allow_inf_nan=False)
    std: float = Field(1.0, allow_inf_nan=False)
    file: FileName | None = None  # in an input-cases file relative to it; in a request absolute
    sha256: str | None = None  # filled when the experiment is loaded
    vary: bool = True  # differ between input sets (False for structural data such as indices)

    @model_validator(mode="after")
    def _check(self) -> InitSpec:
        if self.dist == "file" and not self.file:
            raise ValueError("dist 'file' needs a 'file' (a .npy path)")
        if self.file and self.dist != "file":
            self.dist = "file"
        if self.dist in ("uniform", "integers") and not self.low < self.high:
            raise ValueError(f"low ({self.low}) must be below high ({self.high})")
        if self.dist == "integers" and not (float(self.low).is_integer() and float(self.high).is_integer()):
            raise ValueError(f"dist 'integers' takes whole bounds, not low {self.low} and high {self.high}")
        if self.dist == "normal" and self.std <= 0:
            raise ValueError("std must be positive")
        return self


class InputSpec(WireModel):
    shape: list[Expr]
    init: InitSpec = Field(default_factory=InitSpec)

    _shape = field_validator("shape")(check_exprs)


class OutputSpec(WireModel):
    shape: list[Expr]
    rtol: float = Field(1e-5, ge=0, allow_inf_nan=False)  # an infinite tolerance would pass anything
    atol: float = Field(1e-6, ge=0, allow_inf_nan=False)

    _shape = field_validator("shape")(check_exprs)


def _dims(value: Any) -> Any:
    """A single dimension may be written without its list; true/false is never one."""
    value = [value] if isinstance(value, (int, str)) else value
    if isinstance(value, list) and any(isinstance(v, bool) for v in value):
        raise ValueError("true/false is not a launch dimension (give a number or an expression)")
    return value


def _drop_unset(data: Any, keys: tuple[str, ...]) -> Any:
    """Optional launch parts left out are not written (``"let": null``), so a launch of the
    plain form reads and writes as before tiers existed."""
    if isinstance(data, dict):
        for key in keys:
            if key in data and data[key] is None:
                data.pop(key)
    return drop_unset_entry(data)


class LaunchTier(WireModel):
    """One row of a launch's tier table: taken when ``when`` holds (the last may omit it: the
    default), launching ``entry`` with ``block``; the grid is ``cdiv(size[i], tile[i])`` unless
    ``grid`` is given. ``shared_bytes`` and ``entry`` default to the launch's."""

    name: str | None = Field(None, min_length=1)
    when: str | None = None
    entry: str | None = Field(None, min_length=1)
    block: list[Expr] = Field(min_length=1, max_length=3)
    tile: list[Expr] | None = Field(None, min_length=1, max_length=3)
    grid: list[Expr] | None = Field(None, min_length=1, max_length=3)
    shared_bytes: Expr | None = None

    @model_serializer(mode="wrap")
    def _without_unset(self, handler):
        return _drop_unset(handler(self), ("name", "when", "tile", "grid", "shared_bytes"))

    _listify = field_validator("block", "tile", "grid", mode="before")(_dims)

    _when = field_validator("when")(lambda value: check_exprs([value])[0])

    @model_validator(mode="after")
    def _check(self) -> LaunchTier:
        check_exprs([*self.block, *(self.tile or []), *(self.grid or []), self.shared_bytes or 0])
        if self.entry is not None:
            expr.check_name(self.entry)
        if self.grid is None and self.tile is None:
            raise ValueError("a tier needs its tile (the grid is the launch's size divided by it) or a grid")
        if self.grid is not None and self.tile is not None:
            raise ValueError("a tier gives its tile (the grid follows from it) or its grid, not both")
        return self


class LaunchSpec(WireModel):
    """Grid, block and dynamic shared bytes as integers or expressions (resolved by launch.py).

    ``entry`` picks the kernel a case launches when the source has several with the
    signature's parameters (each with registers and limits of its own): a name, or quoted names
    chosen by conditionals (``'gemm_small' if m * n < 2**20 else 'gemm_large'``). By default,
    the signature's own entry.

    Or a table: ``let`` names values (each over the scalars, tunables and earlier lets),
    ``tiers`` is tried in order (the first whose ``when`` holds is taken) and ``size`` gives
    the problem's extents that a tier's ``tile`` divides into its grid."""

    # the table's parts come first so that grid and block know whether they may be left out
    let: dict[str, Expr] | None = Field(None, max_length=32)  # bounded: a proposal's too
    size: list[Expr] | None = Field(None, min_length=1, max_length=3)
    tiers: list[LaunchTier] | None = Field(None, min_length=1, max_length=16)
    grid: list[Expr] | None = Field(None, min_length=1, max_length=3, validate_default=True)
    block: list[Expr] | None = Field(None, min_length=1, max_length=3, validate_default=True)
    shared_bytes: Expr = 0
    entry: str | None = Field(None, min_length=1)

    @model_serializer(mode="wrap")
    def _without_unset(self, handler):
        return _drop_unset(handler(self), ("grid", "block", "let", "size", "tiers"))

    _listify = field_validator("grid", "block", "size", mode="before")(_dims)

    @field_validator("grid", "block")
    @classmethod
    def _needed(cls, value: list[Expr] | None, info: ValidationInfo) -> list[Expr] | None:
        if value is None and "tiers" in info.data and info.data["tiers"] is None:
            raise ValueError("Field required (or give tiers)")
        return value

    @field_validator("let")
    @classmethod
    def _lets(cls, lets: dict[str, Expr] | None) -> dict[str, Expr] | None:
        for i, (name, text) in enumerate((lets or {}).items()):
            if not name.isidentifier() or not name.isascii():
                raise ValueError(f"{name!r} is not a name (letters, digits and _)")
            if name in expr.FUNCTIONS:
                raise ValueError(f"{name!r} shadows the expression function {name}()")
            if isinstance(text, bool):
                raise ValueError(f"{name}: true/false is not an expression (write 1 or 0)")
            if isinstance(text, str):
                later = sorted(expr.names_in(text) & set(list(lets)[i:]))
                if later:
                    raise ValueError(f"{name}: {text!r} uses {later[0]!r}, which let.{later[0]} defines after it (a "
                                     "let sees the lets before it; none may take a scalar's or tunable's name)")
        return lets

    @model_validator(mode="after")
    def _check(self) -> LaunchSpec:
        check_exprs([*(self.grid or []), *(self.block or []), *(self.size or []), self.shared_bytes])
        if self.entry is not None:
            expr.check_name(self.entry)
        if self.tiers is None:
            if self.size is not None:
                raise ValueError("size is divided by the tiers' tiles: give tiers, or drop size")
            return self
        if self.grid is not None or self.block is not None:
            raise ValueError("a launch with tiers gives grid and block in each tier, not beside them")
        for i, tier in enumerate(self.tiers):
            label = f"launch tier {tier.name!r} (tiers[{i}])" if tier.name else f"launch tier tiers[{i}]"
            if tier.when is None and i < len(self.tiers) - 1:
                raise ValueError(f"{label}.when: only the last tier may omit `when` (the default)")
            if tier.grid is None and len(tier.tile) != len(self.size or []):
                said = f"size has {len(self.size)}" if self.size else "the launch gives no size"
                raise ValueError(f"{label}.tile: {len(tier.tile)} dimension(s), but {said} (the grid is "
                                 "cdiv(size[i], tile[i]))")
        names = [t.name for t in self.tiers if t.name]
        if len(names) != len(set(names)):
            raise ValueError(f"two tiers are named {next(n for n in names if names.count(n) > 1)!r}")
        if self.entry is not None and all(t.entry is not None for t in self.tiers):
            raise ValueError(f"entry {self.entry!r} is never launched: every tier names its own (drop it)")
        return self


class CaseSpec(WireModel):
    """One input case: its scalars, how its inputs are drawn, its outputs' tolerances."""

    name: CaseName
    role: Role
    scalars: dict[str, int | float] = Field(default_factory=dict)
    inputs: dict[str, InputSpec] = Field(default_factory=dict)
    outputs: dict[str, OutputSpec]
    launch: LaunchSpec | None = None  # in a request, the cases file's default is filled in
    flops: Expr | None = None
    bytes: Expr | None = None
    timed: bool | None = None  # holdout: timed by verify (default: when it declares flops or bytes)
    seed: int = Field(0, ge=0, le=MAX_SEED)
    trivial_ok: str | None = None  # why this case may accept a trivial output (negative controls waived)

    @model_serializer(mode="wrap")
    def _without_unset_waiver(self, handler):
        data = handler(self)
        if isinstance(data, dict) and data.get("trivial_ok", "") is None:
            data.pop("trivial_ok")  # a case without one is written (and hashed) as before it existed
        return data

    @field_validator("trivial_ok")
    @classmethod
    def _written_reason(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            raise ValueError("needs a written reason (why this case may accept a trivial output), not an empty string")
        return value.strip() if value is not None else None


    @field_validator("scalars", mode="before")
    @classmethod
    def _numbers(cls, value: Any) -> Any:
        """A scalar is a JSON number: ``"31"`` or ``true`` would be quietly converted otherwise."""
        if isinstance(value, dict):
            for name, item in value.items():
                if isinstance(item, (str, bool)) or item is None:
                    raise ValueError(f"{name}: {json.dumps(item)} is not a number (write it without quotes)")
        return value

    @field_validator("flops", "bytes")
    @classmethod
    def _work(cls, value: Expr | None) -> Expr | None:
        return None if value is None else check_exprs([value])[0]

    @property
    def timed_in_verify(self) -> bool:
        """Verify times a holdout case that says so, or that declares its work."""
        return self.timed if self.timed is not None else (self.flops is not None or self.bytes is not None)


class KernelSpec(WireModel):
    source: str
    entry: str
    defines: dict[str, int | float | str] = Field(default_factory=dict)
    fast_math: bool = False
    max_registers: int | None = None


class ReferenceSpec(WireModel):
    """The user's trusted reference: a ``.cu`` kernel, a ``.py`` NumPy function (``py``) or a ``.py``
    PyTorch function (``torch``, run on the worker's GPU)."""

    kind: Literal["cu", "py", "torch"]
    source: str
    entry: str
    path: str = ""
    launch: LaunchSpec | None = None  # .cu only; defaults to each case's launch


class VendorSpec(WireModel):
    """A library call timed beside the candidate as the bar to beat (cuBLAS through cupy, torch, ...).

    ``entry`` in ``source`` takes every signature argument by name: pointers as device arrays
    (``arrays``: cupy or torch) over the harness's own buffers, scalars as numbers; it writes
    the outputs in place, or (``returns``) returns them and the harness copies them into the
    outputs, outside the timed interval, before they are checked. Never the reference: its
    outputs are checked like a candidate's. ``pytorch`` says which PyTorch baseline it is, for the
    KernelBench metrics.
    """

    source: str
    entry: str
    path: str = ""
    label: str = ""
    arrays: Literal["cupy", "torch"] = "cupy"
    allow_tf32: bool = False
    returns: bool = False
    pytorch: Literal["eager", "compile"] | None = None


def vendor_as_list(data: Any) -> Any:
    """Requests and results written before vendors became a list carry ``vendor``: one or none."""
    if isinstance(data, dict) and "vendor" in data:
        data = dict(data)
        vendor = data.pop("vendor")
        data.setdefault("vendors", [vendor] if vendor else [])
    return data


OPTIMIZE_TIMED_MS = 50.0  # an optimize run's TimingProtocol.timed_ms unless its experiment sets one


class TimingProtocol(WireModel):
    warmup: int = Field(10, ge=0, le=MAX_LAUNCHES)
    iterations: int = Field(100, ge=1, le=MAX_LAUNCHES)
    flush_l2: bool = True
    input_sets: int = Field(3, ge=1, le=8)
    gate: bool = True  # hold the stream until all samples are queued (keeps host latency out)
    chunk: int = Field(25, ge=1, le=MAX_LAUNCHES)  # samples queued behind one gate
    checked_launches: int = Field(3, ge=1, le=32)  # timed launches, drawn at random, checked on fresh inputs
    seed: int | None = Field(None, ge=0, le=MAX_SEED)  # draws every fresh input; None: a new one per request
    # kernel time a case's timed launches aim at: a kernel whose warm-ups take longer than
    # timed_ms / iterations gets fewer timed launches, never fewer than min_iterations. None: the
    # command's default (optimize: OPTIMIZE_TIMED_MS; the others time every `iterations`); 0: off
    timed_ms: float | None = Field(None, ge=0, le=3_600_000)
    min_iterations: int = Field(20, ge=1, le=MAX_LAUNCHES)

    @model_validator(mode="after")
    def _check(self) -> TimingProtocol:
        if self.checked_launches > self.iterations:
            raise ValueError(f"checked_launches ({self.checked_launches}) exceeds iterations ({self.iterations})")
        if self.timed_ms and self.checked_launches > self.min_iterations:
            raise ValueError(f"checked_launches ({self.checked_launches}) exceeds min_iterations "
                             f"({self.min_iterations}), the timed launches a long kernel may get")
        return self

    def timed_launches(self, warmup_ms: float | None) -> int:
        """How many timed launches a case gets, given its kernel's median warm-up time: every
        ``iterations`` unless ``timed_ms`` bounds them (a long kernel's median is steady after a
        few dozen samples; its per-launch checks cost many times its own time)."""
        if not self.timed_ms or not warmup_ms or warmup_ms <= 0:
            return self.iterations
        wanted = math.ceil(self.timed_ms / warmup_ms)
        return max(min(self.min_iterations, self.iterations), min(self.iterations, wanted))


class Limits(WireModel):
    """What a candidate may use beyond its buffers, and which arithmetic it may compute with: the
    precision policy (``wire/precision.allowed_math`` reads it; the floor assumes what it allows)."""

    global_bytes: int = Field(65536, ge=0)  # module variables, restored before every launch (device malloc is refused)
    workspace: list[CIdentifier] = Field(default_factory=list, max_length=16)  # poisoned before each launch: not kept
    allow_tf32: bool = False  # adds "tf32" to the precision policy
    precision: list[MathClass] | None = None  # math allowed beyond FP32/FP64 and integer; None: from the pointer types

    @field_validator("precision")
    @classmethod
    def _once_each(cls, value: list[str] | None) -> list[str] | None:
        twice = sorted({name for name in value or () if value.count(name) > 1})
        if twice:
            raise ValueError(f"{twice[0]!r} is given more than once")
        return value


class CaseTimeouts(WireModel):
    """One case's check and timing limits, scaled from what was measured (config.TimeoutPolicy)."""

    check_s: float
    timing_s: float


class Timeouts(WireModel):
    """How long each phase may run before the supervisor kills the worker.

    ``check_s``/``timing_s`` hold for any case not in ``cases``; ``basis`` says where the limits
    came from (shown in a timeout's reason).
    """

    compile_s: float = 60.0
    check_s: float = 300.0
    timing_s: float = 300.0
    cases: dict[str, CaseTimeouts] = Field(default_factory=dict)
    basis: str = ""
    # before anything of the candidate's was measured, each of its checked launches of a case (the kernel alone:
    # the checks after it are the check phase's) may take this multiple of the reference's time on the case (at
    # least the floor, at most check_s); None: check_s
    launch_multiple: float | None = None
    launch_floor_s: float = 10.0

    def limit(self, phase: str, case: str = "", reference_s: float | None = None) -> float:
        if phase == "compile":
            return self.compile_s
        scaled = self.cases.get(case)
        if phase == "launch" and not scaled and self.launch_multiple is not None and reference_s is not None:
            return round(min(self.check_s, max(self.launch_floor_s, self.launch_multiple * reference_s)), 3)
        if phase in ("check", "launch"):
            return scaled.check_s if scaled else self.check_s
        return scaled.timing_s if scaled else self.timing_s

    def why(self, phase: str, case: str = "", reference_s: float | None = None) -> str:
        """Where the limit of ``phase`` came from, for a timeout's reason."""
        if phase == "compile":
            return ""
        if phase == "launch" and case not in self.cases and self.launch_multiple is not None and \
                reference_s is not None:
            return (f"{self.launch_multiple:g}x the reference's {reference_s:.3g} s on this case, at least "
                    f"{self.launch_floor_s:g} s")
        return self.basis


class EvalRequest(WireModel):
    """``kernel`` None: no candidate, only the vendors checked and timed (the baseline of a run
    without an initial kernel)."""

    signature: str
    kernel: KernelSpec | None
    cases: list[CaseSpec]
    reference: ReferenceSpec | None = None
    launch: LaunchSpec | None = None  # overrides each case's launch when given
    protocol: TimingProtocol = Field(default_factory=TimingProtocol)
    timeouts: Timeouts = Field(default_factory=Timeouts)
    time_roles: list[Role] = Field(default_factory=lambda: ["performance"])
    check: bool = True  # False: time only (used to time the trusted reference itself)
    vendors: list[VendorSpec] = Field(default_factory=list)  # timed, interleaved with the candidate, on every timed case
    limits: Limits = Field(default_factory=Limits)
    sanitize: bool = False  # run under compute-sanitizer: no guard bands, so the tool sees every overrun
    id: str = ""
    harness_version: str = HARNESS_VERSION

    @model_validator(mode="before")
    @classmethod
    def _one_vendor(cls, data: Any) -> Any:
        return vendor_as_list(data)
