"""Kernel signatures: ``extern "C" __global__ void name(const float* a, float* c, int n)``.

The signature is the contract between the experiment and every candidate: pointer arguments
are matched to the case's inputs and outputs by name (``const T*`` is an input, ``T*`` an
output), scalars to the case's scalar values.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class DType:
    """A C element type, the NumPy type that holds it on the host, and its poison pattern."""

    name: str
    numpy: str  # host storage type; bfloat16 is held as its uint16 bits
    is_float: bool
    poison: bytes  # repeating byte pattern written to outputs before every launch

    @property
    def itemsize(self) -> int:
        return np.dtype(self.numpy).itemsize


# Floating poison is a NaN in every float width (0x7FF8 per 16 bits is a NaN in f16, bf16,
# f32 and f64); integer poison is an unusual bit pattern that is also checked against the
# reference, so a legitimately equal value is not miscounted as unwritten.
_NAN16 = b"\xf8\x7f"
DTYPES: dict[str, DType] = {
    "float32": DType("float32", "float32", True, _NAN16),
    "float64": DType("float64", "float64", True, _NAN16),
    "float16": DType("float16", "float16", True, _NAN16),
    "bfloat16": DType("bfloat16", "uint16", True, _NAN16),
    "int8": DType("int8", "int8", False, b"\xa5"),
    "uint8": DType("uint8", "uint8", False, b"\xa5"),
    "int16": DType("int16", "int16", False, b"\xa5\x5a"),
    "uint16": DType("uint16", "uint16", False, b"\xa5\x5a"),
    "int32": DType("int32", "int32", False, b"\xa5\x5a"),
    "uint32": DType("uint32", "uint32", False, b"\xa5\x5a"),
    "int64": DType("int64", "int64", False, b"\xa5\x5a"),
    "uint64": DType("uint64", "uint64", False, b"\xa5\x5a"),
}

C_TYPES: dict[str, str] = {
    "float": "float32",
    "double": "float64",
    "half": "float16",
    "__half": "float16",
    "__nv_bfloat16": "bfloat16",
    "nv_bfloat16": "bfloat16",
    "bfloat16": "bfloat16",
    "char": "int8",
    "signed char": "int8",
    "int8_t": "int8",
    "unsigned char": "uint8",
    "uint8_t": "uint8",
    "short": "int16",
    "int16_t": "int16",
    "unsigned short": "uint16",
    "uint16_t": "uint16",
    "int": "int32",
    "int32_t": "int32",
    "unsigned": "uint32",
    "unsigned int": "uint32",
    "uint32_t": "uint32",
    "long long": "int64",
    "int64_t": "int64",
    "long": "int64",
    "size_t": "uint64",
    "unsigned long long": "uint64",
    "uint64_t": "uint64",
}


class SignatureError(ValueError):
    """A signature that cannot be parsed or uses an unsupported type."""


@dataclass(frozen=True)
class Arg:
    name: str
    dtype: str
    pointer: bool
    const: bool

    @property
    def is_input(self) -> bool:
        return self.pointer and self.const

    @property
    def is_output(self) -> bool:
        return self.pointer and not self.const

    def c_decl(self) -> str:
        c_name = next(c for c, d in C_TYPES.items() if d == self.dtype)
        return f"{'const ' if self.const else ''}{c_name}{'*' if self.pointer else ''} {self.name}"


@dataclass(frozen=True)
class Signature:
    name: str
    args: tuple[Arg, ...]

    @property
    def inputs(self) -> list[Arg]:
        return [a for a in self.args if a.is_input]

    @property
    def outputs(self) -> list[Arg]:
        return [a for a in self.args if a.is_output]

    @property
    def scalars(self) -> list[Arg]:
        return [a for a in self.args if not a.pointer]

    def same_types(self, other: Signature) -> bool:
        """Same argument kinds and types in the same order (names and entry may differ)."""
        return [(a.dtype, a.pointer, a.const) for a in self.args] == [
            (b.dtype, b.pointer, b.const) for b in other.args
        ]

    def __str__(self) -> str:
        return f'extern "C" __global__ void {self.name}({", ".join(a.c_decl() for a in self.args)})'


_HEAD = re.compile(
    r'extern\s+"C"\s+__global__\s+void\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?'
    r"([A-Za-z_]\w*)\s*\(([^)]*)\)",
    re.DOTALL,
)
_QUALIFIERS = {"__restrict__", "__restrict", "restrict", "volatile"}


def parse_signature(text: str) -> Signature:
    """Parse one ``extern "C" __global__ void name(...)`` declaration."""
    written = _strip_comments(text).strip()
    match = _HEAD.match(written)
    if not match:
        raise SignatureError(
            "expected a declaration like 'extern \"C\" __global__ void name(const float* a, int n)'"
        )
    rest = written[match.end():].strip()
    if rest not in ("", ";"):
        raise SignatureError(f"{rest[:40]!r} after the declaration: the signature is one declaration and nothing "
                             "else")
    return _build(match.group(1), match.group(2))


@functools.lru_cache(maxsize=64)
def find_entry(source: str, entry: str) -> Signature | None:
    """The declaration of ``entry`` in a kernel source, or None when it is not written plainly.
    Cached (a few sources' worth): a launch's kernels are looked up on every case and
    configuration it is checked on."""
    for match in _HEAD.finditer(_strip_comments(source)):
        if match.group(1) == entry:
            return _build(entry, match.group(2))
    return None


def other_entry_problem(source: str, name: str | None, signature: Signature, named_by: str = "the launch") -> str | None:
    """Why a launch (or ``named_by``) may not name ``name`` (None when it may, or names no other
    kernel than the signature's): any other must be declared plainly in the source,
    ``extern "C" __global__`` with the signature's parameters."""
    if name is None or name == signature.name:
        return None
    try:
        declared = find_entry(source, name)
    except SignatureError as exc:
        return f"the declaration of {name} cannot be parsed: {exc}"
    if declared is None:
        found = entry_names(source)
        return (f"{named_by} names {name!r}, which the source does not declare as "
                f"'extern \"C\" __global__ void {name}(...)'" + (f"; it declares {', '.join(found)}" if found else ""))
    if not declared.same_types(signature):
        return (f"{name} is declared as '{declared}', but every kernel a case launches takes the signature's "
                f"parameters: '{signature}'")
    return None


def entry_names(source: str) -> list[str]:
    """Every kernel entry a source declares plainly (for "did you mean" hints)."""
    return [match.group(1) for match in _HEAD.finditer(_strip_comments(source))]


def _strip_comments(text: str) -> str:
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.DOTALL)
    return re.sub(r"//[^\n]*", " ", text)


def _build(name: str, params: str) -> Signature:
    params = params.strip()
    if params in ("", "void"):
        return Signature(name, ())
    args = [_parse_arg(p.strip(), i) for i, p in enumerate(params.split(","))]
    seen: set[str] = set()
    for arg in args:
        if arg.name in seen:
            raise SignatureError(f"argument name {arg.name!r} appears twice")
        seen.add(arg.name)
    return Signature(name, tuple(args))


def _parse_arg(text: str, index: int) -> Arg:
    spaced = text.replace("*", " * ")
    tokens = [t for t in spaced.split() if t not in _QUALIFIERS]
    if len(tokens) < 2 or not re.fullmatch(r"[A-Za-z_]\w*", tokens[-1]):
        raise SignatureError(f"argument {index + 1} ({text!r}) needs a type and a name")
    name = tokens[-1]
    type_tokens = tokens[:-1]
    stars = type_tokens.count("*")
    if stars > 1:
        raise SignatureError(f"argument {name!r}: pointers to pointers are not supported")
    pointer = stars == 1
    star_at = type_tokens.index("*") if pointer else len(type_tokens)
    if pointer and "const" in type_tokens[star_at + 1:]:
        type_tokens = type_tokens[:star_at + 1] + [t for t in type_tokens[star_at + 1:] if t != "const"]
    base = [t for t in type_tokens if t not in ("*", "const")]
    const = "const" in type_tokens[:star_at]
    c_type = " ".join(base)
    if c_type not in C_TYPES:
        raise SignatureError(
            f"argument {name!r}: unsupported type {c_type!r}; supported: "
            + ", ".join(sorted(set(C_TYPES)))
        )
    if not pointer and const:
        const = False  # a const scalar is just a scalar
    return Arg(name=name, dtype=C_TYPES[c_type], pointer=pointer, const=const)
