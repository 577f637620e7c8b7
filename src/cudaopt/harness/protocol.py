"""Evaluation requests and results: the JSON contract between the supervisor and a worker.

A request is self-contained: kernel source, entry, compile options, launch expressions, the
cases with their seeds, the reference source and the timing protocol. Replaying a saved
request needs nothing else (input ``.npy`` files are named by path and pinned by SHA-256).

Plain dataclasses, not pydantic: the worker must import with numpy and cuda-core alone.
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Literal

HARNESS_VERSION = "2"

Role = Literal["correctness", "performance", "holdout"]
Expr = str | int | float

# Every way an evaluation can end. Only "ok" is a pass.
STATUSES = (
    "ok",
    "compile_error",
    "missing_entry",
    "bad_signature",
    "bad_launch_config",
    "launch_error",
    "mismatch",
    "guard_violation",
    "input_modified",
    "global_state",
    "timeout",
    "crashed",
    "implausible",
    "reference_error",
    "internal_error",
)


@dataclass
class InitSpec:
    """How an input is filled: a seeded distribution or a ``.npy`` file."""

    dist: Literal["uniform", "normal", "integers", "file"] = "uniform"
    low: float = -1.0
    high: float = 1.0
    mean: float = 0.0
    std: float = 1.0
    file: str | None = None
    sha256: str | None = None
    vary: bool = True  # differ between input sets (False for structural data such as indices)


@dataclass
class InputSpec:
    shape: list[Expr]
    init: InitSpec = field(default_factory=InitSpec)


@dataclass
class OutputSpec:
    shape: list[Expr]
    rtol: float = 1e-5
    atol: float = 1e-6


@dataclass
class LaunchSpec:
    """Grid, block and dynamic shared bytes as integers or expressions."""

    grid: list[Expr]
    block: list[Expr]
    shared_bytes: Expr = 0


@dataclass
class CaseSpec:
    name: str
    role: Role
    scalars: dict[str, int | float]
    inputs: dict[str, InputSpec]
    outputs: dict[str, OutputSpec]
    launch: LaunchSpec | None = None
    flops: Expr | None = None
    bytes: Expr | None = None
    seed: int = 0


@dataclass
class KernelSpec:
    source: str
    entry: str
    defines: dict[str, int | float | str] = field(default_factory=dict)
    fast_math: bool = False
    max_registers: int | None = None


@dataclass
class ReferenceSpec:
    """The user's trusted reference: a ``.cu`` kernel or a ``.py`` NumPy function."""

    kind: Literal["cu", "py"]
    source: str
    entry: str
    path: str = ""
    launch: LaunchSpec | None = None  # .cu only; defaults to each case's launch


@dataclass
class VendorSpec:
    """A library call timed beside the candidate as the bar to beat (cuBLAS through cupy, torch, ...).

    ``entry`` in ``source`` takes every signature argument by name: pointers as device arrays
    (``arrays``: cupy or torch) over the harness's own buffers, scalars as numbers; it writes
    the outputs in place. Never the reference: its outputs are checked like a candidate's.
    """

    source: str
    entry: str
    path: str = ""
    label: str = ""
    arrays: Literal["cupy", "torch"] = "cupy"
    allow_tf32: bool = False


@dataclass
class TimingProtocol:
    warmup: int = 10
    iterations: int = 100
    flush_l2: bool = True
    input_sets: int = 3
    gate: bool = True  # hold the stream until all samples are queued (keeps host latency out)
    chunk: int = 25  # samples queued behind one gate
    checked_launches: int = 3  # timed launches, drawn at random, whose fresh inputs get a reference
    seed: int | None = None  # draws the checked launches and every fresh input; None: a new one per request


@dataclass
class Limits:
    """What a candidate may use beyond its buffers, and which arithmetic the floor assumes."""

    global_bytes: int = 1024  # mutable __device__ memory the cubin may hold (device malloc is refused)
    allow_tf32: bool = False  # float32 work may use tensor cores: the floor uses their rate


@dataclass
class CaseTimeouts:
    """One case's check and timing limits, scaled from what was measured (evaluation/timeouts.py)."""

    check_s: float
    timing_s: float


@dataclass
class Timeouts:
    """How long each phase may run before the supervisor kills the worker.

    ``check_s``/``timing_s`` hold for any case not in ``cases``; ``basis`` says where the limits
    came from (shown in a timeout's reason).
    """

    compile_s: float = 60.0
    check_s: float = 300.0
    timing_s: float = 300.0
    cases: dict[str, CaseTimeouts] = field(default_factory=dict)
    basis: str = ""

    def limit(self, phase: str, case: str = "") -> float:
        if phase == "compile":
            return self.compile_s
        scaled = self.cases.get(case)
        if phase == "check":
            return scaled.check_s if scaled else self.check_s
        return scaled.timing_s if scaled else self.timing_s


@dataclass
class EvalRequest:
    signature: str
    kernel: KernelSpec
    cases: list[CaseSpec]
    reference: ReferenceSpec | None = None
    launch: LaunchSpec | None = None  # overrides each case's launch when given
    protocol: TimingProtocol = field(default_factory=TimingProtocol)
    timeouts: Timeouts = field(default_factory=Timeouts)
    time_roles: list[Role] = field(default_factory=lambda: ["performance"])
    check: bool = True  # False: time only (used to time the trusted reference itself)
    vendor: VendorSpec | None = None  # timed, interleaved with the candidate, on every timed case
    limits: Limits = field(default_factory=Limits)
    sanitize: bool = False  # run under compute-sanitizer: no guard bands, so the tool sees every overrun
    id: str = ""
    harness_version: str = HARNESS_VERSION


@dataclass
class CompileInfo:
    ok: bool
    log: str
    arch: str = ""
    seconds: float = 0.0
    registers: int | None = None
    spill_stores: int | None = None
    spill_loads: int | None = None
    stack_bytes: int | None = None
    static_shared_bytes: int | None = None
    local_bytes: int | None = None
    max_threads_per_block: int | None = None
    global_bytes: int | None = None  # mutable device-global memory in the cubin
    device_malloc: bool = False


@dataclass
class CheckInfo:
    """The comparison of one output of one input set with the reference.

    ``input_set`` -1 with ``launch`` set: the fresh inputs of that timed launch (0-based among the
    timed launches), drawn at random and never seen by the kernel before."""

    output: str
    input_set: int
    phase: Literal["check", "timed"]
    ok: bool
    elements: int
    mismatches: int = 0
    unwritten: int = 0
    nan_count: int = 0
    inf_count: int = 0
    max_abs_error: float = 0.0
    max_rel_error: float = 0.0
    rel_l2_error: float = 0.0
    first_bad_index: list[int] | None = None
    expected: float | None = None
    actual: float | None = None
    launch: int | None = None


@dataclass
class TimingStats:
    median_us: float
    mean_us: float
    stdev_us: float
    min_us: float
    max_us: float
    p10_us: float
    p90_us: float
    n: int
    method: str = ""


@dataclass
class VendorResult:
    """The vendor baseline on one case: checked once against the reference, then timed.

    ``error``: it could not run (library missing, an exception); ``mismatch``: its outputs
    disagree with the reference. Neither ever fails the candidate; only ``ok`` gets a timing.
    """

    label: str
    status: Literal["ok", "mismatch", "error"]
    reason: str = ""
    checks: list[CheckInfo] = field(default_factory=list)
    timing: TimingStats | None = None


@dataclass
class CaseResult:
    name: str
    role: Role
    status: str
    reason: str = ""
    launch: dict[str, Any] = field(default_factory=dict)
    occupancy: dict[str, Any] = field(default_factory=dict)
    checks: list[CheckInfo] = field(default_factory=list)
    timing: TimingStats | None = None
    clocks: dict[str, Any] = field(default_factory=dict)
    roofline: dict[str, Any] = field(default_factory=dict)
    phases: dict[str, float] = field(default_factory=dict)  # wall seconds per step
    vendor: VendorResult | None = None
    audit: dict[str, Any] = field(default_factory=dict)  # which launches were checked, and how many scanned


@dataclass
class EvalResult:
    status: str
    reason: str = ""
    request_id: str = ""
    compile: CompileInfo | None = None
    cases: list[CaseResult] = field(default_factory=list)
    device: dict[str, Any] = field(default_factory=dict)
    wall_s: float = 0.0
    seed: int | None = None  # the protocol seed this evaluation used (set it in a request to reproduce)
    harness_version: str = HARNESS_VERSION

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def case(self, name: str) -> CaseResult:
        return next(c for c in self.cases if c.name == name)


# --- JSON round trip ---------------------------------------------------------------------


def to_dict(obj: Any) -> Any:
    return dataclasses.asdict(obj)


def to_json(obj: Any, indent: int | None = None) -> str:
    return json.dumps(to_dict(obj), indent=indent, allow_nan=True)


T = typing.TypeVar("T")


def from_dict(cls: type[T], data: Any) -> T:
    """Build a dataclass from plain JSON data, checking field names and basic types."""
    return _coerce(cls, data, cls.__name__)


def _coerce(tp: Any, value: Any, where: str) -> Any:
    origin = typing.get_origin(tp)
    if tp is Any:
        return value
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            raise ValueError(f"{where}: expected an object, got {type(value).__name__}")
        hints = typing.get_type_hints(tp)
        names = {f.name for f in dataclasses.fields(tp)}
        unknown = set(value) - names
        if unknown:
            raise ValueError(f"{where}: unknown field(s) {sorted(unknown)}")
        kwargs = {k: _coerce(hints[k], v, f"{where}.{k}") for k, v in value.items()}
        try:
            return tp(**kwargs)
        except TypeError as exc:
            raise ValueError(f"{where}: {exc}") from None
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in typing.get_args(tp):
            return None
        errors = []
        for option in typing.get_args(tp):
            if option is type(None):
                continue
            try:
                return _coerce(option, value, where)
            except ValueError as exc:
                errors.append(str(exc))
        raise ValueError(f"{where}: {value!r} matches none of {tp}")
    if origin is Literal:
        if value not in typing.get_args(tp):
            raise ValueError(f"{where}: {value!r} is not one of {typing.get_args(tp)}")
        return value
    if origin is list:
        if not isinstance(value, list):
            raise ValueError(f"{where}: expected a list, got {type(value).__name__}")
        (item,) = typing.get_args(tp)
        return [_coerce(item, v, f"{where}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise ValueError(f"{where}: expected an object, got {type(value).__name__}")
        _, item = typing.get_args(tp)
        return {k: _coerce(item, v, f"{where}.{k}") for k, v in value.items()}
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"{where}: expected a number, got {value!r}")
        return float(value)
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"{where}: expected an integer, got {value!r}")
        return value
    if tp in (str, bool):
        if not isinstance(value, tp):
            raise ValueError(f"{where}: expected {tp.__name__}, got {value!r}")
        return value
    raise TypeError(f"{where}: unsupported type {tp}")  # pragma: no cover


def request_from_json(text: str) -> EvalRequest:
    return from_dict(EvalRequest, json.loads(text))


def result_from_json(text: str) -> EvalResult:
    return from_dict(EvalResult, json.loads(text))
