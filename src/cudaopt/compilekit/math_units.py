"""Which math units a compiled module uses, read from its SASS before anything is launched.

A kernel's precision is what its instructions compute with, not what its outputs happen to be
within: a 3xTF32 matrix product passes an FP32 tolerance while it runs on tensor cores, and a
kernel that uses TF32 only above some size passes every small case. So the module's SASS (from
``nvdisasm``, the ``nvidia-cuda-nvdisasm`` wheel) is read whole — every entry and every
function it calls, since a launch's tier may name any entry — and each instruction is put in a
math class by its opcode and modifiers (:func:`classify`). The worker refuses a module with a
class the experiment's policy does not allow (``precision``; wire/precision.py says what is
allowed), and refuses a module whose SASS could not be read: the check never passes by default.

The compile options that trade precision for speed (``--use_fast_math``, ``--ftz=true``,
``--prec-div=false``, ``--prec-sqrt=false``, in any spelling NVRTC takes) count as "approx".
"""

from __future__ import annotations

import re
import subprocess
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from ..wire.precision import allowed_math, needed, policy_text
from ..wire.protocol import MATH_CLASSES, Limits
from ..wire.results import CompileInfo, MathUse
from ..wire.signature import Signature
from .locate import find_tool

DISASSEMBLE_TIMEOUT_S = 120.0

_LINE = re.compile(r"^\s*/\*[0-9a-f]{4,}\*/\s*\{?\s*(?P<body>[^;{}]*?)\s*;?\s*\}?\s*(?:/\*.*)?$")
_PREDICATE = re.compile(r"^@!?U?P(?:T|\d+)$")
_FUNCTION = re.compile(r"^\s*\.type\s+([^\s,]+)\s*,\s*@function")
_LABEL = re.compile(r"^([^\s:]+):\s*$")
_SECTION = re.compile(r"^//-+\s*\.text\.(\S+)")
_ZERO = re.compile(r"^[-|!]*U?RZ\|?$")
_IMMEDIATE = re.compile(r"^[-+]?(?:\d|\.\d|INF\b|QNAN\b|NAN\b)")

# element types of narrow floats: FP8 (E4M3, E5M2) and the FP6/FP4 formats and their scales
_FP8_TYPES = {"E4M3", "E5M2", "E2M1", "E3M2", "E2M3", "UE8M0", "UE4M3"}
_PACKED_HALF = {"HFMA2", "HADD2", "HMUL2", "HMNMX2", "HSET2", "HSETP2"}
_CONVERSIONS = {"F2F", "F2FP", "I2F", "F2I", "I2FP", "F2IP"}
_APPROX_MUFU = {"SIN", "COS", "TANH"}
_INTEGER_MMA = {"IMMA", "IGMMA", "BMMA", "BGMMA", "UTCIMMA"}
_FP8_MMA = {"QMMA", "QGMMA", "UTCQMMA", "OMMA", "UTCOMMA"}
_FP32 = {"FFMA", "FADD", "FMUL", "FMNMX", "FSETP", "FSET", "FCHK", "FRND", "FSWZADD", "FFMA2", "FADD2", "FMUL2",
         "FMNMX2", "FFMA32I", "FADD32I", "FMUL32I"}
_FP64 = {"DFMA", "DADD", "DMUL", "DMNMX", "DSETP", "DSET", "DMMA"}
# every class a tensor-core instruction could be when its operand types are not in its modifiers:
# tcgen05's HMMA (the kind is in a runtime descriptor), or an MMA opcode this table does not know
_ANY_HALF_KIND = ("tf32", "fp16", "bf16")
_ANY_KIND = ("tf32", "fp16", "bf16", "int8", "fp8")

_FAST_MATH = re.compile(r"^--?(?:use[_-]fast[_-]math(?:=(?:true|1))?|ftz(?:=(?:true|1))?|"
                        r"prec[_-](?:div|sqrt)=(?:false|0))$", re.IGNORECASE)


class MathUnreadable(RuntimeError):
    """The module's SASS could not be read (no nvdisasm, or it failed): the message says why."""


@dataclass(frozen=True)
class Instruction:
    function: str
    opcode: str  # "HMMA"
    modifiers: tuple[str, ...]  # ("1684", "F32", "TF32")
    operands: tuple[str, ...]  # without .reuse flags
    text: str  # as nvdisasm prints it, without the address, the predicate and the ';'

    @property
    def mnemonic(self) -> str:
        return ".".join((self.opcode, *self.modifiers))


def disassemble(cubin: bytes) -> str:
    """The cubin's SASS, every function of it; raise :class:`MathUnreadable` when it cannot be had."""
    nvdisasm = find_tool("nvdisasm")
    if nvdisasm is None:
        raise MathUnreadable("nvdisasm was not found: pip install nvidia-cuda-nvdisasm, a dependency of cudaopt")
    with tempfile.TemporaryDirectory(prefix="cudaopt-sass-") as tmp:
        path = Path(tmp) / "kernel.cubin"
        path.write_bytes(cubin)
        try:
            out = subprocess.run([nvdisasm, "--print-code", str(path)], capture_output=True, text=True,
                                 timeout=DISASSEMBLE_TIMEOUT_S, check=False, env={}, cwd=tmp)
        except subprocess.TimeoutExpired:
            raise MathUnreadable(f"nvdisasm did not finish within {DISASSEMBLE_TIMEOUT_S:g} s") from None
        except OSError as exc:
            raise MathUnreadable(f"nvdisasm could not run: {exc}") from None
    if out.returncode != 0 or not out.stdout.strip():
        said = (out.stderr.strip().splitlines() or [f"exit status {out.returncode}"])[-1]
        raise MathUnreadable(f"nvdisasm failed on the cubin: {said}")
    return out.stdout


def instructions(sass: str) -> list[Instruction]:
    """Every instruction of nvdisasm's listing, with the function it belongs to (an entry, or a
    device function the compiler kept as a call)."""
    found, functions, current = [], set(), "?"
    for line in sass.splitlines():
        if m := _SECTION.match(line):
            current = m.group(1)
        elif m := _FUNCTION.match(line):
            functions.add(m.group(1))
        elif (m := _LABEL.match(line)) and m.group(1) in functions:
            current = m.group(1)
        elif m := _LINE.match(line):
            words = m.group("body").split(None, 1)
            if words and _PREDICATE.match(words[0]):
                words = words[1].split(None, 1) if len(words) > 1 else []
            if not words or not words[0][:1].isupper():  # a directive (.byte ...), not an instruction
                continue
            opcode, *modifiers = words[0].split(".")
            operands = tuple(op.strip().removesuffix(".reuse") for op in words[1].split(",")) if len(words) > 1 else ()
            found.append(Instruction(current, opcode, tuple(modifiers), operands, " ".join(words)))
    return found


def classify(ins: Instruction) -> tuple[str, ...]:
    """The math classes of one instruction: the policy's ("tf32", "fp16", "bf16", "int8", "fp8",
    "approx"), or "fp32"/"fp64" (always allowed; shown), or none (integer, memory, control).
    An instruction of several classes needs every one of them allowed."""
    op, mods = ins.opcode, set(ins.modifiers)
    half = "bf16" if any(m.startswith("BF16") for m in mods) else "fp16"
    if "MMA" in op:
        if op == "DMMA":
            return ("fp64",)
        if op in _INTEGER_MMA:
            return ("int8",)
        if op in _FP8_MMA or mods & _FP8_TYPES:
            return ("fp8",)
        if op in ("HMMA", "HGMMA"):
            return ("tf32",) if "TF32" in mods else (half,)  # no type modifier: FP16 operands
        return _ANY_HALF_KIND if op == "UTCHMMA" else _ANY_KIND
    if op in _PACKED_HALF:
        return () if op == "HFMA2" and _constant_move(ins.operands) else (half,)
    if op in _CONVERSIONS:
        if mods & _FP8_TYPES:
            return ("fp8",)
        if any(m.startswith("BF16") for m in mods):
            return ("bf16",)
        if "TF32" in mods:
            return ("tf32",)
        if "F16" in mods or op == "F2FP":  # F2FP packs to FP16 unless it says otherwise
            return ("fp16",)
        return ("fp64",) if "F64" in mods else ("fp32",)
    if op == "MUFU":
        kind = ("approx",) if mods & _APPROX_MUFU else ()
        if any(m.startswith(("F16", "BF16")) for m in mods):
            return (*kind, half)
        return kind or (("fp64",) if any(m.endswith("64H") for m in mods) else ("fp32",))
    if op in _FP32:
        return ("fp32",)
    if op in _FP64:
        return ("fp64",)
    return ()


def _constant_move(operands: tuple[str, ...]) -> bool:
    """``HFMA2 Rx, -RZ, RZ, imm, imm``: how ptxas loads a constant (-0 * 0 + imm), in FP32 code too."""
    return len(operands) >= 4 and bool(_ZERO.match(operands[1]) and _ZERO.match(operands[2])) and \
        all(_IMMEDIATE.match(op) for op in operands[3:])


def function_math(sass: str) -> dict[str, dict[str, MathUse]]:
    """Per function of the listing, per math class: the count, the opcodes and the first instruction."""
    table: dict[str, dict[str, MathUse]] = {}
    for ins in instructions(sass):
        for name in classify(ins):
            _count(table.setdefault(ins.function, {}), name, ins, ins.function)
    return table


def module_math(per_function: dict[str, dict[str, MathUse]]) -> dict[str, MathUse]:
    """The classes summed over the module, each with the first function's first example."""
    total: dict[str, MathUse] = {}
    for uses in per_function.values():
        for name, use in uses.items():
            if name not in total:
                total[name] = use.model_copy(update={"opcodes": dict(use.opcodes)})
                continue
            kept = total[name]
            kept.count += use.count
            for opcode, n in use.opcodes.items():
                kept.opcodes[opcode] = kept.opcodes.get(opcode, 0) + n
    return total


def _count(uses: dict[str, MathUse], name: str, ins: Instruction, function: str) -> None:
    key = f"MUFU.{ins.modifiers[0]}" if ins.opcode == "MUFU" and ins.modifiers else ins.opcode
    use = uses.get(name)
    if use is None:
        uses[name] = MathUse(count=1, opcodes={key: 1}, example=ins.text, function=function)
    else:
        use.count += 1
        use.opcodes[key] = use.opcodes.get(key, 0) + 1


def fast_math_options(options: Iterable[str]) -> list[str]:
    """The compile options that make NVRTC trade precision for speed (the "approx" class)."""
    return [o for o in options if _FAST_MATH.match(o.strip())]


def read_math(cubin: bytes, info: CompileInfo) -> None:
    """Fill ``info.math`` from the cubin's SASS, or ``info.math_error`` with why it could not be read."""
    try:
        info.math = module_math(function_math(disassemble(cubin)))
    except MathUnreadable as exc:
        info.math, info.math_error = None, str(exc)


def precision_refusal(info: CompileInfo, limits: Limits, signature: Signature) -> str | None:
    """Why the policy refuses this module (every class outside it, with its first instruction and
    where), or None; a module whose math was not read is refused, never passed."""
    if info.math is None:
        return ("cannot be held to the precision policy: its math units could not be read from the compiled code "
                f"({info.math_error or 'not read'})")
    policy = policy_text(limits, signature)
    allowed = allowed_math(limits, signature)
    outside = [(name, info.math[name]) for name in MATH_CLASSES if name in info.math and name not in allowed]
    found = [f"{_mnemonic(use.example)} in {use.function} ({name})" for name, use in outside]
    if info.fast_math and "approx" not in allowed:
        found.append(f"compile option {info.fast_math[0]} (approx)")
    if not found:
        return None
    classes = [name for name, _ in outside] + (["approx"] if info.fast_math and "approx" not in allowed else [])
    return (f"uses math outside the precision policy: {'; '.join(found)}. {policy}; {needed(classes)} would "
            f"allow it")


def _mnemonic(example: str) -> str:
    return example.split(None, 1)[0]
