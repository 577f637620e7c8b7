"""Experiments: the user's description, signature, reference, initial kernel and input cases.

Loaded from one config file (``--config``, paths relative to it) and/or seed-style flags
(flags win), validated with pydantic, and turned into self-contained evaluation requests.
Every problem is reported as one :class:`ExperimentError` naming the file and the field.
"""

from __future__ import annotations

import ast
import hashlib
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from .evaluation.timeouts import TimeoutPolicy
from .harness import expr
from .harness.protocol import (
    HARNESS_VERSION,
    CaseSpec,
    EvalRequest,
    InitSpec,
    InputSpec,
    KernelSpec,
    LaunchSpec,
    Limits,
    OutputSpec,
    ReferenceSpec,
    Timeouts,
    TimingProtocol,
    VendorSpec,
)
from .harness.signature import Signature, SignatureError, parse_signature
from .report.roi import RoiInputs


class ExperimentError(Exception):
    """Bad input: ``file: field: message``."""

    def __init__(self, file: str | Path, field: str, message: str):
        self.file, self.field, self.message = str(file), field, message
        super().__init__(f"{file}: {field}: {message}" if field else f"{file}: {message}")


# --- input cases file ----------------------------------------------------------------------

ExprValue = str | int | float


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class InitModel(_Model):
    dist: Literal["uniform", "normal", "integers", "file"] = "uniform"
    low: float = Field(-1.0, allow_inf_nan=False)
    high: float = Field(1.0, allow_inf_nan=False)
    mean: float = Field(0.0, allow_inf_nan=False)
    std: float = Field(1.0, allow_inf_nan=False)
    file: str | None = None
    vary: bool = True

    @model_validator(mode="after")
    def _check(self) -> InitModel:
        if self.dist == "file" and not self.file:
            raise ValueError("dist 'file' needs a 'file' (a .npy path)")
        if self.file and self.dist != "file":
            self.dist = "file"
        if self.dist in ("uniform", "integers") and not self.low < self.high:
            raise ValueError(f"low ({self.low}) must be below high ({self.high})")
        if self.dist == "normal" and self.std <= 0:
            raise ValueError("std must be positive")
        return self


def _check_exprs(values: list[ExprValue]) -> list[ExprValue]:
    for v in values:
        if isinstance(v, str):
            expr.parse(v)
    return values


class InputModel(_Model):
    shape: list[ExprValue]
    init: InitModel = Field(default_factory=InitModel)

    _shape = field_validator("shape")(_check_exprs)


class OutputModel(_Model):
    shape: list[ExprValue]
    rtol: float = Field(1e-5, ge=0, allow_inf_nan=False)  # an infinite tolerance would pass anything
    atol: float = Field(1e-6, ge=0, allow_inf_nan=False)

    _shape = field_validator("shape")(_check_exprs)


class LaunchModel(_Model):
    grid: list[ExprValue] = Field(min_length=1, max_length=3)
    block: list[ExprValue] = Field(min_length=1, max_length=3)
    shared_bytes: ExprValue = 0

    @field_validator("grid", "block", mode="before")
    @classmethod
    def _listify(cls, v: Any) -> Any:
        return [v] if isinstance(v, (int, str)) else v

    @model_validator(mode="after")
    def _check(self) -> LaunchModel:
        _check_exprs([*self.grid, *self.block, self.shared_bytes])
        return self

    def spec(self) -> LaunchSpec:
        return LaunchSpec(grid=list(self.grid), block=list(self.block), shared_bytes=self.shared_bytes)


class CaseModel(_Model):
    name: str = Field(min_length=1)
    role: Literal["correctness", "performance", "holdout"]
    scalars: dict[str, int | float] = Field(default_factory=dict)
    inputs: dict[str, InputModel] = Field(default_factory=dict)
    outputs: dict[str, OutputModel]
    launch: LaunchModel | None = None
    flops: ExprValue | None = None
    bytes: ExprValue | None = None
    seed: int = 0

    @model_validator(mode="after")
    def _check(self) -> CaseModel:
        _check_exprs([v for v in (self.flops, self.bytes) if v is not None])
        return self


class CasesFile(_Model):
    launch: LaunchModel | None = None  # default for cases that give none
    cases: list[CaseModel] = Field(min_length=1)

    @model_validator(mode="before")
    @classmethod
    def _bare_list(cls, data: Any) -> Any:
        return {"cases": data} if isinstance(data, list) else data


# --- experiment config file ----------------------------------------------------------------


class TimingModel(_Model):
    warmup: int = Field(10, ge=0)
    iterations: int = Field(100, ge=1)
    flush_l2: bool = True
    input_sets: int = Field(3, ge=1, le=8)
    gate: bool = True
    checked_launches: int = Field(3, ge=1, le=32)

    @model_validator(mode="after")
    def _check(self) -> TimingModel:
        if self.checked_launches > self.iterations:
            raise ValueError(f"checked_launches ({self.checked_launches}) exceeds iterations ({self.iterations})")
        return self


class LimitsModel(_Model):
    """What a candidate may keep between launches, and which arithmetic the speed floor assumes."""

    global_bytes: int = Field(1024, ge=0)
    allow_tf32: bool = False


class TimeoutsModel(_Model):
    """Phase limits: fixed until the run's baseline is measured, then scaled from it (evaluation/timeouts.py)."""

    compile_s: float = Field(60.0, gt=0, allow_inf_nan=False)
    check_s: float = Field(300.0, gt=0, allow_inf_nan=False)
    timing_s: float = Field(300.0, gt=0, allow_inf_nan=False)
    multiple: float | None = Field(20.0, ge=1, allow_inf_nan=False)
    floor_s: float = Field(10.0, gt=0, allow_inf_nan=False)

    def policy(self) -> TimeoutPolicy:
        return TimeoutPolicy(**self.model_dump())


class TuneModel(_Model):
    """The tunable kernel for --strategy tune; the space may instead sit in the kernel's
    ``/* cudaopt-tune {...} */`` comment block."""

    kernel: str
    tunables: dict[str, list[int | float | str]] | None = None
    restrictions: list[str] = Field(default_factory=list)
    launch: LaunchModel | None = None


class VendorModel(_Model):
    """A library call timed beside the candidate as the bar to beat (e.g. cuBLAS through cupy)."""

    file: str  # a .py file, relative to the config
    function: str | None = None  # default: the signature's name
    label: str = ""  # how tables name it (default: file:function)
    arrays: Literal["cupy", "torch"] = "cupy"
    allow_tf32: bool = False


class ConfigModel(_Model):
    description: str | None = None
    signature: str | None = None
    reference: str | None = None
    reference_entry: str | None = None
    initial_kernel: str | None = None
    input_cases: str | None = None
    max_iterations: int | None = Field(None, ge=1)
    timing: TimingModel = Field(default_factory=TimingModel)
    tune: TuneModel | None = None
    vendor: VendorModel | None = None
    limits: LimitsModel = Field(default_factory=LimitsModel)
    timeouts: TimeoutsModel = Field(default_factory=TimeoutsModel)
    roi: RoiInputs = Field(default_factory=RoiInputs)


@dataclass
class Tuning:
    """A tunable kernel, its space and its launch expressions (which may use the tunables)."""

    path: Path
    source: str
    space: object  # search.space.TuneSpace
    launch: LaunchSpec


class Experiment:
    """A validated experiment with every file read and hashed."""

    def __init__(self, *, description: str, signature: Signature, signature_text: str,
                 reference_path: Path, reference_entry: str, initial_kernel_path: Path | None,
                 cases_path: Path, cases: CasesFile, timing: TimingModel, max_iterations: int,
                 tuning: Tuning | None = None, roi: RoiInputs | None = None, vendor: VendorSpec | None = None,
                 limits: LimitsModel | None = None, timeouts: TimeoutsModel | None = None):
        self.description = description
        self.signature = signature
        self.signature_text = signature_text
        self.reference_path = reference_path
        self.reference_source = read_text_file(reference_path, "reference")
        self.reference_entry = reference_entry
        self.initial_kernel_path = initial_kernel_path
        self.cases_path = cases_path
        self.cases_file = cases
        self.timing = timing
        self.max_iterations = max_iterations
        self.tuning = tuning
        self.roi = roi or RoiInputs()
        self.vendor = vendor
        self.limits = limits or LimitsModel()
        self.timeouts = (timeouts or TimeoutsModel()).policy()
        self.case_specs = [self._case_spec(c) for c in cases.cases]

    @property
    def reference_kind(self) -> str:
        return "cu" if self.reference_path.suffix == ".cu" else "py"

    def _case_spec(self, case: CaseModel) -> CaseSpec:
        return case_spec(case, self.cases_path.parent, self.cases_file.launch)

    def extra_cases(self, path: Path) -> list[CaseSpec]:
        """Cases from another input-cases file (for verification), checked against the signature."""
        extra = load_cases(path, self.signature)
        return [case_spec(c, path.parent, extra.launch) for c in extra.cases]

    def cases(self, roles: set[str] | None = None) -> list[CaseSpec]:
        return [c for c in self.case_specs if roles is None or c.role in roles]

    def protocol(self) -> TimingProtocol:
        t = self.timing
        return TimingProtocol(warmup=t.warmup, iterations=t.iterations, flush_l2=t.flush_l2,
                              input_sets=t.input_sets, gate=t.gate, checked_launches=t.checked_launches)

    def reference_spec(self) -> ReferenceSpec:
        return ReferenceSpec(kind=self.reference_kind, source=self.reference_source,
                             entry=self.reference_entry, path=str(self.reference_path))

    def request(self, source: str, *, entry: str | None = None, launch: LaunchSpec | None = None,
                defines: dict | None = None, roles: set[str] | None = None, check: bool = True,
                protocol: TimingProtocol | None = None, timeouts: Timeouts | None = None,
                request_id: str = "", vendor: bool = False) -> EvalRequest:
        """A self-contained request to evaluate ``source`` on this experiment's cases.

        ``vendor``: also time the experiment's vendor baseline, interleaved, on every timed case
        (the baseline evaluation, ``cudaopt evaluate`` and replays ask for it; tuning does not).
        """
        return EvalRequest(
            signature=self.signature_text,
            kernel=KernelSpec(source=source, entry=entry or self.signature.name, defines=dict(defines or {})),
            cases=self.cases(roles if roles is not None else {"correctness", "performance"}),
            reference=self.reference_spec(),
            launch=launch,
            protocol=protocol or self.protocol(),
            timeouts=timeouts or self.timeouts.fixed(),
            check=check,
            vendor=self.vendor if vendor and check else None,
            limits=Limits(global_bytes=self.limits.global_bytes, allow_tf32=self.limits.allow_tf32),
            id=request_id,
        )

    def lock(self) -> dict:
        """Hashes of everything that defines right and wrong; a resumed run must match them."""
        files = {"reference": _sha256_file(self.reference_path), "input_cases": _sha256_file(self.cases_path)}
        inputs = {
            f"{c.name}/{n}": i.init.sha256 for c in self.case_specs for n, i in c.inputs.items() if i.init.sha256
        }
        body = {"harness_version": HARNESS_VERSION, "signature": self.signature_text, **files, "input_files": inputs}
        body["lock"] = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()
        return body


def case_spec(case: CaseModel, folder: Path, default_launch: LaunchModel | None) -> CaseSpec:
    """The harness's view of a validated case; ``.npy`` inputs resolved from ``folder`` and hashed."""
    inputs = {}
    for name, model in case.inputs.items():
        init = InitSpec(**model.init.model_dump(exclude={"file"}))
        if model.init.file:
            path = (folder / model.init.file).resolve()
            init.file = str(path)
            init.sha256 = _sha256_file(path)
        inputs[name] = InputSpec(shape=list(model.shape), init=init)
    launch = case.launch or default_launch
    return CaseSpec(
        name=case.name,
        role=case.role,
        scalars=dict(case.scalars),
        inputs=inputs,
        outputs={k: OutputSpec(shape=list(v.shape), rtol=v.rtol, atol=v.atol) for k, v in case.outputs.items()},
        launch=launch.spec() if launch else None,
        flops=case.flops,
        bytes=case.bytes,
        seed=case.seed,
    )


def _sha256_file(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


# --- loading -------------------------------------------------------------------------------


def _validation_message(exc: ValidationError) -> tuple[str, str]:
    err = exc.errors()[0]
    field = ""
    for part in err["loc"]:
        field += f"[{part}]" if isinstance(part, int) else f"{'.' if field else ''}{part}"
    field = field or "(top level)"
    message = err["msg"].removeprefix("Value error, ")
    if len(exc.errors()) > 1:
        message += f" (and {len(exc.errors()) - 1} more problem(s))"
    return field, message


def read_json_file(path: Path, what: str) -> Any:
    if not path.is_file():
        raise ExperimentError(path, "", f"{what} not found")
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ExperimentError(path, f"line {exc.lineno}", f"not valid JSON: {exc.msg}") from None


def read_text_file(path: Path, field: str) -> str:
    """A source file's text; a binary or non-UTF-8 file is bad input naming the file."""
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ExperimentError(path, field, "not a UTF-8 text file") from None
    except OSError as exc:
        raise ExperimentError(path, field, exc.strerror or str(exc)) from None


def check_kernel_entry(path: Path, source: str, entry: str, sig: Signature, plain: bool = False) -> None:
    """The source declares ``entry`` with the experiment's argument types. A declaration that is
    not written plainly (made by a macro, say) is left to the compiled kernel's check, unless
    ``plain``; a name that appears nowhere is refused either way."""
    from .harness.signature import SignatureError, find_entry

    try:
        declared = find_entry(source, entry)
    except SignatureError as exc:
        raise ExperimentError(path, "entry", str(exc)) from None
    if declared is None and not plain and re.search(rf"\b{re.escape(entry)}\b", source):
        return
    if declared is None:
        raise ExperimentError(path, "entry", f"no 'extern \"C\" __global__ void {entry}(...)' found")
    if not declared.same_types(sig):
        raise ExperimentError(path, "signature", f"'{declared}' does not match the experiment's '{sig}'")


def _check_python_reference(path: Path, source: str, name: str, sig: Signature) -> None:
    """The reference parses, defines the function at the top level, and takes every input and scalar."""
    _python_function(path, source, name, [a.name for a in sig.args if a.is_input or not a.pointer],
                     "reference_entry", "input and scalar")


def _python_function(path: Path, source: str, name: str, wanted: list[str], field: str, what: str) -> ast.FunctionDef:
    """A top-level function of a user's Python file that accepts every name in ``wanted`` by keyword."""
    try:
        tree = ast.parse(source, str(path))
    except SyntaxError as exc:
        raise ExperimentError(path, f"line {exc.lineno}", f"not valid Python: {exc.msg}") from None
    fn = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name), None)
    if fn is None:
        raise ExperimentError(path, field, f"no function named {name!r} at the top level")
    params = fn.args
    accepted = {p.arg for p in params.args + params.kwonlyargs}
    missing = [n for n in wanted if n not in accepted]
    if missing and params.kwarg is None:
        raise ExperimentError(path, field, f"{name}() must accept {', '.join(missing)}: every {what} is passed "
                                           f"by name ({', '.join(wanted)})")
    return fn


def load_cases(path: Path, signature: Signature) -> CasesFile:
    try:
        cases = CasesFile.model_validate(read_json_file(path, "input cases file"))
    except ValidationError as exc:
        raise ExperimentError(path, *_validation_message(exc)) from None
    seen: set[str] = set()
    for i, case in enumerate(cases.cases):
        where = f"cases[{i}]"
        if case.name in seen:
            raise ExperimentError(path, f"{where}.name", f"duplicate case name {case.name!r}")
        seen.add(case.name)
        for arg in signature.inputs:
            if arg.name not in case.inputs:
                raise ExperimentError(path, f"{where}.inputs", f"missing input {arg.name!r} (signature: {arg.c_decl()})")
        for arg in signature.outputs:
            if arg.name not in case.outputs:
                raise ExperimentError(path, f"{where}.outputs", f"missing output {arg.name!r} (signature: {arg.c_decl()})")
        for arg in signature.scalars:
            if arg.name not in case.scalars:
                raise ExperimentError(path, f"{where}.scalars", f"missing scalar {arg.name!r} (signature: {arg.c_decl()})")
        known = {a.name for a in signature.args}
        for kind, names in (("inputs", case.inputs), ("outputs", case.outputs)):
            for name in names:
                if name not in known:
                    raise ExperimentError(path, f"{where}.{kind}.{name}", "not an argument of the kernel signature")
        _check_scalars(path, where, case, signature)
        shapes = {}
        for kind, specs in (("inputs", case.inputs), ("outputs", case.outputs)):
            for name, spec in specs.items():
                try:
                    dims = [expr.evaluate_int(d, case.scalars) for d in spec.shape]
                except expr.ExprError as exc:
                    raise ExperimentError(path, f"{where}.{kind}.{name}.shape", str(exc)) from None
                if any(d < 0 for d in dims):
                    raise ExperimentError(path, f"{where}.{kind}.{name}.shape", f"negative dimension in {dims}")
                shapes[name] = tuple(dims)
        for name in case.outputs:
            if 0 in shapes[name]:
                raise ExperimentError(path, f"{where}.outputs.{name}.shape", f"{list(shapes[name])} has no elements: "
                                                                             "nothing would be checked")
        for name, spec in case.inputs.items():
            if spec.init.file:
                _check_npy(path, f"{where}.inputs.{name}.init.file", path.parent / spec.init.file, shapes[name])
        for field in ("flops", "bytes"):
            value = getattr(case, field)
            if value is not None:
                try:
                    work = expr.evaluate(value, case.scalars)
                except expr.ExprError as exc:
                    raise ExperimentError(path, f"{where}.{field}", str(exc)) from None
                if not (isinstance(work, (int, float)) and math.isfinite(work) and work >= 0):
                    raise ExperimentError(path, f"{where}.{field}", f"{value!r} gives {work}, not a count of work")
        launch = case.launch or cases.launch
        if launch is None:
            raise ExperimentError(path, f"{where}.launch", "no launch configuration (give one per case or at the top level)")
        _check_launch(path, f"{where}.launch" if case.launch else "launch", launch, case)
    return cases


# Limits every CUDA GPU of compute capability 5.0 or later shares.
MAX_THREADS_PER_BLOCK = 1024
MAX_BLOCK = (1024, 1024, 64)
MAX_GRID = (2**31 - 1, 65535, 65535)


def _check_launch(path: Path, field: str, launch: LaunchModel, case: CaseModel) -> None:
    """The case's launch resolves on its scalars and fits what any CUDA GPU can launch."""
    from .harness.launch import resolve_launch

    try:
        resolved = resolve_launch(launch.spec(), case.scalars)
    except ValueError as exc:
        raise ExperimentError(path, field, f"case {case.name!r}: {exc}") from None
    block, grid = resolved["block"], resolved["grid"]
    threads = block[0] * block[1] * block[2]
    if threads > MAX_THREADS_PER_BLOCK or any(b > m for b, m in zip(block, MAX_BLOCK, strict=True)):
        raise ExperimentError(path, f"{field}.block", f"case {case.name!r}: block {list(block)} ({threads} threads) "
                                                      f"exceeds what a GPU launches ({MAX_THREADS_PER_BLOCK} threads, "
                                                      f"{list(MAX_BLOCK)} per dimension)")
    if any(g > m for g, m in zip(grid, MAX_GRID, strict=True)):
        raise ExperimentError(path, f"{field}.grid", f"case {case.name!r}: grid {list(grid)} exceeds {list(MAX_GRID)}")


_SCALAR_RANGES = {
    "int8": (-2**7, 2**7 - 1), "uint8": (0, 2**8 - 1), "int16": (-2**15, 2**15 - 1), "uint16": (0, 2**16 - 1),
    "int32": (-2**31, 2**31 - 1), "uint32": (0, 2**32 - 1), "int64": (-2**63, 2**63 - 1), "uint64": (0, 2**64 - 1),
}


def _check_scalars(path: Path, where: str, case: CaseModel, signature: Signature) -> None:
    """Each scalar fits the C type the kernel receives it as, and is finite."""
    for arg in signature.scalars:
        value = case.scalars[arg.name]
        field = f"{where}.scalars.{arg.name}"
        if arg.dtype in _SCALAR_RANGES:
            low, high = _SCALAR_RANGES[arg.dtype]
            if isinstance(value, float) and not value.is_integer():
                raise ExperimentError(path, field, f"{value} is not an integer ({arg.c_decl()})")
            if not low <= value <= high:
                raise ExperimentError(path, field, f"{int(value)} does not fit {arg.c_decl()} ({low} to {high})")
        elif not math.isfinite(value):
            raise ExperimentError(path, field, f"{value} is not a finite number ({arg.c_decl()})")


def _check_npy(path: Path, field: str, file: Path, shape: tuple[int, ...]) -> None:
    """An input file exists, is a .npy array, and has the case's shape (read from its header only)."""
    import numpy as np

    if not file.is_file():
        raise ExperimentError(path, field, f"{file.name} not found")
    try:
        data = np.load(file, mmap_mode="r", allow_pickle=False)
    except (ValueError, OSError) as exc:
        raise ExperimentError(path, field, f"{file.name} is not a .npy array ({exc})".replace("\n", " ")) from None
    if tuple(data.shape) != shape:
        raise ExperimentError(path, field, f"{file.name} has shape {list(data.shape)}, the case says {list(shape)}")


def load_experiment(
    config: Path | None = None,
    *,
    description: str | None = None,
    signature: str | None = None,
    reference: Path | None = None,
    initial_kernel: Path | None = None,
    input_cases: Path | None = None,
    max_iterations: int | None = None,
) -> Experiment:
    """Load from a config file and/or flags; flags override the file's values."""
    model = ConfigModel()
    base = Path.cwd()
    origin = "command line"
    if config is not None:
        try:
            model = ConfigModel.model_validate(read_json_file(config, "config file"))
        except ValidationError as exc:
            raise ExperimentError(config, *_validation_message(exc)) from None
        base = config.parent
        origin = str(config)

    def from_file(value: str | None) -> Path | None:
        return (base / value).resolve() if value else None

    sig_text = signature or model.signature
    ref_path = reference or from_file(model.reference)
    init_path = initial_kernel or from_file(model.initial_kernel)
    cases_path = input_cases or from_file(model.input_cases)
    for field, value in (("signature", sig_text), ("reference", ref_path), ("input_cases", cases_path)):
        if value is None:
            raise ExperimentError(origin, field, f"missing (give --{field.replace('_', '-')} or set it in --config)")
    try:
        sig = parse_signature(sig_text)
    except SignatureError as exc:
        raise ExperimentError(origin, "signature", str(exc)) from None
    assert ref_path is not None and cases_path is not None
    if not ref_path.is_file():
        raise ExperimentError(origin, "reference", f"{ref_path} not found")
    if ref_path.suffix not in (".cu", ".py"):
        raise ExperimentError(origin, "reference", f"{ref_path} must be a .cu kernel or a .py NumPy function")
    ref_entry = model.reference_entry or sig.name
    ref_source = read_text_file(ref_path, "reference")
    if ref_path.suffix == ".cu":
        check_kernel_entry(ref_path, ref_source, ref_entry, sig, plain=True)
    else:
        _check_python_reference(ref_path, ref_source, ref_entry, sig)
    if init_path is not None:
        if not init_path.is_file():
            raise ExperimentError(origin, "initial_kernel", f"{init_path} not found")
        check_kernel_entry(init_path, read_text_file(init_path, "initial_kernel"), sig.name, sig)
    cases = load_cases(cases_path, sig)
    tuning = _load_tuning(model.tune, base, origin, sig, cases) if model.tune else None
    vendor = _load_vendor(model.vendor, base, origin, sig) if model.vendor else None
    return Experiment(
        description=description or model.description or "",
        signature=sig,
        signature_text=str(sig),
        reference_path=ref_path,
        reference_entry=ref_entry,
        initial_kernel_path=init_path,
        cases_path=cases_path,
        cases=cases,
        timing=model.timing,
        max_iterations=max_iterations or model.max_iterations or 7,
        tuning=tuning,
        roi=model.roi,
        vendor=vendor,
        limits=model.limits,
        timeouts=model.timeouts,
    )


def _load_vendor(vendor: VendorModel, base: Path, origin: str, sig: Signature) -> VendorSpec:
    """The vendor file read and its function checked: defined, taking every signature argument by name."""
    path = (base / vendor.file).resolve()
    if path.suffix != ".py":
        raise ExperimentError(origin, "vendor.file", f"{vendor.file} must be a .py file")
    if not path.is_file():
        raise ExperimentError(origin, "vendor.file", f"{path} not found")
    source = path.read_text()
    name = vendor.function or sig.name
    wanted = [a.name for a in sig.args]
    params = _python_function(path, source, name, wanted, "vendor.function", "signature argument").args
    required = [p.arg for p in params.args[:len(params.args) - len(params.defaults)]]
    required += [p.arg for p, default in zip(params.kwonlyargs, params.kw_defaults, strict=True) if default is None]
    extra = [n for n in required if n not in wanted]
    if extra:
        raise ExperimentError(path, "vendor.function", f"{name}() requires {', '.join(extra)}, which the signature "
                                                       f"does not have ({', '.join(wanted)})")
    return VendorSpec(source=source, entry=name, path=str(path), label=vendor.label or f"{path.name}:{name}",
                      arrays=vendor.arrays, allow_tf32=vendor.allow_tf32)


def _load_tuning(tune: TuneModel, base: Path, origin: str, sig: Signature, cases: CasesFile) -> Tuning:
    from .harness.launch import resolve_launch, tunable_clashes
    from .harness.signature import find_entry
    from .search.space import SpaceError, TuneSpace, from_source

    path = (base / tune.kernel).resolve()
    if not path.is_file():
        raise ExperimentError(origin, "tune.kernel", f"{path} not found")
    source = path.read_text()
    declared = find_entry(source, sig.name)
    if declared is None or not declared.same_types(sig):
        raise ExperimentError(path, "signature", f"no entry matching '{sig}'")
    try:
        in_source = from_source(source)
    except SpaceError as exc:
        raise ExperimentError(path, "cudaopt-tune", str(exc)) from None
    if tune.tunables:
        try:
            space = TuneSpace(tunables=tune.tunables, restrictions=tune.restrictions)
        except ValidationError as exc:
            raise ExperimentError(origin, *_validation_message(exc)) from None
    elif in_source is not None:
        space = in_source
    else:
        raise ExperimentError(origin, "tune.tunables", f"missing (and {path.name} has no cudaopt-tune block)")
    launch = tune.launch or (in_source.launch if in_source else None)
    if launch is None:
        raise ExperimentError(origin, "tune.launch", "missing: launch expressions for the tunable kernel")
    clashes = tunable_clashes(space.tunables, sig, {n for c in cases.cases for n in c.scalars})
    if clashes:
        raise ExperimentError(origin if tune.tunables else path, "tune.tunables", "; ".join(clashes))
    configs = space.configurations()
    if not configs:
        raise ExperimentError(origin, "tune.restrictions", "no configuration satisfies them")
    for case in cases.cases:
        if case.role == "holdout":
            continue
        try:
            resolve_launch(launch.spec(), {**case.scalars, **configs[0]})
        except ValueError as exc:
            raise ExperimentError(origin, "tune.launch", f"case {case.name!r} with {configs[0]}: {exc}") from None
    return Tuning(path=path, source=source, space=space, launch=launch.spec())


def load_launch(text: str) -> LaunchSpec:
    """A launch configuration from a JSON string or a JSON file (``--launch``)."""
    path = Path(text)
    source = "--launch"
    if not text.lstrip().startswith("{"):
        data = read_json_file(path, "launch file")
        source = str(path)
    else:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ExperimentError(source, "", f"not valid JSON: {exc.msg}") from None
    try:
        return LaunchModel.model_validate(data).spec()
    except ValidationError as exc:
        raise ExperimentError(source, *_validation_message(exc)) from None
