"""The precision policy: which math a kernel may use beyond plain FP32/FP64 and integer ALU math.

An experiment declares it in ``limits.precision``, a list of :data:`~.protocol.MATH_CLASSES`. Without
one, the signature's pointer types decide (a ``float16`` pointer allows "fp16", ``bfloat16`` "bf16",
``int8``/``uint8`` "int8"), and ``limits.allow_tf32`` adds "tf32" either way. Every place that asks
what a kernel may compute with asks :func:`allowed_math`: the check of the compiled code
(compilekit/math_units.py), the speed-of-light floor (worker/peaks.py), the TF32 switch of a PyTorch
reference and of the vendors.
"""

from __future__ import annotations

from collections.abc import Iterable

from .protocol import MATH_CLASSES, Limits
from .results import CompileInfo
from .signature import Signature

DTYPE_CLASSES = {"float16": "fp16", "bfloat16": "bf16", "int8": "int8", "uint8": "int8"}
LABELS = {"tf32": "TF32", "fp16": "FP16", "bf16": "BF16", "int8": "INT8", "fp8": "FP8", "approx": "approximate",
          "fp64": "FP64", "fp32": "FP32"}


def dtype_classes(dtypes: Iterable[str]) -> list[str]:
    """The math classes that data of these element types allows, in MATH_CLASSES order."""
    found = {DTYPE_CLASSES[d] for d in dtypes if d in DTYPE_CLASSES}
    return [c for c in MATH_CLASSES if c in found]


def _pointer_types(signature: Signature) -> list[str]:
    return sorted({a.dtype for a in signature.args if a.pointer})


def allowed_math(limits: Limits, signature: Signature) -> frozenset[str]:
    """The effective policy: the declared list (or the pointer types' default), plus "tf32" when
    ``limits.allow_tf32`` says so."""
    declared = limits.precision if limits.precision is not None else dtype_classes(_pointer_types(signature))
    return frozenset(declared) | ({"tf32"} if limits.allow_tf32 else frozenset())


def policy_text(limits: Limits, signature: Signature) -> str:
    """The policy in one phrase, for a refusal: ``limits.precision allows [] (the default for a
    signature of float32 pointers)``."""
    allowed = allowed_math(limits, signature)
    listed = "[" + ", ".join(f'"{c}"' for c in MATH_CLASSES if c in allowed) + "]"
    if limits.precision is not None:
        why = "as the experiment declares"
    else:
        why = f"the default for a signature of {', '.join(_pointer_types(signature)) or 'no'} pointers"
    if limits.allow_tf32 and "tf32" not in (limits.precision or ()):
        why += ", and limits.allow_tf32"
    return f"limits.precision allows {listed} ({why})"


def needed(classes: Iterable[str]) -> str:
    """``"tf32"`` or ``["fp16", "fp8"]``: what a policy would have to add."""
    names = [f'"{c}"' for c in MATH_CLASSES if c in set(classes)]
    return names[0] if len(names) == 1 else "[" + ", ".join(names) + "]"


def math_text(info: CompileInfo | None) -> str:
    """The math units a compiled module uses, for people: "FP32 CUDA cores", "BF16 tensor cores
    (HMMA), FP32", "not read (...)"."""
    if info is None or info.math is None:
        return f"not read ({info.math_error})" if info is not None and info.math_error else "not read"
    parts = []
    for name in (*MATH_CLASSES, "fp64", "fp32"):
        use = info.math.get(name)
        if use is None:
            continue
        tensor = sorted(op for op in use.opcodes if "MMA" in op)
        if tensor:
            parts.append(f"{LABELS[name]} tensor cores ({', '.join(tensor)})")
        elif name in ("fp32", "fp64"):
            parts.append(LABELS[name] + (" CUDA cores" if len(info.math) == 1 else ""))
        else:
            parts.append(f"{LABELS[name]} ({', '.join(sorted(use.opcodes))})")
    if info.fast_math:
        parts.append(f"fast-math options ({' '.join(info.fast_math)})")
    return ", ".join(parts) or "no floating-point math"
