"""Experiments: the user's description, signature, reference, initial kernel and input cases.

Loaded from one config file (``--config``, paths relative to it) and/or seed-style flags
(flags win), validated (config.py's schemas, crosschecks.py's cross-checks), and turned into
self-contained evaluation requests. Every problem is reported as one
:class:`~.errors.ExperimentError` naming the file and the field.

One load is one sequence (:func:`load_experiment`): the config, the signature, then each file in
turn (the reference, the initial kernel, the input cases, the tunable kernel, the vendors): read
here (reading.py), then held to the signature by one check of crosschecks.py, which reads
nothing of the experiment's and never calls back.
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError

from .crosschecks import (
    check_cases,
    check_dispatch,
    check_kernel_entry,
    check_reference,
    check_tune_kernel,
    check_tune_launch,
    check_vendor_function,
)
from .config import (
    CasesFile,
    DispatchClass,
    ExperimentConfig,
    KernelBenchOrigin,
    RoiInputs,
    SpaceError,
    TimeoutPolicy,
    TuneSection,
    TuneSpace,
    VendorSection,
    space_in_source,
)
from .errors import ExperimentError, validation_message
from .reading import missing_file, read_json_file, read_text_file
from .wire.fields import version_field
from .wire.launch import tunable_clashes
from .wire.protocol import (
    HARNESS_VERSION,
    CaseSpec,
    EvalRequest,
    KernelSpec,
    LaunchSpec,
    Limits,
    ReferenceSpec,
    Timeouts,
    TimingProtocol,
    VendorSpec,
    WireModel,
)
from .wire.precision import allowed_math
from .wire.signature import Signature, SignatureError, parse_signature

LOCK_SCHEMA_VERSION = 1
CHECKED_CONFIGURATIONS = 256  # a tune launch is checked on every configuration up to this many, a sample beyond


class ExperimentLock(WireModel):
    """``lock.json``: hashes of everything that defines right and wrong; a resumed run must match."""

    schema_version: int = version_field(LOCK_SCHEMA_VERSION)
    harness_version: str
    signature: str
    reference: str
    input_cases: str
    input_files: dict[str, str]
    lock: str


@dataclass
class Tuning:
    """A tunable kernel, its space and its launch expressions (which may use the tunables)."""

    path: Path
    source: str
    space: TuneSpace
    launch: LaunchSpec
    dispatch: list[DispatchClass] = field(default_factory=list)  # shape classes for a winner per class


class ExperimentArgs(WireModel):
    """How an experiment was given: a config file and/or the seed-style fields (as the flags give
    them), so that a run (``settings.json``) and a guard file can load it again."""

    config: str | None = None
    description: str | None = None
    signature: str | None = None
    reference: str | None = None
    initial_kernel: str | None = None
    input_cases: str | None = None
    max_iterations: int | None = None

    def load(self) -> Experiment:
        if not any(getattr(self, name) for name in ("config", "description", "signature", "reference",
                                                      "initial_kernel", "input_cases")):
            raise ExperimentError("--config", "", "no experiment given: give --config FILE (such as "
                                                  "examples/sgemm/experiment.json) or the experiment flags "
                                                  "(--signature, --reference, --input-cases, ...)")
        p = lambda v: Path(v) if v else None
        experiment = load_experiment(p(self.config), description=self.description, signature=self.signature,
                                     reference=p(self.reference), initial_kernel=p(self.initial_kernel),
                                     input_cases=p(self.input_cases), max_iterations=self.max_iterations)
        experiment.args = self
        return experiment

    def resolved(self) -> ExperimentArgs:
        """The same, every path absolute (what a run keeps: it is loaded again from anywhere)."""
        absolute = lambda v: str(Path(v).resolve()) if v else v
        return self.model_copy(update={k: absolute(getattr(self, k))
                                       for k in ("config", "reference", "initial_kernel", "input_cases")})


class Experiment:
    """A validated experiment with every file read and hashed; ``args`` says how it was given,
    when it was loaded from :class:`ExperimentArgs`."""

    def __init__(self, *, description: str, signature: Signature, reference_path: Path, reference_entry: str,
                 initial_kernel_path: Path | None, cases_path: Path, cases: list[CaseSpec],
                 timing: TimingProtocol, max_iterations: int, tuning: Tuning | None = None,
                 roi: RoiInputs | None = None, vendors: list[VendorSpec] | None = None, limits: Limits | None = None,
                 timeouts: TimeoutPolicy | None = None, reference_kind: str | None = None,
                 kernelbench: KernelBenchOrigin | None = None, own_launches: frozenset[str] = frozenset()):
        self.description = description
        self.signature = signature
        self.signature_text = str(signature)
        self.reference_path = reference_path
        self.reference_source = read_text_file(reference_path, "reference")
        self.reference_entry = reference_entry
        self.initial_kernel_path = initial_kernel_path
        self.cases_path = cases_path
        self.case_specs = cases
        self.timing = timing
        self.max_iterations = max_iterations
        self.tuning = tuning
        self.roi = roi or RoiInputs()
        self.vendors = list(vendors or [])
        self.limits = limits or Limits()
        self.timeouts = timeouts or TimeoutPolicy()
        self.reference_kind = reference_kind or ("cu" if reference_path.suffix == ".cu" else "py")
        self.kernelbench = kernelbench  # KernelBench's own checks, when imported from it
        self.own_launches = own_launches  # the cases that give a launch of their own (the others take the file's)
        self.args: ExperimentArgs | None = None

    def extra_cases(self, path: Path) -> list[CaseSpec]:
        """Cases from another input-cases file (for verification), checked against the signature."""
        return load_cases(path, self.signature)

    def cases(self, roles: set[str] | None = None) -> list[CaseSpec]:
        return [c for c in self.case_specs if roles is None or c.role in roles]

    def protocol(self) -> TimingProtocol:
        return self.timing.model_copy()

    @property
    def primary_vendor(self) -> VendorSpec | None:
        """The bar a run without an initial kernel measures speed-ups against: the first vendor."""
        return self.vendors[0] if self.vendors else None

    def reference_spec(self) -> ReferenceSpec:
        return ReferenceSpec(kind=self.reference_kind, source=self.reference_source,
                             entry=self.reference_entry, path=str(self.reference_path))

    def request(self, source: str | None, *, entry: str | None = None, launch: LaunchSpec | None = None,
                defines: dict | None = None, roles: set[str] | None = None, check: bool = True,
                protocol: TimingProtocol | None = None, timeouts: Timeouts | None = None,
                request_id: str = "", vendor: bool = False) -> EvalRequest:
        """A self-contained request to evaluate ``source`` on this experiment's cases.

        ``vendor``: also time the experiment's vendor baselines, interleaved, on every timed case
        (the baseline evaluation, ``cudaopt evaluate`` and replays ask for it; tuning does not).
        ``source`` None: no kernel, the vendors alone (a run's baseline without an initial kernel).
        """
        kernel = None if source is None else KernelSpec(source=source, entry=entry or self.signature.name,
                                                        defines=dict(defines or {}))
        return EvalRequest(
            signature=self.signature_text,
            kernel=kernel,
            cases=self.cases(roles if roles is not None else {"correctness", "performance"}),
            reference=self.reference_spec(),
            launch=launch,
            protocol=protocol or self.protocol(),
            timeouts=timeouts or self.timeouts.fixed(),
            check=check,
            vendors=list(self.vendors) if vendor and check else [],
            limits=self.limits.model_copy(),
            id=request_id,
        )

    def lock(self) -> ExperimentLock:
        """Hashes of everything that defines right and wrong; a resumed run must match them."""
        inputs = {
            f"{c.name}/{n}": i.init.sha256 for c in self.case_specs for n, i in c.inputs.items() if i.init.sha256
        }
        body = {"harness_version": HARNESS_VERSION, "signature": self.signature_text,
                "reference": _sha256_file(self.reference_path), "input_cases": _sha256_file(self.cases_path),
                "input_files": inputs}
        return ExperimentLock(**body, lock=hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest())


def _sha256_file(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


# --- loading -------------------------------------------------------------------------------


def load_cases(path: Path, signature: Signature) -> list[CaseSpec]:
    """An input-cases file, checked against the signature, as the cases a request carries:
    the file's default launch filled in, ``.npy`` inputs resolved beside it and hashed."""
    return _read_cases(path, signature)[0]


def _read_cases(path: Path, signature: Signature) -> tuple[list[CaseSpec], frozenset[str]]:
    """:func:`load_cases`, and the names of the cases that give a launch of their own."""
    try:
        cases = CasesFile.model_validate(read_json_file(path, "input cases file"), strict=True)
    except ValidationError as exc:
        raise ExperimentError(path, *validation_message(exc, CasesFile)) from None
    check_cases(path, cases, signature)
    own = frozenset(case.name for case in cases.cases if case.launch is not None)
    return [_resolved(case, path.parent, cases.launch) for case in cases.cases], own


def _resolved(case: CaseSpec, folder: Path, default_launch: LaunchSpec | None) -> CaseSpec:
    inputs = {}
    for name, spec in case.inputs.items():
        if spec.init.file:
            file = (folder / spec.init.file).resolve()
            init = spec.init.model_copy(update={"file": str(file), "sha256": _sha256_file(file)})
            spec = spec.model_copy(update={"init": init})
        inputs[name] = spec
    return case.model_copy(update={"inputs": inputs, "launch": case.launch or default_launch})


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
    """Load from a config file and/or flags; flags override the file's values. The steps, in order:
    the config, the paths, the signature, the reference, the initial kernel, the input cases, the
    tunable kernel, the vendors; each file read, then checked (crosschecks.py) before the next."""
    model, base, origin = _read_config(config)

    def from_file(value: str | None) -> Path | None:
        return (base / value).resolve() if value else None

    sig_text = signature or model.signature
    ref_path = reference or from_file(model.reference)
    init_path = initial_kernel or from_file(model.initial_kernel)
    cases_path = input_cases or from_file(model.input_cases)
    for key, value in (("signature", sig_text), ("reference", ref_path), ("input_cases", cases_path)):
        if value is None:
            raise ExperimentError(origin, key, f"missing (give --{key.replace('_', '-')} or set it in --config)")

    def blamed(field: str, flag_value) -> tuple[str, str]:
        """The flag that gave a value, else the config file's field."""
        return (f"--{field.replace('_', '-')}", "") if flag_value is not None else (origin, field)

    try:
        sig = parse_signature(sig_text)
    except SignatureError as exc:
        raise ExperimentError(*blamed("signature", signature), str(exc)) from None
    assert ref_path is not None and cases_path is not None
    if (why := missing_file(ref_path)) is not None:
        raise ExperimentError(*blamed("reference", reference), f"{ref_path} {why}")
    if ref_path.suffix not in (".cu", ".py"):
        raise ExperimentError(*blamed("reference", reference), f"{ref_path} must be a .cu kernel or a .py NumPy or "
                                                                "PyTorch function")
    ref_entry = model.reference_entry or sig.name
    ref_kind = check_reference(ref_path, read_text_file(ref_path, "reference"), ref_entry, sig, model.reference_kind,
                               origin)
    if init_path is not None:
        if (why := missing_file(init_path)) is not None:
            raise ExperimentError(*blamed("initial_kernel", initial_kernel), f"{init_path} {why}")
        check_kernel_entry(init_path, read_text_file(init_path, "initial_kernel"), sig.name, sig)
    cases, own_launches = _read_cases(cases_path, sig)
    if not any(case.role in ("correctness", "performance") for case in cases):
        raise ExperimentError(cases_path, "cases", "no correctness or performance case: evaluate and optimize "
                                                   "would have nothing to check or time (holdout cases are for verify)")
    tuning = _load_tuning(model.tune, base, origin, sig, cases) if model.tune else None
    tf32 = "tf32" in allowed_math(model.limits, sig)  # a kernel that may use TF32 is measured against a vendor that may
    vendors = _load_vendors(model.vendor, base, origin, sig, tf32)
    return Experiment(
        description=description or model.description or "",
        signature=sig,
        reference_path=ref_path,
        reference_entry=ref_entry,
        initial_kernel_path=init_path,
        cases_path=cases_path,
        cases=cases,
        timing=model.timing,
        max_iterations=max_iterations or model.max_iterations or 7,
        tuning=tuning,
        roi=model.roi,
        vendors=vendors,
        limits=model.limits,
        timeouts=model.timeouts,
        reference_kind=ref_kind,
        kernelbench=model.kernelbench,
        own_launches=own_launches,
    )


def _read_config(config: Path | None) -> tuple[ExperimentConfig, Path, str]:
    """The config file validated (empty without one), the folder its paths are relative to, and how
    errors name it."""
    if config is None:
        return ExperimentConfig(), Path.cwd(), "command line"
    raw = read_json_file(config, "config file")
    try:
        model = ExperimentConfig.model_validate(raw, strict=True)
    except ValidationError as exc:
        field, message = validation_message(exc, ExperimentConfig)
        if isinstance(raw, dict) and isinstance(raw.get("vendor"), dict):  # one vendor, written as an object
            field = field.replace("vendor[0]", "vendor", 1)
        raise ExperimentError(config, field, message) from None
    return model, config.parent, str(config)


def _load_vendors(sections: list[VendorSection], base: Path, origin: str, sig: Signature,
                  tf32: bool) -> list[VendorSpec]:
    """The vendor section (one or a list), each read and checked; labels and PyTorch kinds unique;
    ``tf32``: the experiment's precision policy allows TF32, so every vendor may use it too."""
    vendors: list[VendorSpec] = []
    for i, item in enumerate(sections):
        field = f"vendor[{i}]" if len(sections) > 1 else "vendor"
        spec = _load_vendor(item, base, origin, sig, field, tf32)
        if any(v.label == spec.label for v in vendors):
            raise ExperimentError(origin, f"{field}.label", f"{spec.label!r} names another vendor too: each needs "
                                                            "its own label")
        if spec.pytorch and any(v.pytorch == spec.pytorch for v in vendors):
            raise ExperimentError(origin, f"{field}.pytorch", f"another vendor is already the PyTorch "
                                                              f"{spec.pytorch!r} baseline")
        vendors.append(spec)
    return vendors


def _load_vendor(vendor: VendorSection, base: Path, origin: str, sig: Signature, field: str,
                 tf32: bool) -> VendorSpec:
    """The vendor file read and its function checked: defined, taking every signature argument by name."""
    path = (base / vendor.file).resolve()
    if path.suffix != ".py":
        raise ExperimentError(origin, f"{field}.file", f"{vendor.file} must be a .py file")
    if (why := missing_file(path)) is not None:
        raise ExperimentError(origin, f"{field}.file", f"{path} {why}")
    source = read_text_file(path, f"{field}.file")
    name = vendor.function or sig.name
    check_vendor_function(path, source, name, sig, field)
    return VendorSpec(source=source, entry=name, path=str(path), label=vendor.label or f"{path.name}:{name}",
                      arrays=vendor.arrays, allow_tf32=vendor.allow_tf32 or tf32, returns=vendor.returns,
                      pytorch=vendor.pytorch)


def _load_tuning(tune: TuneSection, base: Path, origin: str, sig: Signature, cases: list[CaseSpec]) -> Tuning:
    path = (base / tune.kernel).resolve()
    if (why := missing_file(path)) is not None:
        raise ExperimentError(origin, "tune.kernel", f"{path} {why}")
    source = read_text_file(path, "tune.kernel")
    check_tune_kernel(path, source, sig)
    try:
        in_source = space_in_source(source)
    except SpaceError as exc:
        raise ExperimentError(path, "cudaopt-tune", str(exc)) from None
    if tune.tunables:
        try:
            space = TuneSpace(tunables=tune.tunables, restrictions=tune.restrictions)
        except ValidationError as exc:
            field, message = validation_message(exc, TuneSpace)
            raise ExperimentError(origin, f"tune.{field}" if field else "tune", message) from None
    elif in_source is not None:
        space = in_source
    else:
        raise ExperimentError(origin, "tune.tunables", f"missing (and {path.name} has no cudaopt-tune block)")
    launch = tune.launch or (in_source.launch if in_source else None)
    if launch is None:
        raise ExperimentError(origin, "tune.launch", "missing: launch expressions for the tunable kernel")
    clashes = tunable_clashes(space.tunables, sig, {n for c in cases for n in c.scalars})
    if clashes:
        raise ExperimentError(origin if tune.tunables else path, "tune.tunables", "; ".join(clashes))
    where = origin if tune.tunables else path
    try:
        configs = space.configurations()
    except SpaceError as exc:
        raise ExperimentError(where, "tune.tunables", str(exc)) from None
    if not configs:
        raise ExperimentError(where, "tune.restrictions", f"no configuration satisfies them{space.why_empty()}")
    if len(configs) > CHECKED_CONFIGURATIONS:  # a large space: the first configuration and a seeded sample of the others
        configs = [configs[0]] + random.Random(0).sample(configs[1:], CHECKED_CONFIGURATIONS - 1)
    check_tune_launch(origin, launch, cases, configs, (source, sig))
    return Tuning(path=path, source=source, space=space, launch=launch,
                  dispatch=check_dispatch(origin, tune.dispatch, cases))


def kernel_file(path: Path, entry: str, sig: Signature, field: str = "--kernel") -> str:
    """A kernel file's text, its entry and signature matched to the experiment."""
    if (why := missing_file(path)) is not None:
        raise ExperimentError(path, field, why)
    source = read_text_file(path, field)
    check_kernel_entry(path, source, entry, sig)
    return source
