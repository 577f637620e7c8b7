"""Checks of the user's files against the experiment's signature, before any GPU work.

Each raises :class:`~.errors.ExperimentError` naming the file and the field. The schemas
(config.py) check what a file says on its own; these check what it says against the rest:
scalars against their C types, shapes and launches on every case, ``.npy`` headers, kernel
entries and Python functions (read with ``ast``: nothing of the user's runs here). They are
given what experiment.py read (reading.py reads the files) and read nothing themselves, but the
header of a case's ``.npy`` input; experiment.py calls one check per file, in one sequence.
"""

from __future__ import annotations

import ast
import math
import re
from pathlib import Path

from .config import CasesFile, DispatchClass
from .errors import ExperimentError
from .wire import expr
from .wire.launch import DEVICE_NAMES, NOMINAL_DEVICE, LaunchError, resolve_launch
from .wire.protocol import CaseSpec, LaunchSpec
from .wire.signature import DTYPES, Signature, SignatureError, find_entry, other_entry_problem
from .wire.tiers import choose_tier, unknown_name

# Limits every CUDA GPU of compute capability 5.0 or later shares.
MAX_THREADS_PER_BLOCK = 1024
MAX_BLOCK = (1024, 1024, 64)
MAX_GRID = (2**31 - 1, 65535, 65535)
# Dynamic shared memory one block may have, by architecture (the opt-in maximum); before the
# target is known, the largest of them (sm_90's 227 KiB).
SHARED_BY_ARCH = {"sm_70": 96 * 1024, "sm_72": 96 * 1024, "sm_75": 64 * 1024, "sm_80": 163 * 1024,
                  "sm_86": 99 * 1024, "sm_87": 163 * 1024, "sm_89": 99 * 1024, "sm_90": 227 * 1024,
                  "sm_100": 227 * 1024, "sm_103": 227 * 1024, "sm_120": 99 * 1024}
MAX_SHARED_BYTES = max(SHARED_BY_ARCH.values())

SCALAR_RANGES = {
    "int8": (-2**7, 2**7 - 1), "uint8": (0, 2**8 - 1), "int16": (-2**15, 2**15 - 1), "uint16": (0, 2**16 - 1),
    "int32": (-2**31, 2**31 - 1), "uint32": (0, 2**32 - 1), "int64": (-2**63, 2**63 - 1), "uint64": (0, 2**64 - 1),
}


def check_cases(path: Path, cases: CasesFile, signature: Signature) -> None:
    """An input-cases file against the signature: names unique, and each case (:func:`check_case`)."""
    seen: set[str] = set()
    for i, case in enumerate(cases.cases):
        if case.name in seen:
            raise ExperimentError(path, f"cases[{i}].name", f"duplicate case name {case.name!r}")
        seen.add(case.name)
        check_case(path, f"cases[{i}]", case, cases.launch, signature)


def check_case(path: Path, where: str, case: CaseSpec, default_launch: LaunchSpec | None,
               signature: Signature) -> None:
    """One case of an input-cases file against the signature: every argument given, scalars that
    fit their types, shapes, input files, work and launch that evaluate on its scalars."""
    for arg in signature.inputs:
        if arg.name not in case.inputs:
            raise ExperimentError(path, f"{where}.inputs", f"missing input {arg.name!r} (signature: {arg.c_decl()})")
    for arg in signature.outputs:
        if arg.name not in case.outputs:
            raise ExperimentError(path, f"{where}.outputs", f"missing output {arg.name!r} (signature: {arg.c_decl()})")
    for arg in signature.scalars:
        if arg.name not in case.scalars:
            raise ExperimentError(path, f"{where}.scalars", f"missing scalar {arg.name!r} (signature: {arg.c_decl()})")
    for name in case.scalars:
        if name in DEVICE_NAMES:
            raise ExperimentError(path, f"{where}.scalars.{name}", f"{name!r} is reserved: launch expressions use it "
                                                                  "for the GPU's own value")
        if name.startswith("CUDAOPT_"):
            raise ExperimentError(path, f"{where}.scalars.{name}", "names that start with CUDAOPT_ are reserved for "
                                                                  "the defines cudaopt adds")
    args = {a.name: a for a in signature.args}
    for kind, names, wanted in (("inputs", case.inputs, signature.inputs), ("outputs", case.outputs, signature.outputs)):
        for name in names:
            if name not in args:
                raise ExperimentError(path, f"{where}.{kind}.{name}", "not an argument of the kernel signature")
            arg = args[name]
            if arg not in wanted:
                other = "an output (a pointer, not const)" if arg.is_output else \
                    "an input (a const pointer)" if arg.is_input else "a scalar (give it under scalars)"
                raise ExperimentError(path, f"{where}.{kind}.{name}", f"'{arg.c_decl()}' is {other}, not one of the "
                                                                      f"signature's {kind}")
    check_scalars(path, where, case, signature)
    shapes = {}
    for kind, specs in (("inputs", case.inputs), ("outputs", case.outputs)):
        for name, spec in specs.items():
            dims = []
            for d, text in enumerate(spec.shape):
                try:
                    dims.append(dim := expr.evaluate_int(text, case.scalars))
                except expr.ExprError as exc:
                    raise ExperimentError(path, f"{where}.{kind}.{name}.shape[{d}]", str(exc)) from None
                if dim < 1:
                    what = "output" if kind == "outputs" else "input"
                    said = f"{dim}" if isinstance(text, (int, float)) else f"{text!r} gives {dim}"
                    raise ExperimentError(path, f"{where}.{kind}.{name}.shape[{d}]",
                                          f"{said}: every dimension must be at least 1 (an empty "
                                          f"{what} checks nothing)")
            shapes[name] = tuple(dims)
    dtypes = {a.name: a.dtype for a in signature.args}
    for name, spec in case.inputs.items():
        if spec.init.file:
            check_npy(path, f"{where}.inputs.{name}.init.file", path.parent / spec.init.file, shapes[name],
                      dtypes.get(name))
    for field in ("flops", "bytes"):
        value = getattr(case, field)
        if value is not None:
            try:
                work = expr.evaluate(value, case.scalars)
            except expr.ExprError as exc:
                raise ExperimentError(path, f"{where}.{field}", str(exc)) from None
            if not (isinstance(work, (int, float)) and math.isfinite(work) and work >= 0):
                raise ExperimentError(path, f"{where}.{field}", f"{value!r} gives {work}, not a count of work")
    launch = case.launch or default_launch
    if launch is None:
        raise ExperimentError(path, f"{where}.launch", "no launch configuration (give one per case or at the top level)")
    check_launch(path, f"{where}.launch" if case.launch else "launch", launch, case)


def check_launch(path: Path, field: str, launch: LaunchSpec, case: CaseSpec, names: dict | None = None,
                 kernel: tuple[str, Signature] | None = None, max_shared: int = MAX_SHARED_BYTES,
                 device: dict | None = None) -> None:
    """The launch resolves on the case's scalars (and ``names``: tunables) and fits what any CUDA
    GPU launches (``max_shared``: the target's dynamic shared memory); the GPU's facts
    (``num_sms``) take their nominal values unless ``device`` gives them. Each problem names its field, down to the
    dimension (``grid[1]``). With ``kernel`` (its source and the signature), a kernel the launch
    names is declared there."""
    scope = {**(names or {}), **(device or NOMINAL_DEVICE), **case.scalars}
    sep = "." if field else ""
    unknown = unknown_name(launch, set(scope))  # every tier's expressions, not only the one this case takes
    if unknown:
        raise ExperimentError(path, f"{field}{sep}{unknown[0]}", f"case {case.name!r}: {unknown[1]}")
    try:
        resolved = resolve_launch(launch, scope)
        tier = choose_tier(launch, scope)[0]
    except LaunchError as exc:
        raise ExperimentError(path, f"{field}{sep}{exc.field}", f"case {case.name!r}: {exc}") from None
    where = f"{field}{sep}" + ("" if tier.index is None else f"tiers[{tier.index}].")
    grid = tier.grid if tier.grid is not None else tier.grid_text(launch.size or [])
    for label, values, dims, limits in (("grid", grid, resolved.grid, MAX_GRID),
                                        ("block", tier.block, resolved.block, MAX_BLOCK)):
        for d, text in enumerate(values):
            if dims[d] > limits[d]:
                said = f"{dims[d]}" if isinstance(text, (int, float)) else f"{text!r} gives {dims[d]}"
                raise ExperimentError(path, f"{where}{label}[{d}]", f"case {case.name!r}: {said}, above the "
                                      f"{limits[d]} every GPU allows in {label} dimension {d}")
    if resolved.shared_bytes > max_shared:
        raise ExperimentError(path, f"{where}shared_bytes", f"case {case.name!r}: {resolved.shared_bytes} bytes "
                                                                 f"of dynamic shared memory, above the {max_shared} "
                                                                 "a block may have")
    if kernel is not None:
        problem = other_entry_problem(kernel[0], resolved.entry, kernel[1])
        if problem:
            raise ExperimentError(path, f"{where}entry", f"case {case.name!r}: {problem}")
        for i, other in enumerate(launch.tiers or []):  # the kernels of tiers this case does not take
            plain = other.entry.strip() if other.entry and expr.IDENTIFIER.fullmatch(other.entry.strip()) else None
            problem = plain and other_entry_problem(kernel[0], plain, kernel[1])
            if problem:
                raise ExperimentError(path, f"{field}{sep}tiers[{i}].entry", problem)
    if resolved.threads > MAX_THREADS_PER_BLOCK:
        raise ExperimentError(path, f"{where}block", f"case {case.name!r}: block {list(resolved.block)} "
                                                          f"({resolved.threads} threads) exceeds the "
                                                          f"{MAX_THREADS_PER_BLOCK} threads a block may have")


def check_scalars(path: Path, where: str, case: CaseSpec, signature: Signature) -> None:
    """Each scalar fits the C type the kernel receives it as, and is finite."""
    for arg in signature.scalars:
        value = case.scalars[arg.name]
        field = f"{where}.scalars.{arg.name}"
        if arg.dtype in SCALAR_RANGES:
            low, high = SCALAR_RANGES[arg.dtype]
            if isinstance(value, float) and not value.is_integer():
                raise ExperimentError(path, field, f"{value} is not an integer ({arg.c_decl()})")
            if not low <= value <= high:
                raise ExperimentError(path, field, f"{int(value)} does not fit {arg.c_decl()} ({low} to {high})")
        elif not math.isfinite(value):
            raise ExperimentError(path, field, f"{value} is not a finite number ({arg.c_decl()})")


def shared_limit(arch: str) -> int:
    """The dynamic shared memory a block may have on ``arch`` (sm_90a counts as sm_90)."""
    return SHARED_BY_ARCH.get(re.sub(r"[a-z]$", "", arch), MAX_SHARED_BYTES)


def check_npy(path: Path, field: str, file: Path, shape: tuple[int, ...], dtype: str | None = None) -> None:
    """An input file exists, is a .npy array, has the case's shape and a type the argument's
    converts from without losing its kind (read from its header only)."""
    import numpy as np


    if not file.is_file():
        raise ExperimentError(path, field, f"{file.name} not found")
    try:
        data = np.load(file, mmap_mode="r", allow_pickle=False)
    except (ValueError, OSError) as exc:
        reason = str(exc).split(". ")[0].replace("\n", " ")
        raise ExperimentError(path, field, f"{file.name} is not a .npy array of numbers ({reason})") from None
    if tuple(data.shape) != shape:
        raise ExperimentError(path, field, f"{file.name} has shape {list(data.shape)}, the case says {list(shape)}")
    if dtype in DTYPES:
        target = np.dtype("float32" if dtype == "bfloat16" else DTYPES[dtype].numpy)
        bits = dtype == "bfloat16" and data.dtype == np.uint16  # bfloat16 given as its bits
        kinds = {"f": "f", "i": "iu", "u": "iu", "b": "b"}.get(target.kind, target.kind)
        if not bits and data.dtype.kind not in kinds:
            raise ExperimentError(path, field, f"{file.name} holds {data.dtype}, the argument is {dtype}: save "
                                               f"it as {target} (or another {'float' if 'f' in kinds else 'integer'} "
                                               "type)")


def check_kernel_entry(path: Path, source: str, entry: str, sig: Signature, plain: bool = False) -> None:
    """The source declares ``entry`` with the experiment's argument types. A declaration that is
    not written plainly (made by a macro, say) is left to the compiled kernel's check, unless
    ``plain``; a name that appears nowhere is refused either way."""
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


def check_reference(path: Path, source: str, entry: str, sig: Signature, kind: str | None, origin: str) -> str:
    """A reference's text against the signature; its kind: "cu" (a kernel declaring ``entry``), or for
    a Python function (defined at the top level, taking every input and scalar) "torch" or "py"
    (``kind`` as the config gives it, else whether the file imports torch)."""
    if path.suffix == ".cu":
        if kind:
            raise ExperimentError(origin, "reference_kind", f"{kind!r} is for a .py reference; "
                                                            f"{path.name} is a .cu kernel")
        check_kernel_entry(path, source, entry, sig, plain=True)
        return "cu"
    python_function(path, source, entry, [a.name for a in sig.args if a.is_input or not a.pointer],
                    "reference_entry", "input and scalar")
    return "torch" if (kind or ("torch" if imports_torch(source) else "numpy")) == "torch" else "py"


def check_vendor_function(path: Path, source: str, name: str, sig: Signature, field: str) -> None:
    """A vendor's function: defined at the top level, taking every signature argument by name and
    requiring nothing else."""
    wanted = [a.name for a in sig.args]
    fn = python_function(path, source, name, wanted, f"{field}.function", "signature argument")
    extra = [n for n in required_parameters(fn) if n not in wanted]
    if extra:
        raise ExperimentError(path, f"{field}.function", f"{name}() requires {', '.join(extra)}, which the "
                                                         f"signature does not have ({', '.join(wanted)})")


def check_tune_kernel(path: Path, source: str, sig: Signature) -> None:
    """The tunable kernel declares the signature's entry with its types."""
    declared = find_entry(source, sig.name)
    if declared is None or not declared.same_types(sig):
        raise ExperimentError(path, "signature", f"no entry matching '{sig}'")


def check_tune_launch(origin: str, launch: LaunchSpec, cases: list[CaseSpec], configs: list[dict],
                      kernel: tuple[str, Signature]) -> None:
    """``tune.launch`` on every configuration given and every case that is tuned (not the holdout)."""
    for config in configs:
        for case in cases:
            if case.role != "holdout":
                try:
                    check_launch(origin, "tune.launch", launch, case, names=config, kernel=kernel)
                except ExperimentError as exc:
                    raise ExperimentError(exc.file, exc.field, f"{exc.message} (configuration {config})") from None


def python_function(path: Path, source: str, name: str, wanted: list[str], field: str, what: str) -> ast.FunctionDef:
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


def imports_torch(source: str) -> bool:
    """Whether a Python file imports torch anywhere (then its reference runs as a PyTorch one)."""
    for node in ast.walk(ast.parse(source)):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
            [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
        if any(name == "torch" or name.startswith("torch.") for name in names):
            return True
    return False


def required_parameters(fn: ast.FunctionDef) -> list[str]:
    """The parameters a call must give (no default)."""
    params = fn.args
    required = [p.arg for p in params.args[:len(params.args) - len(params.defaults)]]
    required += [p.arg for p, default in zip(params.kwonlyargs, params.kw_defaults, strict=True) if default is None]
    return required


def check_dispatch(origin: str, classes: list[DispatchClass], cases: list[CaseSpec]) -> list[DispatchClass]:
    """Shape classes whose names differ, whose ``when`` (over the scalars alone) holds or fails on
    every case, and where only the last may omit it."""
    if len({c.name for c in classes}) != len(classes):
        raise ExperimentError(origin, "tune.dispatch", "two classes share a name")
    for i, spec in enumerate(classes):
        field = f"tune.dispatch[{i}].when"
        if spec.when is None:
            if i != len(classes) - 1:
                raise ExperimentError(origin, field, f"missing on class {spec.name!r}: only the last class may omit it")
            continue
        for case in cases:
            try:
                expr.evaluate(spec.when, case.scalars)
            except expr.ExprError as exc:
                raise ExperimentError(origin, field, f"on case {case.name!r}: {exc} (the case's scalars: "
                                                     f"{', '.join(case.scalars)})") from None
    return classes
