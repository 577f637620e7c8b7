"""Launch configurations: expressions resolved per case, and the names a tunable may not take.

A launch is written as expressions over the case scalars, the kernel's tunables (``cdiv(n,
BM)``) and facts of the GPU it runs on (``num_sms``, so a kernel can size its grid in waves).
Tunables are the candidate's to choose; scalars define the problem. So a tunable may never share
a name with a case scalar, a signature argument, a GPU fact, an expression function or a C
type: were it allowed to, a candidate could resize what is checked (``m = 16``) while the
kernel runs the real problem. Shapes, flops and bytes are always resolved from the case's own
scalars; launches see the GPU's facts too, and only the candidate's launch sees the tunables.
Kernels see the same facts as defines (``CUDAOPT_NUM_SMS``), set by the harness.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from . import expr
from .protocol import KernelSpec, LaunchSpec
from .results import DeviceInfo, ResolvedLaunch
from .signature import C_TYPES, Signature
from .tiers import LaunchError, choose_tier

_IDENTIFIER = re.compile(r"[A-Za-z_]\w*")
_RESERVED_WORDS = {word for c_type in C_TYPES for word in c_type.split()} | {
    "const", "void", "bool", "signed", "extern", "__global__", "__device__", "__shared__", "__restrict__",
}


# Facts of the GPU that launch expressions may use, and the define each reaches a kernel as.
DEVICE_NAMES = {"num_sms": "CUDAOPT_NUM_SMS"}
NOMINAL_DEVICE = {"num_sms": 132}  # checks before any GPU (cudaopt check) assume an H100/H200 SXM
RESERVED_PREFIX = "CUDAOPT_"  # defines the harness sets


def device_facts(info: DeviceInfo) -> dict[str, int]:
    """The launch names of a GPU described by the worker (the nominal ones where it says nothing)."""
    return {"num_sms": info.sm_count or NOMINAL_DEVICE["num_sms"]}


def device_defines(spec: KernelSpec, device: Mapping) -> KernelSpec:
    """``spec`` with the GPU's facts added as defines (``CUDAOPT_NUM_SMS``)."""
    extra = {define: int(device[name]) for name, define in DEVICE_NAMES.items()}
    return spec.model_copy(update={"defines": {**spec.defines, **extra}})


def resolve_launch(spec: LaunchSpec, names: Mapping) -> ResolvedLaunch:
    """Evaluate the lets, pick the tier, then grid, block, shared bytes and the entry; raise
    :class:`LaunchError` on anything unusable (naming the tier, when the launch has tiers)."""
    tier, scope = choose_tier(spec, names)

    def evaluated(field: str, text, evaluate=expr.evaluate_int):
        try:
            return evaluate(text, scope)
        except expr.ExprError as exc:
            raise tier.error(str(exc), field) from None

    dims = {}
    for label, written in (("grid", tier.grid), ("block", tier.block)):
        if written is None:  # the tier's grid: the problem's size in tiles
            tiles = [evaluated(f"tile[{d}]", text) for d, text in enumerate(tier.tile)]
            sizes = [(f"size[{d}]", text) for d, text in enumerate(spec.size)]
            for d, (text, tile) in enumerate(zip(tier.tile, tiles, strict=True)):
                if tile < 1:
                    said = f"{tile}" if isinstance(text, (int, float)) else f"{text!r} gives {tile}"
                    raise tier.error(f"{said}: a tile must be at least 1", f"tile[{d}]")
            dims[label] = [-(-_size(field, text, scope) // tile)
                           for (field, text), tile in zip(sizes, tiles, strict=True)]
            written = tier.grid_text(spec.size)
        else:
            if not 1 <= len(written) <= 3:
                raise tier.error(f"{label} needs 1 to 3 dimensions, got {len(written)}", label)
            dims[label] = [evaluated(f"{label}[{d}]", text) for d, text in enumerate(written)]
        for d, (text, value) in enumerate(zip(written, dims[label], strict=True)):
            if value < 1:
                said = f"{value}" if isinstance(text, (int, float)) else f"{text!r} gives {value}"
                raise tier.error(f"{said}: a launch dimension must be at least 1", f"{label}[{d}]")
    grid, block = dims["grid"], dims["block"]
    shared = evaluated("shared_bytes", tier.shared_bytes)
    if shared < 0:
        raise tier.error(f"shared_bytes {shared} is negative", "shared_bytes")
    entry = evaluated("entry", tier.entry, expr.evaluate_name) if tier.entry is not None else None

    def pad(dims: list[int]) -> tuple[int, ...]:
        return tuple(dims) + (1,) * (3 - len(dims))

    return ResolvedLaunch(grid=pad(grid), block=pad(block), shared_bytes=shared, entry=entry, tier=tier.name)


def _size(field: str, text, scope: Mapping) -> int:
    """One of the launch's ``size`` (shared by its tiers, so its errors name no tier)."""
    try:
        return expr.evaluate_int(text, scope)
    except expr.ExprError as exc:
        raise LaunchError(str(exc), field) from None


def tunable_clashes(names: Iterable[str], signature: Signature, scalar_names: Iterable[str]) -> list[str]:
    """Why each tunable name is refused (empty when all are fine): a tunable is the candidate's
    own knob and must not rename anything that defines the problem or the checks."""
    scalars = set(scalar_names)
    arguments = {a.name for a in signature.args}
    problems = []
    for name in names:
        if not _IDENTIFIER.fullmatch(name):
            problems.append(f"{name!r} is not a valid macro name")
        elif name in scalars:
            problems.append(f"{name!r} shadows the case scalar {name!r}")
        elif name in arguments:
            problems.append(f"{name!r} shadows the signature argument {name!r}")
        elif name in DEVICE_NAMES or name.startswith(RESERVED_PREFIX):
            problems.append(f"{name!r} is reserved for the GPU's facts the harness provides")
        elif name in expr.FUNCTIONS:
            problems.append(f"{name!r} shadows the expression function {name}()")
        elif name in _RESERVED_WORDS:
            problems.append(f"{name!r} redefines a C keyword or type")
        elif name.startswith("__") or (name.startswith("_") and name[1:2].isupper()):
            problems.append(f"{name!r} is a name C and C++ reserve for the compiler and its headers")
    return problems


def candidate_names(scalars: Mapping, defines: Mapping, device: Mapping) -> dict:
    """The names a candidate's launch expressions see: its numeric tunables, the GPU's facts and
    the case scalars. Callers check :func:`tunable_clashes` first, so nothing is replaced here."""
    tunables = {k: v for k, v in defines.items() if isinstance(v, (int, float))}
    return {**tunables, **device, **scalars}
